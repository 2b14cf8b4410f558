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
* each callback is charged for what HiGHS did since the last one, by the
  counts it reports and the model's size (`MipCounter.step`): the first
  callback (after presolve) by the model's rows; the root LP (the first
  callback with LP iterations) by its iterations; every later LP re-solve (a
  cut round, a node) by the model's columns (separation), by its rows times
  its first `CUT_ITERATIONS` iterations (the cuts it added, which the LP then
  carries) and by its iterations; a callback with no LP iterations (probing,
  propagation) by the rows. The LP iterations made after the last callback
  (a MIP that finishes at its root calls back no more) are charged when HiGHS
  returns (`MipCounter.settle`). The solve stops at the first callback past
  its limit, so it overshoots by two steps at most: the one that passes the
  limit and the LP HiGHS may finish after the interrupt, charged when it
  returns (resnet50-ops at 40%, limit 4: 2,489 of its 4,854 iterations after
  the interrupt; the largest step is the root LP).

NOTE (the counts, issue 25, item 12, second fit): the first rule (a fixed
charge per row per callback, 33 times larger after an LP re-solve, plus rows
times iterations) read 0.69-1.40 CPU-seconds a unit: a cut round on GPT-48
cost 0.17-0.19 s where the rows predicted 0.10, a root LP 2x less than its
rows times iterations, and a MIP that finished at its root (random 1,000
layers) was charged 0.008 units for 1.07 s, its iterations coming after the
last callback. The counts here were fitted on the callback logs of 17 nets
(150-1,000 layers, 726-23,000 rows), replayed as whole solves cut at 1-4
units, and checked on 10 others: a root-LP iteration about 130 us (57-200
us measured), a cut round about 9.6 us a column plus 0.066 us a row per
iteration (GPT-48, ~100 iterations a round: 0.185 s; random 600, ~30: 0.10
s; the models of 0.27 columns a row: 0.03-0.04 s). What is left is HiGHS's
own: its analytic centre (an interior-point solve, 0.1-0.4 s once at the
root, 2.2 s on random 800) reports no count, and it reports a dive's LP
iterations at once, after the callbacks of the nodes that made them.
Measured: 0.82-1.12 CPU-s a unit on lower-bound's 12 calibration solves,
0.83-1.27 on 16 more.

NOTE (third fit, after the relaxation's hanging-run rows: 3 rows and a column
a layer): the same counts read 1.03-2.17 CPU-s a unit. The cold LP before
the MIP, charged by rows (`relaxation_rows.Model.lp_units`, shared with the
LP-only bounds of blocks and lns, which stay as they are), took 0.73 s on
GPT-48 per operator (5,159 iterations) against 0.33 s on random 600 of as
many rows (3,459): 0.40 units for 0.87 CPU-s at work limit 1. A cold LP's
iterations grow with the rows and with the hanging-run columns that hold
something, and each costs in proportion to the rows, so on the MIP's path
the LP also pays `lp_surcharge` (rows squared, rows times such columns).
The root LP is charged by its iterations and rows times them (90 us an
iteration on 7,800 rows, 156 us on 16,300, ~170 us on 26,000; by iterations
alone it read 0.70-1.23), a callback without LP
iterations (probing: hundreds of 4-5 ms calls on 7,800-8,900 rows) 1.3e-6 a
row (4.6e-7 read 2.5-3.0), a cut round 4.5e-5 a column (2.35e-5 read
1.3-1.6: 13-20 us a column measured). Fitted on the callback logs of the 6
nets of work_rates replayed at limits 1 and 3 (0.78-1.24 in the replay).
Measured: 0.76-1.12 CPU-s a unit (median 0.91) on its 12 calibration solves
(experiments/results/work_limits.md), 0.74-1.31 on 8 more (random 150 and
1,000, bert-base, GPT-48 at 30%; limits 1 and 3), the high end the LP alone
on random 1,000 (its cold LP grows faster than rows squared). Left over, HiGHS's own: a
restart at the root after its first cut rounds (0.18-0.57 s with no LP
iterations, charged as one check) and the analytic centre.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import highspy
import numpy as np

from solvers.backends.highs import fresh_thread_pool
from solvers.backends.highs_capi import MipRun, solve_mip
from solvers.model.relaxation_rows import Model

# Raw counts (of lower-bound's rate, `planopt.work.METHOD_RATES`) for what HiGHS did
# between two callbacks (see the module NOTE; `MipCounter.step`):
PRESOLVE_UNITS_PER_ROW = 2.0e-5  # the first callback (presolve, setup), per row
ROOT_ITERATION_UNITS = 1.46e-4  # per iteration of the root LP
ROOT_UNITS_PER_ROW_ITERATION = 1.1e-8  # ... and per row per iteration
CUT_UNITS_PER_COLUMN = 4.5e-5  # per later LP re-solve (a cut round, a node), per column
CUT_UNITS_PER_ROW_ITERATION = 1.6e-7  # ... per row per iteration, its first CUT_ITERATIONS
CUT_ITERATIONS = 200
NODE_SHARE = 0.5  # ... of which a re-solve at a node of the tree (no root separation)
ITERATION_UNITS = 4.3e-6  # ... per iteration
CHECK_UNITS_PER_ROW = 1.3e-6  # per callback with no LP iterations, per row

# The root LP's iterations per row of the model (0.17-0.32 on 11 nets of 150-1,000
# layers, 0.39 on resnet50-blocks): what `root_units` expects the MIP's first LP to charge.
ROOT_ITERATIONS_PER_ROW = 0.3

# What the cold LP before the MIP costs beyond its charge by rows
# (`relaxation_rows.Model.lp_units`, shared with the LP-only bounds), in the MIP's
# counts (`lp_surcharge`): its iterations grow with the rows and each costs in
# proportion to them (per row squared), and every hanging-run column that holds
# something (`Coefficients.hang_slope` > 0) adds iterations (per row, per such column).
LP_UNITS_PER_ROW_SQUARED = 1.2e-9
LP_UNITS_PER_ROW_HANG = 1.45e-7

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
    cols: int
    limit: float | None = None
    units: float = 0.0
    iterations: int = 0
    callbacks: int = 0
    largest_step: float = 0.0
    interrupted: bool = False

    def step(self, iterations: int, in_tree: bool = False) -> float:
        """The charge of the next callback, `iterations` LP iterations after the last
        (`in_tree`: HiGHS has left the root): a function of the counts so far and the
        model's size alone."""
        units = PRESOLVE_UNITS_PER_ROW * self.rows if self.callbacks == 0 else 0.0
        if iterations == 0:
            return units + CHECK_UNITS_PER_ROW * self.rows
        if self.iterations == 0:  # the root LP
            per_iteration = ROOT_ITERATION_UNITS + ROOT_UNITS_PER_ROW_ITERATION * self.rows
            return units + per_iteration * iterations
        resolve = CUT_UNITS_PER_COLUMN * self.cols + CUT_UNITS_PER_ROW_ITERATION * self.rows * min(
            iterations, CUT_ITERATIONS
        )
        return units + resolve * (NODE_SHARE if in_tree else 1.0) + ITERATION_UNITS * iterations

    def _charge(self, iterations: int, in_tree: bool) -> float:
        step = self.step(max(0, iterations - self.iterations), in_tree)
        self.iterations = max(self.iterations, iterations)
        self.callbacks += 1
        self.units += step
        self.largest_step = max(self.largest_step, step)
        return step

    def on_interrupt(self, nodes: int, iterations: int) -> bool:
        self._charge(iterations, nodes > 0)
        if self.limit is not None and self.units >= self.limit:
            self.interrupted = True
        return self.interrupted

    def settle(self, nodes: int, iterations: int) -> None:
        """Charge the LP iterations HiGHS made after its last callback (`nodes`,
        `iterations`: its totals when it returned), as one more step; nothing when there
        were none."""
        if iterations > self.iterations:
            self._charge(iterations, nodes > 0)


def root_units(model: Model) -> float:
    """What the MIP's first callback and root LP are expected to charge: the MIP runs only
    on work that covers them, since its bound is the LP's until the root LP is solved."""
    rows = model.rows
    root_iterations = ROOT_ITERATIONS_PER_ROW * rows
    per_iteration = ROOT_ITERATION_UNITS + ROOT_UNITS_PER_ROW_ITERATION * rows
    return PRESOLVE_UNITS_PER_ROW * rows + per_iteration * root_iterations


def lp_surcharge(model: Model) -> float:
    """What the cold LP before the MIP is charged beyond `model.lp_units()` (see
    `LP_UNITS_PER_ROW_SQUARED`): a function of the model's rows and hanging-run columns."""
    rows = model.rows
    hanging = sum(1 for slope in model.coeffs.hang_slope if slope > 0)
    return rows * (LP_UNITS_PER_ROW_SQUARED * rows + LP_UNITS_PER_ROW_HANG * hanging)


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
    counter = MipCounter(model.rows, int(model.lp.num_col_), work)
    options = dict(OPTIONS) if work is not None else {}
    if math.isfinite(seconds):
        options["time_limit"] = float(seconds)
    fresh_thread_pool()  # (one scheduler per process: see `solvers.backends.highs`)
    run = solve_mip(model.lp, model.integer_cols, lower, upper, options, counter.on_interrupt)
    counter.settle(run.nodes, run.lp_iterations)
    if run.status == highspy.HighsModelStatus.kInfeasible:
        return MipBound(None, True, True, counter, run)
    complete = run.status == highspy.HighsModelStatus.kOptimal
    bound = run.dual_bound if math.isfinite(run.dual_bound) else None
    return MipBound(bound, complete and bound is not None, False, counter, run)
