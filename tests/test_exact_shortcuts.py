"""The exact method's short cuts: the relaxation bound, the polish and the objective floor.

Each one may end a solve early with status `optimal`; these tests check the
optimum they claim against a full search that does not take them.
"""

from __future__ import annotations

import pytest

import planopt
from planopt import Status
from planopt.budget import keep_all_peak
from planopt.problem import Problem
from solvers import backends, exact, exact_search
from solvers.backends import cpsat
from solvers.lns import layer_phases
from solvers.model import Linear, build, evaluate
from solvers.model.relaxation import relaxation_bound
from solvers.search.driver import search
from solvers.search.engine import Incumbent

REL = 1e-6


def _budget(profile, r=0.4):
    """`r` of the way from the minimum budget to keep-all's peak."""
    low = planopt.min_budget(profile)
    return int(low + r * (keep_all_peak(profile) - low))  # whole bytes


def _plain_exact(profile, budget, monkeypatch, **kwargs):
    """The exact method without the relaxation bound and the polish."""
    with monkeypatch.context() as patch:
        patch.setattr(exact, "_relaxation_bound", lambda problem: None)
        patch.setattr(exact, "POLISH_FROM_LAYERS", 10**9)
        return planopt.solve(profile, budget, "exact", **kwargs)


def test_swap_traffic_rows_tighten_the_bound_yet_stay_below_the_optimum(monkeypatch):
    # The copy engines' speed decides how much a swap frees in time; on this
    # chain the bound meets the optimum (7.85% over T_ideal) with the traffic
    # rows and sits at T_ideal without them.
    profile = planopt.random_chain(10, seed=2, family="transformer")
    budget = _budget(profile)
    optimum = _plain_exact(profile, budget, monkeypatch, work_limit=60)
    assert optimum.status is Status.OPTIMAL
    bound = relaxation_bound(profile, budget, work_limit=30)
    assert bound <= optimum.makespan * (1 + 1e-9)
    assert bound >= optimum.makespan / 1.01


@pytest.mark.parametrize("family", ["uniform", "cnn", "transformer"])
@pytest.mark.parametrize("seed", [1, 2])
def test_shortcuts_agree_with_a_search_without_them(family, seed, monkeypatch):
    profile = planopt.random_chain(10, seed=seed, family=family)
    budget = _budget(profile)
    monkeypatch.setattr(exact, "POLISH_FROM_LAYERS", 1)  # polish these small nets too
    fast = planopt.solve(profile, budget, "exact", work_limit=60)
    plain = _plain_exact(profile, budget, monkeypatch, work_limit=60)
    assert fast.status is Status.OPTIMAL and plain.status is Status.OPTIMAL
    assert fast.makespan == pytest.approx(plain.makespan, rel=REL)
    assert fast.lower_bound <= plain.makespan * (1 + REL)


def test_a_warm_start_meeting_the_bound_ends_the_solve_without_a_search(monkeypatch):
    # The relaxation's bound meets this chain's optimum (see above).
    profile = planopt.random_chain(10, seed=2, family="transformer")
    budget = _budget(profile)
    first = planopt.solve(profile, budget, "exact", work_limit=60)
    assert first.status is Status.OPTIMAL

    def no_backend(*args, **kwargs):
        raise AssertionError("the back-end should not run")

    monkeypatch.setattr(cpsat, "solve", no_backend)
    again = planopt.solve(profile, budget, "exact", warm_start=first.plan)
    assert again.status is Status.OPTIMAL
    assert again.makespan == pytest.approx(first.makespan, rel=REL)
    assert "without a search" in again.message


def test_the_objective_floor_never_cuts_off_the_optimum():
    # The floor is the bound less every rounding error: a floor at the optimum
    # itself must leave the optimal plan feasible in the model.
    profile = planopt.random_chain(4, seed=4, family="uniform")
    budget = _budget(profile)
    optimum = planopt.solve(profile, budget, "brute-force", work_limit=120)
    assert optimum.status is Status.OPTIMAL
    problem = Problem(profile, budget, planopt.min_budget(profile))
    form = build(profile, budget)
    exact_search.add_objective_floor(form, optimum.makespan)
    hint = evaluate(form, form.decisions(optimum.plan))
    result = cpsat.solve(form, time_limit=None, work_limit=60, threads=1, seed=0, hint=hint)
    assert result.status == "optimal"
    plan = form.decode(lambda v: result.values[v])
    assert problem.scorer.score_plan(plan)[0] == pytest.approx(optimum.makespan, rel=REL)


def test_search_stops_at_its_target_and_after_its_patience():
    profile = planopt.random_chain(40, seed=2, family="mixed")
    budget = planopt.budget_from_fraction(profile, 0.5)
    greedy = planopt.solve(profile, budget, "greedy")
    far = Problem(profile, budget, planopt.min_budget(profile), work_limit=60)

    at_start = Incumbent(far, greedy.plan, target=greedy.makespan)
    assert at_start.out_of_work()  # the start already meets the target

    patient = Incumbent(far, greedy.plan, patience=0.05)
    search(patient, layer_phases(len(profile), 8, 2.0))
    # It stops within one window solve of running out of patience, long before its limit.
    assert far.meter.used - patient.improved_at <= 0.05 + 2.0 + 0.2
    assert far.meter.used < 60
    assert patient.makespan <= greedy.makespan


def _probe_setup(seed: int):
    """A small chain, its brute-force optimum and a fresh model with the usual floor."""
    profile = planopt.random_chain(5, seed=seed, family="mixed")
    budget = _budget(profile)
    optimum = planopt.solve(profile, budget, "brute-force", work_limit=120)
    assert optimum.status is Status.OPTIMAL
    problem = Problem(profile, budget, planopt.min_budget(profile))
    form = build(profile, budget)
    return optimum, problem, form


@pytest.mark.parametrize("seed", [0, 3])
def test_a_probe_at_the_optimum_finds_an_optimal_plan(seed):
    optimum, problem, form = _probe_setup(seed)
    exact_search.add_objective_floor(form, optimum.makespan)
    probed, _ = exact_search.probe_relaxation_bound(
        problem, form, backends.get("cpsat"), 1, None, optimum.makespan
    )
    assert probed is not None and probed.status == "optimal"
    plan = form.decode(lambda v: probed.values[v])
    makespan, peak = problem.scorer.score_plan(plan)
    assert problem.fits(peak)
    assert makespan == pytest.approx(optimum.makespan, rel=REL)


@pytest.mark.parametrize("seed", [0, 3])
def test_a_probe_below_the_optimum_raises_the_floor_and_keeps_the_optimum(seed):
    optimum, problem, form = _probe_setup(seed)
    below = max(problem.profile.t_ideal, optimum.makespan * 0.97)
    if below >= optimum.makespan * (1 - 1e-3):
        pytest.skip("the optimum is T_ideal: nothing lies below it")
    exact_search.add_objective_floor(form, below)
    probe = exact_search.probe_relaxation_bound(
        problem, form, backends.get("cpsat"), 1, None, below
    )
    assert probe == (None, None)
    # The probe proved no plan meets `below`: the model's objective now has
    # a floor above it (the last constraint added)...
    floor = form.model.constraints[-1]
    assert isinstance(floor, Linear) and floor.in_ticks
    assert form.seconds(floor.lo) > below * (1 + exact_search.OPTIMALITY_GAP)
    # ...which leaves the optimum in the model.
    result = cpsat.solve(form, time_limit=None, work_limit=60, threads=1, seed=0, hint=None)
    assert result.status == "optimal"
    plan = form.decode(lambda v: result.values[v])
    assert problem.scorer.score_plan(plan)[0] == pytest.approx(optimum.makespan, rel=REL)
