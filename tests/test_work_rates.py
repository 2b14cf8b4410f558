"""Work units are calibrated per method: each method's counts carry its own rate.

Issue 25, item 12: one work unit cost 0.6 to 3 CPU-seconds depending on the
method, since every method charged the same raw counts (simulations,
back-end nodes, labels) as units. Now each registered method has its own
constant (`planopt.work.METHOD_RATES`, measured by experiments/work_rates.py,
reported in experiments/results/work_limits.md): a solve's work limit is
divided by its method's rate into raw counts, and the work it reports is
its raw counts times that rate. No timing is asserted here: these tests
check the bookkeeping, which is what a machine-independent limit needs.
"""

from __future__ import annotations

import math

import pytest

import planopt
from planopt import registry
from planopt.problem import Problem
from planopt.registry import MethodSpec
from planopt.result import SolverOutput, Status
from planopt.work import DEFAULT_RATE, METHOD_RATES, WorkMeter, method_rate


def test_every_builtin_method_has_a_rate_of_its_own_and_nothing_else_has_one():
    assert set(METHOD_RATES) == set(registry.names())
    for name, rate in METHOD_RATES.items():
        assert isinstance(rate, float) and math.isfinite(rate) and rate > 0, name
        assert method_rate(name) == rate


def test_the_rates_differ_between_methods_that_count_different_work():
    # A simulation-counting heuristic, a back-end-counting exact method and a
    # label-counting dynamic program: one shared unit was what the issue measured
    # as 0.6-3 CPU-seconds; their calibrated rates are not all the same number.
    assert len({METHOD_RATES[m] for m in ("pooch", "exact", "remat-dp", "lns")}) > 1


def test_a_calibrated_meter_divides_the_limit_and_multiplies_the_work():
    meter = WorkMeter.calibrated(3.0, 0.5)
    assert meter.limit == 6.0  # raw counts
    meter.charge(2.0)
    assert meter.raw_used() == 2.0 and meter.units_used() == 1.0
    child = meter.share(0.5)
    assert child.rate == 0.5 and child.limit == 2.0
    child.charge(1.0)
    assert meter.raw_used() == 3.0 and meter.units_used() == 1.5


@pytest.mark.parametrize("method", ["pooch", "remat-dp", "sqrt-n"])
def test_a_solve_reports_its_methods_counts_at_its_methods_rate(method, monkeypatch):
    profile = planopt.random_chain(24, seed=3)
    base = planopt.solve(profile, "50%", method, work_limit=0.2)
    # Twice the rate and twice the limit: the same raw limit, so the same search
    # (the same plan, the same counts), reported as twice the work.
    monkeypatch.setitem(METHOD_RATES, method, 2 * method_rate(method))
    doubled = planopt.solve(profile, "50%", method, work_limit=0.4)
    assert doubled.plan == base.plan and doubled.status is base.status
    assert doubled.work_used == pytest.approx(2 * base.work_used, rel=1e-12)
    assert base.work_used > 0


@pytest.mark.parametrize("method", ["lns", "exact"])
def test_a_method_that_runs_parts_of_other_methods_scales_with_every_rate(method, monkeypatch):
    # lns and exact run the dynamic program (remat-dp) as a start, at remat-dp's
    # rate: every rate doubled keeps every ratio, so the same search, twice the units.
    profile = planopt.random_chain(24, seed=3)
    base = planopt.solve(profile, "50%", method, work_limit=0.2)
    for name in METHOD_RATES:
        monkeypatch.setitem(METHOD_RATES, name, 2 * METHOD_RATES[name])
    doubled = planopt.solve(profile, "50%", method, work_limit=0.4)
    assert doubled.plan == base.plan
    assert doubled.work_used == pytest.approx(2 * base.work_used, rel=1e-9)


def test_another_methods_rate_changes_nothing(monkeypatch):
    profile = planopt.random_chain(24, seed=3)
    base = planopt.solve(profile, "50%", "lns", work_limit=0.2)
    for other in METHOD_RATES:
        if other not in ("lns", "remat-dp"):  # remat-dp: a part lns runs, at its rate
            monkeypatch.setitem(METHOD_RATES, other, 1e3 * METHOD_RATES[other])
    again = planopt.solve(profile, "50%", "lns", work_limit=0.2)
    assert again.plan == base.plan and again.work_used == base.work_used


def test_a_share_at_another_rate_is_limited_and_charged_in_units():
    meter = WorkMeter.calibrated(4.0, 1.0)  # 4 counts of a rate-1 method
    part = meter.share(0.5, rate=0.25)  # half of it, for a part at 0.25 units a count
    assert part.limit == pytest.approx(8.0)  # 2 units = 8 of the part's counts
    part.charge(4.0)  # 1 unit
    assert meter.raw_used() == pytest.approx(1.0) and meter.units_used() == pytest.approx(1.0)
    assert part.left() == pytest.approx(4.0) and meter.left() == pytest.approx(3.0)


def _counting(problem: Problem) -> SolverOutput:
    problem.meter.charge(0.25)
    return SolverOutput(None, Status.TIMEOUT, message="counted 0.25")


def test_a_method_registered_without_a_rate_counts_its_raw_work_as_units():
    spec = MethodSpec(name="counting-plugin", target=f"{__name__}:_counting", summary="test")
    registry.register(spec)
    try:
        assert method_rate("counting-plugin") == DEFAULT_RATE
        sol = planopt.solve(planopt.random_chain(4, seed=0), "90%", "counting-plugin")
        assert sol.work_used == pytest.approx(0.25 * DEFAULT_RATE)
    finally:
        registry.unregister("counting-plugin")


def test_auto_counts_its_work_at_the_rate_of_the_method_it_hands_the_solve_to(monkeypatch):
    profile = planopt.random_chain(300, seed=7)  # repeated blocks: auto uses blocks
    auto = planopt.solve(profile, "40%", "auto", work_limit=0.3)
    blocks = planopt.solve(profile, "40%", "blocks", work_limit=0.3)
    assert "used blocks" in auto.message
    assert auto.plan == blocks.plan and auto.work_used == pytest.approx(blocks.work_used)
    # auto's own constant plays no part once it has handed the solve over
    monkeypatch.setitem(METHOD_RATES, "auto", 7 * METHOD_RATES["auto"])
    again = planopt.solve(profile, "40%", "auto", work_limit=0.3)
    assert again.plan == auto.plan and again.work_used == pytest.approx(auto.work_used)


def test_a_rebased_meter_keeps_its_limit_and_work_in_units():
    meter = WorkMeter.calibrated(2.0, 1.0)
    meter.charge(0.5)
    meter.rebase(0.25)
    assert meter.units_used() == pytest.approx(0.5) and meter.left() == pytest.approx(6.0)
    with pytest.raises(ValueError, match="own meter"):
        meter.share(0.5).rebase(2.0)
