"""Hypothesis strategies for valid profiles, plans and budgets, in one place.

By default every number is exactly representable and every sum of them is
exact (times are multiples of 1/8, bandwidths powers of two, sizes small
integers), so ties between events are real ties rather than rounding
accidents: the spec's tie rules (free before allocate) are then exercised
often and compared exactly. `exact=False` draws general floats instead.
"""

from __future__ import annotations

import math
import random

from hypothesis import strategies as st

from planopt.budget import keep_all_peak, min_budget
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan, need_indices
from planopt.profile import Device, Layer, LayerOption, Profile, backward_frees

ACTIONS = (KEEP, SWAP, RECOMPUTE)
ANY_ACTION = st.sampled_from(ACTIONS)

# Dyadic values: sums of a few dozen of these are exact in float64.
_EIGHTHS = st.integers(min_value=0, max_value=64).map(lambda k: k / 8)
_BANDWIDTHS = st.sampled_from([0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 1024.0])
_LATENCIES = st.sampled_from([0.0, 0.0, 0.125, 0.25, 1.0])
# Positive times start at a microsecond: profiles refuse sub-picosecond times.
_GENERAL_SECONDS = st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=10.0))
_GENERAL_BANDWIDTH = st.floats(min_value=1e-2, max_value=1e4, allow_nan=False)


def seconds(*, exact: bool = True, positive: bool = False) -> st.SearchStrategy[float]:
    """A compute time, zero with a fair probability unless `positive`."""
    if positive:
        if exact:
            return st.integers(min_value=1, max_value=64).map(lambda k: k / 8)
        return st.floats(min_value=1e-3, max_value=10.0)
    body = _EIGHTHS if exact else _GENERAL_SECONDS
    return st.one_of(st.just(0.0), body)


def devices(*, exact: bool = True, infinite: bool | None = None) -> st.SearchStrategy[Device]:
    """A device; bandwidths are sometimes infinite unless `infinite` says otherwise.

    `infinite=True` gives infinite bandwidths and zero latency (copies are free).
    """
    if infinite:
        return st.just(Device("ideal-link", math.inf, math.inf, 0.0))
    bandwidth = _BANDWIDTHS if exact else _GENERAL_BANDWIDTH
    latency = _LATENCIES if exact else st.one_of(st.just(0.0), _GENERAL_SECONDS)
    if infinite is None:
        bandwidth = st.one_of(bandwidth, st.just(math.inf))
    return st.builds(
        Device,
        name=st.just("dev"),
        h2d_bandwidth=bandwidth,
        d2h_bandwidth=bandwidth,
        transfer_latency=latency,
    )


def _bytes(high: int) -> st.SearchStrategy[int]:
    return st.one_of(st.just(0), st.integers(min_value=0, max_value=high))


@st.composite
def layers(
    draw, index: int, *, exact: bool = True, scratch: bool = True, positive_times: bool = False
) -> Layer:
    return Layer.v1(
        name=f"l{index}",
        fwd=draw(seconds(exact=exact, positive=positive_times)),
        bwd=draw(seconds(exact=exact, positive=positive_times)),
        saved_bytes=draw(_bytes(64)),
        fwd_work_bytes=draw(_bytes(32)) if scratch else 0,
        bwd_work_bytes=draw(_bytes(32)) if scratch else 0,
        signature=draw(st.sampled_from([None, "a", "b"])),
    )


@st.composite
def profiles(
    draw,
    min_layers: int = 1,
    max_layers: int = 8,
    *,
    exact: bool = True,
    scratch: bool = True,
    infinite: bool | None = None,
    positive_times: bool = False,
) -> Profile:
    """A valid profile of `min_layers .. max_layers` layers.

    `positive_times` keeps every fwd/bwd above zero (no zero-lifetime tensors).
    """
    n = draw(st.integers(min_value=min_layers, max_value=max_layers))
    return Profile(
        name="hyp",
        device=draw(devices(exact=exact, infinite=infinite)),
        static_bytes=draw(_bytes(100)),
        layers=tuple(
            draw(layers(i, exact=exact, scratch=scratch, positive_times=positive_times))
            for i in range(n)
        ),
    )


@st.composite
def plans(
    draw,
    profile: Profile,
    *,
    actions: st.SearchStrategy[Action] = ANY_ACTION,
    with_swap_wait: bool = True,
) -> Plan:
    """A valid plan for `profile`: `prefetch_at` anywhere in `[need(i), L-1]`,
    `swap_wait` None or in `[i+1, L-1]`."""
    n = len(profile.layers)
    acts = [draw(actions) for _ in range(n)]
    need = need_indices(acts, profile)
    prefetch: list[int | None] = [None] * n
    wait: list[int | None] = [None] * n
    for i, a in enumerate(acts):
        if a is SWAP:
            prefetch[i] = draw(st.integers(min_value=need[i], max_value=n - 1))
            if with_swap_wait and i < n - 1:
                wait[i] = draw(st.one_of(st.none(), st.integers(min_value=i + 1, max_value=n - 1)))
    return Plan.build(acts, prefetch, wait, profile=profile)


@st.composite
def profile_and_plan(draw, min_layers: int = 1, max_layers: int = 8, **profile_kw):
    """`(profile, plan)` with the plan valid for the profile."""
    profile = draw(profiles(min_layers, max_layers, **profile_kw))
    return profile, draw(plans(profile))


# -- version 2: layers with the flag mix of real nets -----------------------------

# kind -> (saves_input, saves_output, has internals, has parameters)
V2_KINDS: dict[str, tuple[bool, bool, bool, bool]] = {
    "conv": (True, False, False, True),
    "linear": (True, False, False, True),
    "norm": (True, False, True, True),  # its input and its statistics
    "relu": (False, True, False, False),
    "softmax": (False, True, False, False),
    "dropout": (False, False, True, False),  # the mask
    "attention": (True, False, True, True),
    "add": (False, False, False, False),
}


@st.composite
def v2_profiles(
    draw, min_layers: int = 1, max_layers: int = 6, *, positive_times: bool = False
) -> Profile:
    """A valid version-2 profile whose layers are drawn from real layers' kinds.

    Each layer's input gradient has the size of its input (`x_i`, the output
    of the layer below) unless that input needs no gradient; layer 0 has none.
    Dyadic times and small sizes, as `profiles` draws them.
    """
    n = draw(st.integers(min_value=min_layers, max_value=max_layers))
    out: list[Layer] = []
    below = 0
    for i in range(n):
        kind = draw(st.sampled_from(sorted(V2_KINDS)))
        saves_in, saves_out, internal, params = V2_KINDS[kind]
        size = draw(st.integers(min_value=0, max_value=48))
        out.append(
            Layer(
                name=f"{kind}{i}",
                fwd=draw(seconds(positive=positive_times)),
                bwd=draw(seconds(positive=positive_times)),
                out_bytes=size,
                saved_bytes=draw(st.integers(1, 24)) if internal else 0,
                saves_input=saves_in,
                saves_output=saves_out,
                input_grad_bytes=below if i > 0 and draw(st.booleans()) else 0,
                param_grad_bytes=draw(_bytes(16)) if params else 0,
                fwd_work_bytes=draw(_bytes(16)),
                bwd_work_bytes=draw(_bytes(16)),
                signature=kind,
            )
        )
        below = size
    return Profile(
        name="hyp-v2",
        device=draw(devices()),
        static_bytes=draw(_bytes(100)),
        layers=tuple(out),
    )


@st.composite
def v2_profile_and_plan(draw, min_layers: int = 1, max_layers: int = 6, **kw):
    """`(profile, plan)`: a version-2 profile and a plan valid for it."""
    profile = draw(v2_profiles(min_layers, max_layers, **kw))
    return profile, draw(plans(profile))


# -- version 3: menus of partial options and signed backward scratch ----------------


@st.composite
def v3_profiles(
    draw, min_layers: int = 1, max_layers: int = 6, *, positive_times: bool = False
) -> Profile:
    """A valid version-3 profile: a version-2 one whose layers may carry a menu
    (0-3 options with `h_k` in `[0, s_i]`) and a negative backward scratch
    anywhere in `[floor, 0)` (the floor: minus what `B_i` frees at its end).

    Layers with a menu get internals (a block's), so options have something
    to drop; values stay dyadic and small, as `v2_profiles` draws them.
    """
    base = draw(v2_profiles(min_layers, max_layers, positive_times=positive_times))
    layers = list(base.layers)
    for i, layer in enumerate(layers):
        if draw(st.integers(0, 2)) == 0:
            continue
        saved = layer.saved_bytes or draw(st.integers(1, 24))
        k = draw(st.integers(1, 3))
        menu = tuple(
            LayerOption(
                name=f"o{j}",
                saved_bytes=draw(st.integers(0, saved)),
                recompute=draw(seconds(positive=positive_times)),
                policy=tuple(range(j)),
                regen_work_bytes=draw(_bytes(8)),
            )
            for j in range(k)
        )
        layers[i] = Layer(**{**_fields(layer), "saved_bytes": saved, "options": menu})
    for i, layer in enumerate(layers):
        if draw(st.integers(0, 2)) == 0:
            floor = backward_frees(tuple(layers), i)
            if floor > 0:
                scratch = -draw(st.integers(1, floor))
                layers[i] = Layer(**{**_fields(layer), "bwd_work_bytes": scratch})
    return base.replace_layers(layers, name="hyp-v3")


def _fields(layer: Layer) -> dict:
    return {f: getattr(layer, f) for f in Layer.__slots__}


@st.composite
def v3_plans(draw, profile: Profile, *, with_swap_wait: bool = True) -> Plan:
    """A valid plan for a /3 profile: any actions, an option (or none) on each kept or
    swapped layer with a menu, `prefetch_at` anywhere in `[need(i), L-1]`."""
    n = len(profile.layers)
    acts = [draw(ANY_ACTION) for _ in range(n)]
    options: list[str | None] = [None] * n
    for i, (a, layer) in enumerate(zip(acts, profile.layers, strict=True)):
        if a is not RECOMPUTE and layer.options:
            options[i] = draw(st.sampled_from([None, *(o.name for o in layer.options)]))
    need = need_indices(acts, profile, options)
    prefetch: list[int | None] = [None] * n
    wait: list[int | None] = [None] * n
    for i, a in enumerate(acts):
        if a is SWAP:
            prefetch[i] = draw(st.integers(min_value=need[i], max_value=n - 1))
            if with_swap_wait and i < n - 1:
                wait[i] = draw(st.one_of(st.none(), st.integers(min_value=i + 1, max_value=n - 1)))
    return Plan.build(acts, prefetch, wait, profile=profile, options=options)


@st.composite
def v3_profile_and_plan(draw, min_layers: int = 1, max_layers: int = 6, **kw):
    """`(profile, plan)`: a version-3 profile and a plan valid for it (options included)."""
    profile = draw(v3_profiles(min_layers, max_layers, **kw))
    return profile, draw(v3_plans(profile))


def budgets(profile: Profile) -> st.SearchStrategy[int]:
    """Budgets in bytes from a little below `min_budget` to a little above keep-all."""
    low = min_budget(profile)
    high = keep_all_peak(profile)
    return st.one_of(
        st.sampled_from([low, high, max(0, low - 1)]),
        st.integers(min_value=max(0, low - 10), max_value=high + 10),
    )


# -- seeded generation for the larger chains (no hypothesis) -------------------


def random_profile(rng: random.Random, n: int, *, exact: bool = False) -> Profile:
    """A random `n`-layer profile; `exact` draws dyadic values (many ties)."""

    def secs() -> float:
        if rng.random() < 0.1:
            return 0.0
        return rng.randint(0, 64) / 8 if exact else rng.uniform(0.0, 5.0)

    def size(high: int) -> int:
        return 0 if rng.random() < 0.1 else rng.randint(0, high)

    if exact:
        bw = [rng.choice([1.0, 4.0, 16.0, 64.0, math.inf]) for _ in range(2)]
        lat = rng.choice([0.0, 0.125, 0.5])
    else:
        bw = [math.inf if rng.random() < 0.1 else rng.uniform(10.0, 1000.0) for _ in range(2)]
        lat = 0.0 if rng.random() < 0.3 else rng.uniform(0.0, 0.5)
    return Profile(
        name=f"random{n}",
        device=Device("dev", bw[0], bw[1], lat),
        static_bytes=size(1000),
        layers=tuple(
            Layer.v1(f"l{i}", secs(), secs(), size(1000), size(300), size(300)) for i in range(n)
        ),
    )


def random_plan(rng: random.Random, profile: Profile) -> Plan:
    """A random valid plan for `profile` (action mix itself drawn at random)."""
    n = len(profile.layers)
    weights = [rng.random() + 0.05 for _ in ACTIONS]
    acts = rng.choices(ACTIONS, weights=weights, k=n)
    need = need_indices(acts, profile)
    prefetch: list[int | None] = [None] * n
    wait: list[int | None] = [None] * n
    for i, a in enumerate(acts):
        if a is SWAP:
            prefetch[i] = rng.randint(need[i], n - 1)
            if i < n - 1 and rng.random() < 0.4:
                wait[i] = rng.randint(i + 1, n - 1)
    return Plan.build(acts, prefetch, wait, profile=profile)
