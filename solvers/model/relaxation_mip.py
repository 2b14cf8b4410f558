"""The relaxation as a MIP (the method `lower-bound`): solved by HiGHS, counted and limited
by the LP iterations and checks HiGHS reports, so a work limit stops it at the same point
on any machine.

NOTE (what is counted, issue 25): charged per callback on the nets of
work_rates (random 150-600 layers, GPT-12/24/48, resnet50-ops, bert, decoders
of bench_certificates), a unit of the old count (callbacks and nodes times
nonzeros) cost 0.5x-30x its fit: HiGHS calls its interrupt callback at
fixed points, a root cut round on GPT-48 is one call of 0.18 s (an LP
re-solve and a separation) and a probing pass hundreds of calls of a few
ms, and its sub-MIP heuristics (RINS, RENS, root reduced cost) ran 1-9 s
with no callback at all (sub-MIPs never call back). So here:

* under a work limit the sub-MIP heuristics are off: a lower bound needs no
  incumbent, and with them off the longest stretch between two callbacks
  fell from 5.7-9.1 s to 0.3-0.9 s (the root LP itself); the bound reached
  at the same CPU time was the same or higher on the nets tried but one
  (GPT-12 per operator at 50%: +0.021% over the LP where an incumbent let
  HiGHS prove +0.024%). Without a work limit they stay on: with no
  incumbent HiGHS can only finish by exhausting its tree (random 300 at
  40%: 51 s against 3.3 s, random 150: 35 s against 13 s, for a bound
  within 1e-6 of the same), and no limit needs a callback to stop it;
* each callback is charged by the model's rows, for the LP iterations HiGHS
  made since the last one (`mip_total_lp_iterations`, read through its C
  API: `solvers.backends.highs_capi`) plus a fixed charge, larger when it
  re-solved an LP (a cut round, a node) than when it did not (probing,
  propagation): `ITERATION_UNITS_PER_ROW`, `LP_CHECK_UNITS_PER_ROW`,
  `CHECK_UNITS_PER_ROW`. The solve stops at the first callback past its
  limit, so it overshoots by two steps at most: the one that passes the
  limit and the LP HiGHS may finish after the interrupt, charged at its last
  callback (resnet50-ops at 40%, limit 4: 4.96 units, 2,489 of its 4,854
  iterations after the interrupt; the largest step is the root LP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import highspy
import numpy as np

from solvers.backends.highs import fresh_thread_pool
from solvers.backends.highs_capi import MipRun, solve_mip
from solvers.model.relaxation_rows import Model

# Raw counts (of lower-bound's rate, `planopt.work.METHOD_RATES`) per row of the
# model: per LP iteration, per callback after an LP re-solve, per other callback.
# Fitted on the CPU time at 17,000 callbacks of 16 nets (1.4e-8, 5.4e-6 and
# 1.7e-7 CPU-s; each within 0.55x-1.8x), then scaled with that rate so that
# whole solves read about 1 CPU-s a unit (experiments/results/work_limits.md).
ITERATION_UNITS_PER_ROW = 3.75e-8
LP_CHECK_UNITS_PER_ROW = 1.34e-5
CHECK_UNITS_PER_ROW = 4.05e-7

# The root LP's iterations per row of the model (0.24-0.29 on 5 nets of 160-1,000
# layers): what `root_units` expects the MIP's first LP to charge.
ROOT_ITERATIONS_PER_ROW = 0.3

# Under a work limit: no sub-MIP heuristics (they run with no callback); everything
# else, and everything without a work limit, HiGHS's defaults (see the module NOTE).
OPTIONS: dict[str, bool | int | float] = {
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_root_reduced_cost": False,
}


@dataclass
class MipCounter:
    """The MIP's work, charged at each interrupt callback (see the module NOTE)."""

    rows: int
    limit: float | None = None
    units: float = 0.0
    iterations: int = 0
    callbacks: int = 0
    largest_step: float = 0.0
    interrupted: bool = False

    def step(self, iterations: int) -> float:
        """The charge of a callback that comes `iterations` LP iterations after the last."""
        fixed = LP_CHECK_UNITS_PER_ROW if iterations > 0 else CHECK_UNITS_PER_ROW
        return self.rows * (fixed + ITERATION_UNITS_PER_ROW * iterations)

    def on_interrupt(self, nodes: int, iterations: int) -> bool:
        step = self.step(max(0, iterations - self.iterations))
        self.iterations = max(self.iterations, iterations)
        self.callbacks += 1
        self.units += step
        self.largest_step = max(self.largest_step, step)
        if self.limit is not None and self.units >= self.limit:
            self.interrupted = True
        return self.interrupted


def root_units(model: Model) -> float:
    """What the MIP's root LP is expected to charge: the MIP runs only on work that covers
    it, since its first callback comes after that LP and its bound is the LP's until then."""
    rows = model.rows
    iterations = ROOT_ITERATIONS_PER_ROW * rows
    return rows * (LP_CHECK_UNITS_PER_ROW + ITERATION_UNITS_PER_ROW * iterations)


@dataclass(frozen=True)
class MipBound:
    """The MIP's proven dual bound (linear units; None: none), whether it finished, whether
    it is infeasible, and its count."""

    bound: float | None
    complete: bool
    infeasible: bool
    counter: MipCounter
    run: MipRun


def solve(model: Model, capacity: float, work: float | None, seconds: float) -> MipBound:
    """The MIP on `work` raw counts (None: unlimited) and `seconds`, on a fresh HiGHS so
    its path depends on the model alone."""
    lower = np.array(model.lp.row_lower_, dtype=np.float64)
    upper = np.array(model.lp.row_upper_, dtype=np.float64)
    if len(model.mem_rows):  # as `relaxation_highs` sets them on the LP
        lower[model.mem_rows] = -highspy.kHighsInf
        upper[model.mem_rows] = model.memory_upper(capacity)
    counter = MipCounter(model.rows, work)
    options = dict(OPTIONS) if work is not None else {}
    if math.isfinite(seconds):
        options["time_limit"] = float(seconds)
    fresh_thread_pool()  # (one scheduler per process: see `solvers.backends.highs`)
    run = solve_mip(model.lp, model.integer_cols, lower, upper, options, counter.on_interrupt)
    if run.status == highspy.HighsModelStatus.kInfeasible:
        return MipBound(None, True, True, counter, run)
    complete = run.status == highspy.HighsModelStatus.kOptimal
    bound = run.dual_bound if math.isfinite(run.dual_bound) else None
    return MipBound(bound, complete and bound is not None, False, counter, run)
