"""The relaxation's numbers for one net, shared by its two builders.

`solvers.model.relaxation` (the PuLP reference, whose module doc says what
each row means) and `solvers.model.relaxation_highs` (the same rows handed
to HiGHS as arrays) both read one `Coefficients` record and one choice of
memory-row windows (`window_starts`). They live here, below both builders,
so the builders import them and never each other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from planopt.profile import Profile
from solvers.model.units import linear_memory, time_scale


@dataclass(frozen=True)
class OptionCoefficients:
    """One option of a layer's menu (cost model v3, 12.2) in the relaxation's units.

    Kept, the partial layer holds `s` (its kept internals `h_k`, plus its
    output when read) and, inside the next layer's forward, `internals`
    (`h_k`); swapped, it copies `s` each way (`d_out`, `d_in`); either way
    its regeneration adds `recompute` (`r_k`) to the compute stream before
    its backward.
    """

    s: float
    internals: float
    recompute: float
    d_out: float
    d_in: float


@dataclass(frozen=True)
class Coefficients:
    """Every number of the relaxation's rows for one net, computed once.

    Time in linear units, memory in units of the largest saved tensor. The
    budget enters only through `capacity` (the memory rows' right-hand
    sides), so one model serves every budget of a net. Both builders (PuLP,
    the reference; HiGHS directly, `relaxation_highs`) read these numbers.
    """

    n: int
    t_ideal: float  # linear units: the makespan's lower bound
    f: tuple[float, ...]
    b: tuple[float, ...]
    s: tuple[float, ...]  # bytes a kept layer holds, a swapped one copies
    out: tuple[float, ...]
    internals: tuple[float, ...]
    d_out: tuple[float, ...]
    d_in: tuple[float, ...]
    fwd_fixed: tuple[float, ...]  # inside F_i: its internals, output and scratch
    backward_fixed: tuple[float, ...]
    has_fwd: tuple[bool, ...]
    has_bwd: tuple[bool, ...]
    counts_input_once: tuple[bool, ...]  # B_i reads x_i, which the row counts once
    f_end: tuple[float, ...]
    b_upto: tuple[float, ...]
    out_rate: float  # memory units D2H moves per linear time unit
    in_rate: float
    memory_unit: float
    static_bytes: int
    seconds_per_unit: float
    # Cost model v3: each layer's menu (empty without one), and the input
    # `x_i` a partial layer `i` holds inside `B_i` when no other term of its
    # row counts it (0 where the row's other terms may).
    options: tuple[tuple[OptionCoefficients, ...], ...] = ()
    partial_input: tuple[float, ...] = ()
    # Per t: the least saved internals per linear time unit of forward over the
    # runs `j .. t-1` (`hang_slopes`); empty when the hanging-run rows are left out.
    hang_slope: tuple[float, ...] = ()

    @property
    def option_count(self) -> int:
        """Options over every layer's menu."""
        return sum(len(menu) for menu in self.options)

    @property
    def forward_total(self) -> float:
        return self.f_end[-1]

    def capacity(self, budget: float) -> float:
        """What `budget` leaves for tensors, in memory units."""
        return (budget - self.static_bytes) / self.memory_unit

    def seconds(self, value: float) -> float:
        return value * self.seconds_per_unit


def exact_prefix_sums(values: list[float]) -> tuple[float, ...]:
    """Each prefix's sum correctly rounded (what `math.fsum` of the prefix gives), in O(n).

    Floats are dyadic rationals, so a `Fraction` accumulator is exact; a
    prefix `fsum` per layer was quadratic (10^4 layers: seconds before the
    solver starts).
    """
    total = Fraction(0)
    sums = []
    for value in values:
        total += Fraction(value)
        sums.append(float(total))
    return tuple(sums)


def coefficients(profile: Profile) -> Coefficients:
    """The relaxation's numbers for `profile` (see the module doc for the rows)."""
    layers = profile.layers
    n = len(layers)
    dev = profile.device
    # Version 2: a layer's products that every plan's backward reads (its
    # internals, its output when B_i or B_{i+1} reads it) are what keeping it
    # holds and what swapping it copies at least (`copied`); a recompute block
    # above may add its output, which only makes real plans use more.
    saves_in = [x.saves_input for x in layers] + [False]
    read = [x.saves_output or saves_in[i + 1] for i, x in enumerate(layers)]
    copied = [x.saved_bytes + (x.out_bytes if read[i] else 0) for i, x in enumerate(layers)]
    times = time_scale(profile)
    t_unit = times.from_linear(1.0)  # seconds per linear unit
    memory = linear_memory(profile)
    m_unit = memory.unit
    f = [times.linear(layer.fwd) for layer in layers]
    b = [times.linear(layer.bwd) for layer in layers]
    # What B_t needs besides kept products below: what it reads, the gradients
    # g_t and g_{t+1}, every parameter gradient allocated so far, its scratch.
    backward_fixed = []
    param_grads = 0
    for t in range(n - 1, -1, -1):
        x = layers[t]
        param_grads += x.param_grad_bytes
        reads = x.saved_bytes + (x.out_bytes if x.saves_output else 0)
        reads += layers[t - 1].out_bytes if t > 0 and x.saves_input else 0
        grads = x.input_grad_bytes + (layers[t + 1].input_grad_bytes if t + 1 < n else 0)
        backward_fixed.append(memory.units(reads + grads + param_grads + x.bwd_work_bytes))
    backward_fixed.reverse()
    options = tuple(
        tuple(
            OptionCoefficients(
                s=memory.units(kept),
                internals=memory.units(o.saved_bytes),
                recompute=times.linear(o.recompute),
                d_out=times.linear(dev.d2h_seconds(kept)),
                d_in=times.linear(dev.h2d_seconds(kept)),
            )
            for o in x.options
            for kept in [o.saved_bytes + (x.out_bytes if read[i] else 0)]
        )
        for i, x in enumerate(layers)
    )
    # A partial layer reads x_t inside B_t (12.2, item 1). The row counts x_t
    # already when B_t reads it anyway (`saves_input`), and may count it in
    # layer t-1's kept or swapped bytes when that layer's output is read; only
    # where neither holds is it added, so nothing is counted twice.
    partial_input = tuple(
        memory.units(layers[t - 1].out_bytes) if t > 0 and not read[t - 1] else 0.0
        for t in range(n)
    )
    return Coefficients(
        n=n,
        t_ideal=times.linear(profile.t_ideal),
        f=tuple(f),
        b=tuple(b),
        s=tuple(memory.units(c) for c in copied),
        out=tuple(memory.units(x.out_bytes) for x in layers),
        internals=tuple(memory.units(x.saved_bytes) for x in layers),
        d_out=tuple(times.linear(dev.d2h_seconds(c)) for c in copied),
        d_in=tuple(times.linear(dev.h2d_seconds(c)) for c in copied),
        fwd_fixed=tuple(
            memory.units(x.saved_bytes) + memory.units(x.out_bytes) + memory.units(x.fwd_work_bytes)
            for x in layers
        ),
        backward_fixed=tuple(backward_fixed),
        has_fwd=tuple(x.fwd > 0 for x in layers),
        has_bwd=tuple(x.bwd > 0 for x in layers),
        counts_input_once=tuple(
            i > 0 and x.saves_input and read[i - 1] for i, x in enumerate(layers)
        ),
        f_end=exact_prefix_sums(f),
        b_upto=exact_prefix_sums(b),
        out_rate=dev.d2h_bandwidth * t_unit / m_unit,
        in_rate=dev.h2d_bandwidth * t_unit / m_unit,
        memory_unit=m_unit,
        static_bytes=profile.static_bytes,
        seconds_per_unit=t_unit,
        options=options,
        partial_input=partial_input,
        hang_slope=hang_slopes(f, [memory.units(x.saved_bytes) for x in layers]),
    )


# Nets up to this many layers get the hanging-run rows (`hang_slopes` is quadratic).
# At 2,048 the 2,000-layer random CNN's cold LP took 5.8 s against 4.5 s without them,
# and `lower-bound` at 5 s returned T_ideal there (experiments/results/certificates.md).
HANG_ROWS_UP_TO = 1024


def hang_slopes(f: list[float], internals: list[float]) -> tuple[float, ...]:
    """Per t, a slope `a_t` with `a_t * F <= I` for every run `j .. t-1` below t, where F
    is the run's forward time and I its saved internals (0 where none is positive).

    A recompute run hanging below `B_t` (regenerated at step `t` or above) holds its
    internals inside `B_t`; the rows charge `a_t` per unit of the time it hides
    (`solvers.model.relaxation`). Rounded down, so the rows stay below any plan.
    Empty past `HANG_ROWS_UP_TO` layers: the rows are then left out.
    """
    n = len(f)
    if n > HANG_ROWS_UP_TO:
        return ()
    fs = np.asarray(f, dtype=np.float64)
    ins = np.asarray(internals, dtype=np.float64)
    out = [0.0] * n
    for t in range(1, n):
        # sums of the runs t-1 .. j for j = t-1 down to 0 (no cancellation: all >= 0)
        time = np.cumsum(fs[t - 1 :: -1])
        held = np.cumsum(ins[t - 1 :: -1])
        positive = time > 0
        if positive.any():
            best = float(np.min(held[positive] / time[positive]))
            out[t] = max(0.0, best * (1 - 1e-6))
    return tuple(out)


def window_starts(top: int, n: int) -> list[int]:
    """The `k` of the windows `k .. top-1` a memory row looks at.

    Any subset of windows gives a valid bound; all of them would make the
    program cubic. The window from layer 0 carries most of the strength (on
    the bundled GPT decoders it alone gives the whole gain); on nets up to
    `_FULL_WINDOWS_UP_TO` layers the nearest `_NEAR` and every power of two
    further down add a little (median bound-to-optimum gap 0.68% -> 0.61% on
    the suite's small instances). Beyond that the extra rows made the LP 4x
    slower for nothing measurable.
    """
    if n > _FULL_WINDOWS_UP_TO:
        return sorted({0, *range(max(0, top - 2), top)})
    ks = {0, *range(max(0, top - _NEAR), top)}
    step = _NEAR * 2
    while top - step > 0:
        ks.add(top - step)
        step *= 2
    return sorted(k for k in ks if k < top)


_NEAR = 8
_FULL_WINDOWS_UP_TO = 256
