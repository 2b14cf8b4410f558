"""Deterministic work: what a search spends, counted so that any machine counts the same.

NOTE (the unit): one **work unit** is, by calibration, one CPU-second of
this project's reference machine (a 2-core x86-64 CI box), within 30% per
method (experiments/results/work_limits.md says which still miss it; docs/
solvers.md, "The unit"). It is charged from
counts, never from a clock, so a solve stopped by its work limit stops at
the same point on any machine under any load. Two layers:

* **raw counts**, charged by the parts a method runs: scoring a plan with
  the simulator costs `SIMULATION_UNITS_PER_LAYER` per layer; CP-SAT
  charges its deterministic time (`solvers.backends.cpsat`,
  `UNITS_PER_DETERMINISTIC_SECOND` a second); the MIP/LP back-ends their
  simplex iterations and nodes, the dynamic program its labels, at the
  rates in their modules;
* **a rate per method** (`METHOD_RATES`, times a factor of the net's
  size, `SIZE_FACTORS`): what one raw count of that
  method cost in CPU-seconds, measured on the reference machine by
  `experiments/work_rates.py` over several nets and limits (the figures:
  experiments/results/work_limits.md). A solve's meter is
  `WorkMeter.calibrated(work_limit, rate)`: the limit is divided by the
  method's rate into raw counts, and `Solution.work_used` is its raw
  counts times that rate. Before (issue 25, item 12) every method took raw
  counts as units, and a unit cost 0.15 to 13 CPU-seconds by method.

Internal shares and caps (a warm start's `STARTS_WORK`, a window's default
work) are raw counts of the method that runs them; options given in units
(`window_work`) are converted with `WorkMeter.raw`.

A `WorkMeter` is the running count of one solve; a share of it (for a warm
start, a bound, a polish) is a child meter that charges its parent too, so
the solve's total is always the sum of what its parts spent.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from planopt.errors import SolverOptionError

# Scoring a plan of L layers costs L times this (measured: 10,000 layers in
# about 10 ms on the reference machine).
SIMULATION_UNITS_PER_LAYER = 1e-6
# What a simulation costs besides its layers (the call, the plan's lists): on
# the reference machine 70 us at 24 layers, 73 at 30, 115 at 100 against the
# 24, 30 and 100 charged. The methods' rates absorb it on their calibration
# nets; a step that runs hundreds of tries on a small chain, outside what its
# method was calibrated on, pays it itself (`solvers.swap_start`).
SIMULATION_CALL_UNITS = 45e-6


# Work units per raw count, per registered method: what one count of the
# method's own counters cost in CPU-seconds of the reference machine
# (experiments/work_rates.py; experiments/results/work_limits.md).
METHOD_RATES: dict[str, float] = {
    # baselines: a simulation or a few, plus building the plan (per layer)
    "keep-all": 3.5,
    "all-swap": 4.3,
    # NOTE: 0.74 until the simulator's menus (v3) made its two simulations and
    # its plan cost more: 1.57-1.66 CPU-s a unit at 0.74 on 20,000-50,000 layers
    "sqrt-n": 1.19,
    "superneurons": 7.6,
    "pooch": 1.0,
    # the exact methods: starters, relaxation, CP-SAT (3.4 counts a deterministic second)
    "exact": 1.15,
    "recompute-only": 1.0,
    # NOTE: 1.25 until its keep/swap greedy start (solvers.swap_start) came:
    # 0.61-1.09 CPU-s a unit there, the start's small-chain tries charged a third
    "swap-only": 0.92,
    "remat-dp": 0.225,
    # brute force: 5-6-layer simulations, whose fixed cost per call (~60 us) dominates
    "brute-force": 11.5,
    "blocks": 0.85,
    "lns": 1.1,
    # auto hands its meter to the method it picks (`WorkMeter.rebase`): its own
    # choice (the repeats search) counts nothing, so this rate never applies.
    "auto": 1.0,
    # NOTE: 0.6 while its MIP was counted per HiGHS callback (0.94-5.2 CPU-s a
    # unit on 6 nets); 0.69-1.37 at 0.42 by rows and LP iterations; 0.82-1.12 at
    # 0.41 with its cut rounds counted by columns (solvers.model.relaxation_mip);
    # 1.03-2.17 once the relaxation had its hanging-run rows, 0.76-1.12 with its LP
    # also charged by rows squared and hanging-run columns (`lp_surcharge`)
    "lower-bound": 0.41,
}
# A method registered at run time without a rate of its own: its counts are its units.
DEFAULT_RATE = 1.0

# How a method's rate changes with the net's size (issue 25, item 12): points
# `(layers, factor)` measured by experiments/work_rates.py, the rate at L layers
# being `METHOD_RATES[method]` times the factor interpolated linearly in log L
# between the points, and the end point's factor outside them (no
# extrapolation past what was measured). A method not listed has factor 1.
# NOTE (why): one rate per method left a unit at 0.63 CPU-s for recompute-only
# on 40 layers and 1.47 on 120 (CP-SAT's CPU per deterministic second grows
# with the model), and at 1.2-1.4 for blocks on GPT-12 (160 layers, where a
# simulation's fixed cost is a larger part of it) against 0.8 on 300 layers.
SIZE_FACTORS: dict[str, tuple[tuple[int, float], ...]] = {
    # CP-SAT on the keep/recompute model: 0.56-0.70 CPU-s a unit on 40 layers,
    # 1.0-1.2 on 120-160, 0.9-1.57 on 300-316, 0.91-1.03 on 628, at factor 1
    "recompute-only": ((40, 0.63), (120, 1.08), (300, 1.22), (628, 1.1)),
    # blocks (and auto where it picks blocks): 1.23-1.81 on 40 layers, 1.23-1.47
    # on 120, 1.11-1.26 on GPT-12 (160), 0.92-1.33 on 300-628, at factor 1
    "blocks": ((40, 1.65), (120, 1.49), (300, 1.27)),
}


def size_factor(method: str, layers: int) -> float:
    """The factor of `method`'s rate on a net of `layers` layers (see `SIZE_FACTORS`)."""
    points = SIZE_FACTORS.get(method)
    if not points:
        return 1.0
    if layers <= points[0][0]:
        return points[0][1]
    for (n0, f0), (n1, f1) in itertools.pairwise(points):
        if layers <= n1:
            t = math.log(layers / n0) / math.log(n1 / n0)
            return f0 + t * (f1 - f0)
    return points[-1][1]


def method_rate(method: str, layers: int | None = None) -> float:
    """Work units per raw count of `method` (its calibration constant), on a net of
    `layers` layers where given (`SIZE_FACTORS`); a function of its inputs alone."""
    rate = METHOD_RATES.get(method, DEFAULT_RATE)
    return rate if layers is None else rate * size_factor(method, layers)


def check_work_limit(work_limit: float | None) -> float | None:
    """A work limit must be None or a finite number of work units > 0."""
    if work_limit is None:
        return None
    if (
        isinstance(work_limit, bool)
        or not isinstance(work_limit, int | float)
        or not (math.isfinite(work_limit) and work_limit > 0)
    ):
        raise SolverOptionError(
            f"work_limit must be a finite number of work units > 0, got {work_limit!r}"
        )
    return float(work_limit)


@dataclass(eq=False)
class WorkMeter:
    """Work spent so far against an optional limit; `share` makes a child meter.

    Mutable on purpose: it is the one counter a solve threads through its
    parts (a `Problem` holds it). Children charge their parents, so a share
    can never spend more than its parent has left.
    """

    limit: float | None = None
    used: float = 0.0
    parent: WorkMeter | None = field(default=None, repr=False)
    rate: float = 1.0

    @classmethod
    def calibrated(cls, work_limit: float | None, rate: float) -> WorkMeter:
        """The meter of a solve limited to `work_limit` work units of a method whose
        raw counts cost `rate` units each (see `METHOD_RATES`)."""
        limit = None if work_limit is None else work_limit / rate
        return cls(limit=limit, rate=rate)

    def raw_used(self) -> float:
        """What the method's counters charged here, before its rate."""
        return self.used

    def units_used(self) -> float:
        """The work spent here in work units (CPU-seconds of the reference machine)."""
        return self.used * self.rate

    def rebase(self, rate: float) -> None:
        """Count on at `rate`, the limit and the work so far keeping their value in units.

        For a method that hands its whole solve to another (`auto`): the work is
        then counted at the rate of the method that does it. Only on a solve's
        own meter (no parent), before any share of it is made.
        """
        if self.parent is not None:
            raise ValueError("only a solve's own meter can change its rate")
        if self.limit is not None:
            self.limit = self.limit * self.rate / rate
        self.used = self.used * self.rate / rate
        self.rate = rate

    def raw(self, units: float) -> float:
        """`units` work units as this meter's raw counts (for options given in units)."""
        return units / self.rate

    def charge(self, units: float) -> None:
        """Count `units` raw counts here and in every ancestor (in each one's own counts,
        where a share runs a part at another rate)."""
        meter: WorkMeter | None = self
        while meter is not None:
            meter.used += units
            parent = meter.parent
            if parent is not None and parent.rate != meter.rate:
                units = units * meter.rate / parent.rate
            meter = parent

    def left(self) -> float | None:
        """Units left before this meter or an ancestor runs out (None: unlimited)."""
        lefts = []
        meter: WorkMeter | None = self
        while meter is not None:
            if meter.limit is not None:
                rest = max(0.0, meter.limit - meter.used)
                lefts.append(rest if meter.rate == self.rate else rest * meter.rate / self.rate)
            meter = meter.parent
        return min(lefts) if lefts else None

    def exhausted(self) -> bool:
        left = self.left()
        return left is not None and left <= 0.0

    def share(
        self, fraction: float = 1.0, cap: float | None = None, rate: float | None = None
    ) -> WorkMeter:
        """A child meter limited to `fraction` of what is left here (at most `cap`).

        Without any limit above, the child is limited by `cap` alone (None:
        unlimited), so a default share stays deterministic. `rate` (default:
        this meter's) is the child's own: a part that runs another method
        (the dynamic program seeding a joint search) counts at that method's
        rate, and its counts reach this meter converted, so the part costs
        what it costs in units.
        """
        rate = self.rate if rate is None else rate
        left = self.left()
        if left is not None and rate != self.rate:
            left = left * self.rate / rate
        limit = None if left is None else fraction * left
        if cap is not None:
            limit = cap if limit is None else min(limit, cap)
        return WorkMeter(limit=limit, parent=self, rate=rate)
