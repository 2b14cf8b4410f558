"""A swapped layer with a partial option (cost model v3, 12.2 item 3 and 12.5) runs.

Its kept subset (the selective-checkpoint cache of the option's region) is
copied to host after `F_i` and back at `prefetch_at`, through the copy engine
of the whole-layer swap; the rest is regenerated before `B_i`
(`planopt.runtime.sacswap`). Before, both runtimes refused such plans
(`InvalidPlanError`: "kept layer only").

Evidence from outside the runtime: three AdamW steps compared bitwise with
plain PyTorch; the peak measured by the live-storage tracker (and torch's
`MemTracker` for `apply`) against `planopt.simulate` on the same /3 profile,
within the fidelity tolerance (+2%, -0.5%), over an instant link and an
emulated slow one (copies on host threads, each longer than the forward);
the bytes copied are the cost model's `c_i = h_k (+ o_i if read)`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.utils.checkpoint import checkpoint  # noqa: E402

import planopt  # noqa: E402
from planopt import Plan  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE, SWAP  # noqa: E402
from planopt.runtime import (  # noqa: E402
    Executor,
    apply,
    measure_step,
    profile_in_place,
    reference_model,
    threadcopies,
)
from planopt.runtime.hf import hf_available, hf_model  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.profiler import profile_with_release  # noqa: E402
from planopt.runtime.regions import step_loss  # noqa: E402
from planopt.runtime.sacswap import OptionCache, SacInternalsError  # noqa: E402
from planopt.simulate import Scorer  # noqa: E402
from tests.late_workers import LateTime, start_apply_copies_late  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)
# A copy of a few KiB takes tens of milliseconds: longer than a tiny model's forward.
SLOW = planopt.Device("slow", 2e5, 2e5, 1e-3)
LINKS = {"instant": INSTANT, "slow": SLOW}
# apply's models copy hundreds of KiB: a slow link whose copies last about a block's
# forward. (Below 20 MB/s one swapped-option plan of tiny GPT-2 measures 4.8% above the
# prediction, measured when copies back were allocated at their enqueue, docs/runtime.md.)
APPLY_LINKS = {"instant": INSTANT, "slow": planopt.Device("slow", 2e8, 2e8, 1e-4)}
OVER, UNDER = 0.02, 0.005  # the fidelity tolerance
STEPS = 3
HF = pytest.mark.skipif(not hf_available(), reason="needs transformers")


def _option(layer) -> str | None:
    """The smallest option that keeps something (so there is a subset to swap)."""
    kept = [o for o in layer.options if o.saved_bytes > 0]
    return min(kept, key=lambda o: o.saved_bytes).name if kept else None


def swap_option_plans(prof: planopt.Profile, ends_kept: bool) -> dict[str, Plan]:
    """Every layer with a menu swapped with an option; every other one so, the others
    kept; and swapped options with recompute runs around them (`ends_kept`: apply's
    prefix and suffix)."""
    n = len(prof)
    inner = range(1, n - 1) if ends_kept else range(n)
    first = next(i for i in inner if _option(prof.layers[i]))
    patterns = {
        "all": [SWAP if i in inner else KEEP for i in range(n)],
        "alternate": [SWAP if i in inner and i % 2 else KEEP for i in range(n)],
        "runs": [
            (SWAP, RECOMPUTE, RECOMPUTE)[(i - first) % 3] if i in inner and i < n - 1 else KEEP
            for i in range(n)
        ],
    }
    plans = {}
    for name, acts in patterns.items():
        opts = [
            _option(layer) if a is SWAP else None
            for a, layer in zip(acts, prof.layers, strict=True)
        ]
        assert any(opts), name
        plans[name] = Plan.build(acts, options=opts, profile=prof)
    return plans


def copied_bytes(prof: planopt.Profile, plan: Plan) -> int:
    """The cost model's bytes copied out: `c_i` summed over the swapped layers."""
    runs = Scorer(prof).runs(plan.actions, plan.options)
    total = 0
    for i, (action, name) in enumerate(zip(plan.actions, plan.options, strict=True)):
        if action is SWAP:
            layer = prof.layers[i]
            kept = {o.name: o.saved_bytes for o in layer.options}.get(name, layer.saved_bytes)
            total += kept + (layer.out_bytes if runs.out_read[i] else 0)
    return total


# -- the chain executor ---------------------------------------------------------------

CHAINS = [
    ("gpt", False),
    ("resnet", False),  # conv-BN blocks
    pytest.param("gpt2", True, marks=HF),
    pytest.param("llama", True, marks=HF),
]


@functools.cache
def chain_setup(name: str, hf: bool, link: str):
    ref = hf_model(name, "tiny", seed=4) if hf else reference_model(name, "tiny", seed=4)
    batch = ref.batch(seed=5)
    prof, release = profile_with_release(
        ref.chain, batch, ref.loss_fn, iterations=1, warmup=0, link=LINKS[link]
    )
    layers = [
        dataclasses.replace(layer, bwd_work_bytes=layer.bwd_work_bytes - r)
        for layer, r in zip(prof.layers, release, strict=True)
    ]
    return ref, batch, prof.replace_layers(layers)


def _train_chain(chain, batch, loss_fn, plan=None, prof=None, link=None):
    torch.manual_seed(1)
    opt = torch.optim.AdamW(chain.parameters(), lr=1e-2)
    ex = None if plan is None else Executor(chain, plan, profile=prof, loss_fn=loss_fn, link=link)
    stats = []
    for _ in range(STEPS):
        if ex is None:
            loss_fn(chain(batch[0]), batch[1]).backward()
        else:
            with ex:
                ex(*batch).backward()
            stats.append(ex.last_step)
        opt.step()
        opt.zero_grad()
    if ex is not None:
        ex.release_host_memory()
    state = [t.detach().clone() for t in chain.state_dict().values()]
    return state, torch.get_rng_state(), stats


@pytest.mark.parametrize("link", ["instant", "slow"])
@pytest.mark.parametrize(("name", "hf"), CHAINS)
def test_the_executor_trains_swapped_options_exactly_and_copies_the_kept_subset(name, hf, link):
    ref, batch, prof = chain_setup(name, hf, link)
    plain = _train_chain(copy.deepcopy(ref.chain), batch, ref.loss_fn)
    for kind, plan in swap_option_plans(prof, ends_kept=False).items():
        mine = _train_chain(copy.deepcopy(ref.chain), batch, ref.loss_fn, plan, prof, LINKS[link])
        assert all(torch.equal(a, b) for a, b in zip(plain[0], mine[0], strict=True)), kind
        assert torch.equal(plain[1], mine[1]), kind
        for stats in mine[2]:
            assert stats.complete and stats.held_at_end == 0
            assert stats.bytes_out == stats.bytes_back == copied_bytes(prof, plan), kind
            assert stats.recomputed_layers == plan.count(RECOMPUTE)


@pytest.mark.parametrize("link", ["instant", "slow"])
@pytest.mark.parametrize(("name", "hf"), CHAINS)
def test_the_executor_holds_the_predicted_peak_with_swapped_options(name, hf, link):
    _check_peaks(name, hf, link)


@pytest.mark.parametrize(("name", "hf"), CHAINS)
def test_the_executor_holds_the_predicted_peak_when_copy_workers_wake_up_late(
    name, hf, monkeypatch
):
    """The peak is the plan's, not the threads' timing: copy workers that wake up 20 ms
    after each copy's end (a CPU-starved machine) hold nothing the cost model freed.
    Before, resnet's 'alternate' plan measured 33,744 B for 31,696 predicted (-6.1%, as
    on a loaded CI machine): at `R_1` the worker of layer 1's copy back still held the
    buffer of `x_2`, whose last reader `B_2` had ended."""
    monkeypatch.setattr(threadcopies, "time", LateTime(0.02))
    _check_peaks(name, hf, "slow")


def _check_peaks(name: str, hf: bool, link: str) -> None:
    ref, batch, prof = chain_setup(name, hf, link)
    for kind, plan in swap_option_plans(prof, ends_kept=False).items():
        m = measure(
            ref.chain, plan, batch, ref.loss_fn, profile=prof, iterations=0, warmup=0,
            link=LINKS[link],
        )  # fmt: skip
        predicted = planopt.simulate(prof, plan).peak_bytes
        assert -UNDER <= (predicted - m.peak_bytes) / m.peak_bytes <= OVER, (
            kind, predicted, m.peak_bytes,
        )  # fmt: skip
        assert m.stats.held_at_end == 0


# -- apply ------------------------------------------------------------------------------

FAMILIES = [pytest.param(f, marks=HF) for f in ("gpt2", "llama")] + ["resnet"]


@functools.cache
def model_setup(family: str, link: str):
    from tests.tiny_models import tiny

    model, batch, loss_fn = tiny(family, size="act")
    prof = profile_in_place(
        model, batch, loss_fn, link=APPLY_LINKS[link], iterations=1, warmup=0, signed_scratch=True
    )
    return model, batch, loss_fn, prof


def _train_model(model, batch, loss_fn, make=None):
    torch.manual_seed(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    handle = make(model) if make else None
    for _ in range(STEPS):
        step_loss(model, batch, loss_fn).backward()
        opt.step()
        opt.zero_grad()
    if handle is not None:
        handle.remove()
    return [t.detach().clone() for t in model.state_dict().values()]


def _apply(model, *, plan, prof, link):
    return apply(model, plan, prof, link=link)


@pytest.mark.parametrize("link", ["instant", "slow"])
@pytest.mark.parametrize("family", FAMILIES)
def test_apply_trains_swapped_options_exactly(family, link):
    model, batch, loss_fn, prof = model_setup(family, link)
    plain = _train_model(copy.deepcopy(model), batch, loss_fn)
    for kind, plan in swap_option_plans(prof.profile, ends_kept=True).items():
        make = functools.partial(_apply, plan=plan, prof=prof, link=APPLY_LINKS[link])
        planned = _train_model(copy.deepcopy(model), batch, loss_fn, make)
        assert all(torch.equal(a, b) for a, b in zip(plain, planned, strict=True)), kind


@pytest.mark.parametrize("tracker", ["planopt", "torch"])
@pytest.mark.parametrize("link", ["instant", "slow"])
@pytest.mark.parametrize("family", FAMILIES)
def test_apply_holds_the_predicted_peak_with_swapped_options(family, link, tracker):
    model, batch, loss_fn, prof = model_setup(family, link)
    for kind, plan in swap_option_plans(prof.profile, ends_kept=True).items():
        m = copy.deepcopy(model)
        with apply(m, plan, prof, link=APPLY_LINKS[link]) as handle:
            measured = measure_step(m, batch, loss_fn, handle=handle, tracker=tracker)
        assert measured.predicted_bytes == planopt.simulate(prof.profile, plan).peak_bytes
        assert -UNDER <= measured.error <= OVER, (
            kind,
            measured.predicted_bytes,
            measured.peak_bytes,
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_apply_holds_the_predicted_peak_when_copy_workers_start_late(family, monkeypatch):
    """Copy workers that start each copy 30 ms late (a CPU-starved machine) over the
    instant link: before, tiny Llama's 'alternate' plan measured 5.3% over (12 ms late:
    1.7%, as a CI run read), a swapped block's kept subset alive in the suffix's forward."""
    start_apply_copies_late(monkeypatch, 0.03)
    model, batch, loss_fn, prof = model_setup(family, "instant")
    for kind, plan in swap_option_plans(prof.profile, ends_kept=True).items():
        m = copy.deepcopy(model)
        with apply(m, plan, prof, link=APPLY_LINKS["instant"]) as handle:
            measured = measure_step(m, batch, loss_fn, handle=handle)
        assert -UNDER <= measured.error <= OVER, (
            kind,
            measured.predicted_bytes,
            measured.peak_bytes,
        )


# -- the cache itself -----------------------------------------------------------------


def _cached_region(cache: OptionCache, x: torch.Tensor) -> torch.Tensor:
    # positions: sin (0) saved, then mul (1) recomputed
    return checkpoint(lambda t: (t.sin() * 2).cos(), x, use_reentrant=False, context_fn=cache)


def test_a_restored_cache_entry_changed_in_place_is_refused_as_sac_refuses_it():
    """The copy back is a fresh tensor: the version check must still see a change
    made to the cached tensor before it was swapped."""
    x = torch.randn(8, requires_grad=True)
    cache = OptionCache((0,), False, "layer 0")
    out = _cached_region(cache, x)
    storage = cache.contexts[0].storage
    (wrapper,) = [w for entries in storage.values() for w in entries.values() if hasattr(w, "val")]
    wrapper.val.add_(0)  # an in-place change after caching (the version moves)
    views = cache.take(set(), out, False)
    assert [v.numel() for v in views] == [8 * 4] and wrapper.val is None
    cache.restore([v.clone() for v in views])
    with pytest.raises(RuntimeError, match="has been mutated"):
        out.sum().backward()


def test_a_restored_cache_gives_the_gradients_of_plain_autograd():
    x = torch.randn(8, requires_grad=True)
    cache = OptionCache((0,), False, "layer 0")
    out = _cached_region(cache, x)
    views = cache.take(set(), out, False)
    cache.restore([v.clone() for v in views])
    out.sum().backward()
    y = x.detach().clone().requires_grad_()
    (y.sin() * 2).cos().sum().backward()
    assert torch.equal(x.grad, y.grad)


def test_a_torch_without_the_cache_is_refused_with_a_planopt_error():
    cache = OptionCache((0,), False, "layer 3 (block)")
    cache.contexts = (object(), object())
    with pytest.raises(SacInternalsError, match=r"layer 3 \(block\).*selective-checkpoint cache"):
        cache.take(set(), torch.zeros(1), False)


# -- what the planners return ---------------------------------------------------------------


@HF
def test_the_planners_swapped_options_run_under_apply():
    """auto, lns and exact give tiny Llama's blocks swapped options at these budgets
    (work limits, so the same plans anywhere); each trains bitwise and holds its peak.
    Before: `apply` refused them, and `solve_pinned` dropped a swapped block's option."""
    from planopt.runtime import solve_pinned

    model, batch, loss_fn, prof = model_setup("llama", "slow")
    plain = _train_model(copy.deepcopy(model), batch, loss_fn)
    swapped = 0
    for method, budget in (("auto", "35%"), ("lns", "50%"), ("exact", "35%")):
        plan = solve_pinned(prof.profile, budget, method, work_limit=2).plan
        options = plan.options or (None,) * len(plan)
        swapped += sum(
            o is not None and a is SWAP for a, o in zip(plan.actions, options, strict=False)
        )
        make = functools.partial(_apply, plan=plan, prof=prof, link=APPLY_LINKS["slow"])
        planned = _train_model(copy.deepcopy(model), batch, loss_fn, make)
        assert all(torch.equal(a, b) for a, b in zip(plain, planned, strict=True)), method
        m = copy.deepcopy(model)
        with apply(m, plan, prof, link=APPLY_LINKS["slow"]) as handle:
            measured = measure_step(m, batch, loss_fn, handle=handle)
        assert -UNDER <= measured.error <= OVER, (method, measured)
    assert swapped >= 3
