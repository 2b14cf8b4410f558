"""Work units per method and net size (issue 25, item 12): the charge is a function of
the inputs alone.

One rate per method left a unit at 0.63 CPU-seconds for recompute-only on 40
layers and 1.47 on 120, and at 0.39 for blocks on a 300-layer chain whose
block fronts (milliseconds each) were charged 0.1 counts a call. Now a rate
may carry a factor of the net's size (`planopt.work.SIZE_FACTORS`, measured
by experiments/work_rates.py) and a block front is charged what it costs,
once per solve. No timing is asserted: these check that the charge follows
the size, the counts and nothing else (not the process's caches).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

import planopt
from planopt.blocks import find_blocks
from planopt.problem import Problem
from planopt.work import METHOD_RATES, SIZE_FACTORS, WorkMeter, method_rate, size_factor
from solvers.block_front import _FRONTS, ENUMERATE_MAX
from solvers.search import repeats
from solvers.search.engine import Incumbent


def test_size_factors_are_measured_points_in_increasing_size_for_known_methods():
    for method, points in SIZE_FACTORS.items():
        assert method in METHOD_RATES, method
        sizes = [n for n, _ in points]
        assert sizes == sorted(set(sizes)) and len(sizes) >= 2, method
        assert all(0.2 < f < 5 and math.isfinite(f) for _, f in points), method


def test_a_size_factor_interpolates_in_log_size_and_is_flat_outside_the_points(monkeypatch):
    monkeypatch.setitem(SIZE_FACTORS, "lns", ((10, 1.0), (1000, 3.0)))
    assert size_factor("lns", 100) == pytest.approx(2.0)  # half-way in log 10..1000
    assert size_factor("lns", 10) == 1.0 and size_factor("lns", 2) == 1.0
    assert size_factor("lns", 1000) == 3.0 and size_factor("lns", 10**6) == 3.0
    assert method_rate("lns", 100) == pytest.approx(2.0 * METHOD_RATES["lns"])
    assert method_rate("lns") == METHOD_RATES["lns"]  # no size: the base rate
    assert size_factor("keep-all", 10**5) == 1.0  # a method without points


def test_recompute_only_costs_more_a_count_on_longer_chains():
    # the measured trend (CP-SAT's CPU per deterministic second grows with the model)
    assert method_rate("recompute-only", 120) > 1.5 * method_rate("recompute-only", 40)


def test_a_solve_is_charged_at_its_methods_rate_for_its_nets_size(monkeypatch):
    profile = planopt.random_chain(40, seed=7)
    base = planopt.solve(profile, "40%", "recompute-only", work_limit=0.3, max_layers=40)
    # the factor at this size doubled, and the limit with it: the same raw limit, so
    # the same search, reported as twice the work
    doubled_points = tuple((k, 2 * f) for k, f in SIZE_FACTORS["recompute-only"])
    monkeypatch.setitem(SIZE_FACTORS, "recompute-only", doubled_points)
    doubled = planopt.solve(profile, "40%", "recompute-only", work_limit=0.6, max_layers=40)
    assert doubled.plan == base.plan
    assert doubled.work_used == pytest.approx(2 * base.work_used, rel=1e-9)


@pytest.mark.parametrize(("method", "picks"), [("blocks", "blocks"), ("auto", "blocks")])
def test_the_meter_of_a_solve_runs_at_the_rate_for_the_nets_size(method, picks, monkeypatch):
    import solvers.auto

    rates = []
    real = solvers.auto.plan_blocks

    def spy(problem, *args, **kwargs):
        rates.append(problem.meter.rate)
        return real(problem, *args, **kwargs)

    monkeypatch.setattr(solvers.auto, "plan_blocks", spy)
    monkeypatch.setattr("solvers.blocks.plan_blocks", spy)
    n = 300
    planopt.solve(planopt.random_chain(n, seed=7), "40%", method, work_limit=0.2)
    assert rates == [pytest.approx(method_rate(picks, n))]
    assert method_rate(picks, n) != METHOD_RATES[picks]  # the size factor is in it


def _incumbent(profile: planopt.Profile, rate: float) -> Incumbent:
    problem = Problem(
        profile=profile,
        budget=float(planopt.simulate(profile, planopt.Plan.keep_all(profile)).peak_bytes),
        min_budget=0.0,
        meter=WorkMeter.calibrated(None, rate),
    )
    return Incumbent(problem, planopt.Plan.keep_all(profile))


def test_a_block_front_is_charged_its_cost_once_per_solve_whatever_the_cache_holds():
    profile = planopt.random_chain(300, seed=7)
    reps = find_blocks(profile).repeats
    assert reps
    rep = reps[0]
    for cached in (False, True):  # a cold cache, then the fronts of the first pass
        if not cached:
            _FRONTS.clear()
        inc = _incumbent(profile, rate=0.5)  # the charge is in units, whatever the rate
        meter = inc.problem.meter
        before = meter.units_used()
        repeats._front(inc, rep)
        once = meter.units_used() - before
        repeats._front(inc, rep)  # asked again in the same solve: nothing more
        assert meter.units_used() - before == once
        assert once == pytest.approx(repeats.front_units(rep.period))
    # a new solve pays again (the charge does not follow the process's cache)
    inc = _incumbent(profile, rate=0.5)
    repeats._front(inc, rep)
    assert inc.problem.meter.units_used() > 0


def test_a_fronts_charge_grows_with_the_plans_it_enumerates_then_the_mip():
    costs = [repeats.front_units(p) for p in range(1, ENUMERATE_MAX + 1)]
    assert costs == sorted(costs) and costs[0] < 1e-3 and 0.1 < costs[-1] < 0.5
    assert repeats.front_units(ENUMERATE_MAX + 1) > 0.5


_SOLVE = """
import sys, planopt
p = planopt.random_chain(300, seed=7)
for m in sys.argv[1:]:
    s = planopt.solve(p, "40%", m, work_limit=0.4, seed=0)
    plan = s.plan
    print(m, repr(s.work_used), "".join(a.value[0] for a in plan.actions), *plan.prefetch_at)
"""


def _line(name: str, sol) -> str:
    plan = sol.plan
    fields = [name, repr(sol.work_used), "".join(a.value[0] for a in plan.actions)]
    return " ".join(str(x) for x in [*fields, *plan.prefetch_at])


def test_the_charge_depends_only_on_the_inputs_not_on_the_process_or_its_caches():
    # Twice in this process (the second solve runs on the first one's caches: block
    # fronts, the relaxation's model) and once in a fresh interpreter: the same work.
    methods = ["blocks", "auto", "lns"]
    here = []
    for _ in range(2):
        p = planopt.random_chain(300, seed=7)
        here.append([planopt.solve(p, "40%", m, work_limit=0.4, seed=0) for m in methods])
    for a, b in zip(*here, strict=True):
        assert a.plan == b.plan and a.work_used == b.work_used
    out = subprocess.run(
        [sys.executable, "-c", _SOLVE, *methods],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],  # this checkout's planopt
    ).stdout.split("\n")
    assert out[: len(methods)] == [_line(m, s) for m, s in zip(methods, here[0], strict=True)]
