"""The relaxation (`solvers.model.relaxation`'s rows) built in HiGHS directly and re-solved warm.

NOTE (where the bound's time went): on a 48-block decoder cut per operator
(628 layers) the PuLP build took 0.55 s and HiGHS 0.45 s per budget, and
`blocks` gave the bound a tenth of what was left, so under a 5 s limit it
never ran (the certificate was T_ideal: 3.1% and 6.4% at 50% and 30%). Here
the rows come from one `Coefficients` record per net, are handed to HiGHS as
arrays (tens of ms), and the model is cached per net: the budget only moves
the memory rows' right-hand sides, so another budget (or another call) is a
warm dual-simplex re-solve from the last basis.

Work (deterministic): building costs `BUILD_UNITS_PER_ROW` a row and the LP
`LP_UNITS_PER_ROW` a row, charged whatever the cache holds, so a warm start
changes the time only, never the work a solve counts. The LP runs only if
its charge fits the work limit, and then to optimality: its value does not
depend on the basis it starts from (it is rounded down to 9 digits, below
the 1e-7 safety margin, so the last bits do not either). A MIP (on request)
runs after it on a fresh model, on the work left, counted at HiGHS's
interrupt callbacks like every MIP here (`solvers.backends.highs`); its
proven dual bound replaces the LP's when higher.

NOTE (size): the row builder mirrors the PuLP reference row for row, and the
cache and the solves share its column layout; one file keeps them in step.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import highspy
import numpy as np

from planopt.certificate import LP, MIP, T_IDEAL, Certificate
from planopt.profile import Profile
from planopt.work import WorkMeter
from solvers.backends.highs import WorkCounter, fresh_thread_pool
from solvers.model.relaxation_coefficients import Coefficients, coefficients, window_starts
from solvers.model.units import horizon_seconds

# Building the rows and handing them to HiGHS (measured: about 40k rows a
# second on the reference machine, so ~1e-5 s a row, with room).
BUILD_UNITS_PER_ROW = 2e-5
# A cold LP solve, per row (fitted on chains of 50-2,000 layers, cold dual
# simplex, at `LP_UNITS_PER_ITERATION`-like rates; see bench_certificates).
LP_UNITS_PER_ROW = 4e-5
# Rows every net's model has at least, per layer (the action sums, the
# time chains, the copy queues, the held prefix sums): lets a work limit
# refuse a model it cannot pay for before building it.
MIN_ROWS_PER_LAYER = 11
# Nets whose model stays cached (one HiGHS model each).
CACHE_SIZE = 8
_INF = highspy.kHighsInf


@dataclass(frozen=True)
class Model:
    """The relaxation's arrays for one net; budgets set `mem_upper` via `capacity`."""

    coeffs: Coefficients
    lp: highspy.HighsLp
    integer_cols: int  # columns 0 .. 3n-1 are the actions
    mem_rows: np.ndarray  # row indices of the memory checks
    mem_const: np.ndarray  # their fixed parts: upper bound = capacity - const

    @property
    def rows(self) -> int:
        return int(self.lp.num_row_)

    def build_units(self) -> float:
        return BUILD_UNITS_PER_ROW * self.rows

    def lp_units(self) -> float:
        return LP_UNITS_PER_ROW * self.rows

    def memory_upper(self, capacity: float) -> np.ndarray:
        return capacity - self.mem_const


class _Rows:
    """Rows collected as CSR arrays."""

    def __init__(self) -> None:
        self.start = [0]
        self.index: list[int] = []
        self.value: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []

    def add(self, terms: dict[int, float], lower: float, upper: float) -> int:
        for col, val in terms.items():
            if val != 0:
                self.index.append(col)
                self.value.append(val)
        self.start.append(len(self.index))
        self.lower.append(lower)
        self.upper.append(upper)
        return len(self.lower) - 1


class OutOfTime(Exception):
    """The build passed the caller's deadline (wall clock only; a work limit is checked
    before building, from `MIN_ROWS_PER_LAYER`)."""


def build_model(c: Coefficients, deadline: float | None = None) -> Model:
    """The relaxation of `c` as HiGHS arrays, row for row what the PuLP reference builds.

    Raises `OutOfTime` past `deadline` (looked at every 256 layers)."""
    n = c.n

    def check(i: int) -> None:
        if deadline is not None and i % 256 == 0 and time.monotonic() >= deadline:
            raise OutOfTime

    keep, swap, rec = 0, n, 2 * n
    T = 3 * n
    W, U = T + 1, T + 1 + n
    X, H, D, K, S = (T + 1 + 2 * n + j * (n + 1) for j in range(5))
    cols = T + 1 + 2 * n + 5 * (n + 1)
    lower = [0.0] * cols
    upper = [1.0] * (3 * n) + [_INF] * (cols - 3 * n)
    lower[T] = c.t_ideal
    for fixed in (W + 0, X + n, H + n, D + n, K + 0, S + 0):
        upper[fixed] = 0.0
    extra_cols: list[int] = []  # the still-held variables, appended after

    def new_col() -> int:
        extra_cols.append(cols + len(extra_cols))
        return extra_cols[-1]

    rows = _Rows()
    for i in range(n):
        rows.add({keep + i: 1.0, swap + i: 1.0, rec + i: 1.0}, 1.0, 1.0)
    for t in range(n - 1, -1, -1):
        if t > 0:
            rows.add({W + t: 1.0, W + t - 1: -1.0}, 0.0, _INF)
        if t < n - 1:
            rows.add({U + t: 1.0, U + t + 1: -1.0}, 0.0, _INF)
        rows.add({X + t: 1.0, X + t + 1: -1.0, rec + t: -c.f[t]}, 0.0, 0.0)
        rows.add({U + t: 1.0, X + t: -1.0}, 0.0, _INF)
    rows.add({T: 1.0, W + n - 1: -1.0, U + 0: -1.0}, c.forward_total + c.b_upto[n - 1], _INF)
    for t in range(n - 1, -1, -1):
        check(t)
        rows.add({H + t: 1.0, H + t + 1: -1.0, swap + t: -c.d_in[t]}, 0.0, 0.0)
        rows.add({D + t: 1.0, D + t + 1: -1.0, swap + t: -c.d_out[t]}, 0.0, 0.0)
        rows.add({U + t: 1.0, H + t: -1.0}, -(c.b_upto[n - 1] - c.b_upto[t]), _INF)
        rows.add({T: 1.0, W + t: -1.0, D + t: -1.0}, c.f_end[t - 1] if t else 0.0, _INF)
        rows.add(
            {T: 1.0, W + t: -1.0, swap + t: -(c.d_out[t] + c.d_in[t])},
            c.f_end[t] + c.b_upto[t],
            _INF,
        )
    for i in range(n):
        rows.add({K + i + 1: 1.0, K + i: -1.0, keep + i: -c.s[i]}, 0.0, 0.0)
    for i in range(n):
        rows.add({S + i + 1: 1.0, S + i: -1.0, swap + i: -c.s[i]}, 0.0, 0.0)

    mem_rows: list[int] = []
    mem_const: list[float] = []

    def held(top: int, rate: float, gap_terms) -> dict[int, float]:
        """The still-held variable's rows (see `relaxation._still_held`); {} if none."""
        if top <= 0 or not math.isfinite(rate):
            return {}
        var = new_col()
        for k in window_starts(top, n):
            const, terms = gap_terms(k)
            row = {var: 1.0, S + top: -1.0}
            row[S + k] = row.get(S + k, 0.0) + 1.0
            for col, val in terms.items():
                row[col] = row.get(col, 0.0) + rate * val
            rows.add(row, -rate * const, _INF)
        return {var: 1.0}

    for i in range(n):
        check(i)
        if c.has_fwd[i] and i > 0:

            def fwd_gap(k: int, i: int = i) -> tuple[float, dict[int, float]]:
                return c.f_end[i - 1] - c.f_end[k], {W + i: 1.0, W + k: -1.0}

            terms = held(i - 1, c.out_rate, fwd_gap)
            terms[K + i - 1] = terms.get(K + i - 1, 0.0) + 1.0
            terms[keep + i - 1] = terms.get(keep + i - 1, 0.0) + c.internals[i - 1]
            mem_rows.append(rows.add(terms, -_INF, 0.0))
            mem_const.append(c.out[i - 1] + c.fwd_fixed[i])
        if c.has_bwd[i]:

            def bwd_gap(k: int, i: int = i) -> tuple[float, dict[int, float]]:
                return c.b_upto[i] - c.b_upto[k], {U + k: 1.0, U + i: -1.0}

            terms = held(i, c.in_rate, bwd_gap)
            terms[K + i] = terms.get(K + i, 0.0) + 1.0
            if c.counts_input_once[i]:
                for col in (keep + i - 1, swap + i - 1):
                    terms[col] = terms.get(col, 0.0) - c.out[i - 1]
            mem_rows.append(rows.add(terms, -_INF, 0.0))
            mem_const.append(c.backward_fixed[i])

    lp = highspy.HighsLp()
    total = cols + len(extra_cols)
    lp.num_col_ = total
    lp.num_row_ = len(rows.lower)
    cost = np.zeros(total)
    cost[T] = 1.0
    lp.col_cost_ = cost
    lp.col_lower_ = np.array(lower + [0.0] * len(extra_cols))
    lp.col_upper_ = np.array(upper + [_INF] * len(extra_cols))
    lp.row_lower_ = np.array(rows.lower)
    lp.row_upper_ = np.array(rows.upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = total
    lp.a_matrix_.num_row_ = len(rows.lower)
    lp.a_matrix_.start_ = np.array(rows.start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(rows.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(rows.value)
    return Model(c, lp, 3 * n, np.array(mem_rows, dtype=np.int32), np.array(mem_const))


class _Cache:
    """Per net (by fingerprint): its model and a HiGHS instance holding the last LP basis."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[str, tuple[Model, highspy.Highs]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, profile: Profile, deadline: float | None = None) -> tuple[Model, highspy.Highs]:
        key = profile.fingerprint
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key]
        model = build_model(coefficients(profile), deadline)
        highs = _new_highs()
        highs.passModel(model.lp)
        with self.lock:
            self.entries[key] = (model, highs)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return model, highs

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


_CACHE = _Cache(CACHE_SIZE)


def clear_cache() -> None:
    """Forget every cached model (tests; a long-lived process that changes nets)."""
    _CACHE.clear()


def _new_highs() -> highspy.Highs:
    highs = highspy.Highs()
    highs.silent()
    highs.setOptionValue("threads", 1)
    return highs


def _set_capacity(highs: highspy.Highs, model: Model, capacity: float) -> None:
    rows = model.mem_rows
    if len(rows):
        lower = np.full(len(rows), -_INF)
        highs.changeRowsBounds(len(rows), rows, lower, model.memory_upper(capacity))


def _round_down(value: float) -> float:
    """`value` rounded down to 9 significant digits (see the module NOTE)."""
    if value <= 0 or not math.isfinite(value):
        return value
    step = 10.0 ** (math.floor(math.log10(value)) - 8)
    return math.floor(value / step) * step


def highs_bound(
    profile: Profile,
    budget: float,
    *,
    time_limit: float | None = None,
    work_limit: float | None = None,
    mip: bool = False,
    meter: WorkMeter | None = None,
) -> tuple[float | None, Certificate]:
    """The relaxation's proven bound in seconds (None: even it cannot fit `budget`) and
    its certificate; the LP first, then (`mip`) the MIP on the work left."""
    started = time.monotonic()
    if not horizon_seconds(profile) > 0:  # nothing takes time: the bound is T_ideal itself
        return profile.t_ideal, Certificate(T_IDEAL, True, detail="the chain takes no time")
    deadline = None if time_limit is None else started + time_limit
    spent = 0.0

    def certificate(source: str, complete: bool, detail: str) -> Certificate:
        return Certificate(source, complete, time.monotonic() - started, spent, detail)

    least_rows = MIN_ROWS_PER_LAYER * len(profile.layers)
    if (
        work_limit is not None
        and (BUILD_UNITS_PER_ROW + LP_UNITS_PER_ROW) * least_rows > work_limit
    ):
        return profile.t_ideal, certificate(
            T_IDEAL, False, "the work share cannot cover the LP relaxation"
        )
    try:
        model, highs = _CACHE.get(profile, deadline)
    except OutOfTime:
        return profile.t_ideal, certificate(
            T_IDEAL, False, "the time limit passed while building the LP relaxation"
        )
    c = model.coeffs

    capacity = c.capacity(budget)
    if c.n and c.has_fwd[0] and c.fwd_fixed[0] > capacity * (1 + 1e-12) + 1e-12:
        return None, certificate(LP, True, "F_0 cannot fit")
    if work_limit is not None and model.build_units() + model.lp_units() > work_limit:
        return profile.t_ideal, certificate(
            T_IDEAL, False, "the work share cannot cover the LP relaxation"
        )
    spent = model.build_units() + model.lp_units()
    _charge(meter, spent)
    with _CACHE.lock:
        _set_capacity(highs, model, capacity)
        fresh_thread_pool()
        # NOTE: HiGHS's time limit counts every run of one instance, not this one
        # (a warm re-solve was stopped after 0.5 s of a 1.75 s share).
        highs.setOptionValue("time_limit", highs.getRunTime() + _seconds_left(deadline))
        highs.run()
        status = highs.getModelStatus()
        value = highs.getInfo().objective_function_value
    if status == highspy.HighsModelStatus.kInfeasible:
        return None, certificate(LP, True, "the LP relaxation is infeasible")
    if status != highspy.HighsModelStatus.kOptimal:
        return profile.t_ideal, certificate(
            T_IDEAL, False, f"the LP relaxation stopped: {highs.modelStatusToString(status)}"
        )
    bound = _round_down(value)
    if not mip:
        return _seconds(profile, c, bound), certificate(LP, True, "the LP relaxation's optimum")
    left = None if work_limit is None else work_limit - spent
    if (left is not None and left <= 0) or (deadline is not None and time.monotonic() >= deadline):
        return _seconds(profile, c, bound), certificate(
            LP, True, "the LP relaxation's optimum (no work left for the MIP)"
        )
    mip_bound, complete, units, infeasible = _solve_mip(model, capacity, left, deadline)
    spent += units
    _charge(meter, units)
    if infeasible:
        return None, certificate(MIP, True, "the MIP relaxation is infeasible")
    if mip_bound is not None and mip_bound > bound:
        detail = "the MIP relaxation's " + ("optimum" if complete else "dual bound, cut short")
        return _seconds(profile, c, _round_down(mip_bound)), certificate(MIP, complete, detail)
    return _seconds(profile, c, bound), certificate(
        LP, True, "the LP relaxation's optimum (the MIP cut short raised nothing)"
    )


def _solve_mip(
    model: Model, capacity: float, work: float | None, deadline: float | None
) -> tuple[float | None, bool, float, bool]:
    """The MIP's proven dual bound (linear units), whether it finished, its work, and
    whether it is infeasible; on a fresh HiGHS so its path depends on the model alone."""
    lp = model.lp
    highs = _new_highs()
    highs.passModel(lp)
    highs.changeColsIntegrality(
        model.integer_cols,
        np.arange(model.integer_cols, dtype=np.int32),
        np.array([highspy.HighsVarType.kInteger] * model.integer_cols),
    )
    _set_capacity(highs, model, capacity)
    counter = WorkCounter(int(highs.getNumNz()), work)
    highs.cbMipInterrupt += counter.on_interrupt_callback
    fresh_thread_pool()
    highs.setOptionValue("time_limit", _seconds_left(deadline))
    highs.run()
    status = highs.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None, True, counter.units(), True
    bound = highs.getInfo().mip_dual_bound
    complete = status == highspy.HighsModelStatus.kOptimal
    if bound is None or not math.isfinite(bound):
        return None, False, counter.units(), False
    return bound, complete, counter.units(), False


def _seconds_left(deadline: float | None) -> float:
    if deadline is None:
        return _INF
    return max(1e-3, deadline - time.monotonic())


def _seconds(profile: Profile, c: Coefficients, bound: float) -> float:
    return max(profile.t_ideal, c.seconds(bound) * (1 - 1e-7))


def _charge(meter: WorkMeter | None, units: float) -> None:
    if meter is not None:
        meter.charge(units)
