"""The relaxation (`solvers.model.relaxation`'s rows) solved by HiGHS directly, re-solved warm.

NOTE (where the bound's time went): on a 48-block decoder cut per operator
(628 layers) the PuLP build took 0.55 s and HiGHS 0.45 s per budget, and
`blocks` gave the bound a tenth of what was left, so under a 5 s limit it
never ran (the certificate was T_ideal: 3.1% and 6.4% at 50% and 30%). Here
the rows come from one `Coefficients` record per net, are handed to HiGHS as
arrays (tens of ms), and the model is cached per net: the budget only moves
the memory rows' right-hand sides, so another budget (or another call) is a
warm dual-simplex re-solve from the last basis.

Work (deterministic): building costs `BUILD_UNITS_PER_ROW` a row and the LP
`LP_UNITS_PER_ROW` a row (on the MIP's path, `lower-bound` and the exact methods'
relaxation share, plus `relaxation_mip.lp_surcharge`: rows squared and hanging-run
columns), charged
whatever the cache holds, so a warm start changes the time only, never the work a
solve counts. The LP runs only if
its charge fits the work limit, and then to optimality: its value does not
depend on the basis it starts from (it is rounded down to 9 digits, below
the 1e-7 safety margin, so the last bits do not either). A MIP (on request)
runs after it on a fresh model, on the work left (if that covers its root
LP: `relaxation_mip.root_units`), counted by the LP iterations and checks
HiGHS reports (`solvers.model.relaxation_mip`); its proven dual bound
replaces the LP's when higher.

The rows themselves (whole layers and, over menus, one keep and one swap
column per option, both integer in the MIP) come from
`solvers.model.relaxation_rows`, which mirrors the PuLP reference row for row.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict

import highspy
import numpy as np

from planopt.certificate import LP, MIP, T_IDEAL, Certificate
from planopt.profile import Profile
from planopt.work import WorkMeter
from solvers.backends.highs import fresh_thread_pool
from solvers.model import relaxation_mip
from solvers.model.relaxation_coefficients import Coefficients, coefficients
from solvers.model.relaxation_rows import (
    BUILD_UNITS_PER_ROW,
    LP_UNITS_PER_ROW,
    MIN_ROWS_PER_LAYER,
    Model,
    OutOfTime,
    build_model,
)
from solvers.model.units import horizon_seconds

# Nets whose model stays cached (one HiGHS model each).
CACHE_SIZE = 8
_INF = highspy.kHighsInf


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
    lp_cost = model.build_units() + model.lp_units()
    if mip:  # in the MIP's counts (lower-bound's rate): see `relaxation_mip.lp_surcharge`
        lp_cost += relaxation_mip.lp_surcharge(model)
    if work_limit is not None and lp_cost > work_limit:
        return profile.t_ideal, certificate(
            T_IDEAL, False, "the work share cannot cover the LP relaxation"
        )
    spent = lp_cost
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
    if left is not None and left < relaxation_mip.root_units(model):
        return _seconds(profile, c, bound), certificate(
            LP, True, "the LP relaxation's optimum (the work left cannot cover the MIP's root LP)"
        )
    solved = relaxation_mip.solve(model, capacity, left, _seconds_left(deadline))
    spent += solved.counter.units
    _charge(meter, solved.counter.units)
    if solved.infeasible:
        return None, certificate(MIP, True, "the MIP relaxation is infeasible")
    complete, mip_bound = solved.complete, solved.bound
    if mip_bound is not None and mip_bound > bound:
        detail = "the MIP relaxation's " + ("optimum" if complete else "dual bound, cut short")
        return _seconds(profile, c, _round_down(mip_bound)), certificate(MIP, complete, detail)
    return _seconds(profile, c, bound), certificate(
        LP, True, "the LP relaxation's optimum (the MIP cut short raised nothing)"
    )


def _seconds_left(deadline: float | None) -> float:
    if deadline is None:
        return _INF
    return max(1e-3, deadline - time.monotonic())


def _seconds(profile: Profile, c: Coefficients, bound: float) -> float:
    return max(profile.t_ideal, c.seconds(bound) * (1 - 1e-7))


def _charge(meter: WorkMeter | None, units: float) -> None:
    if meter is not None:
        meter.charge(units)
