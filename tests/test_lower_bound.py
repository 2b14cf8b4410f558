"""The relaxation's lower bound (method "lower-bound", `planopt.lower_bound`) never exceeds
the true optimum (brute force, exact). Bounds are asked for with a work limit, so each
is the same on any machine."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import profiles, random_profile, v2_profiles

import planopt
from planopt import Status
from planopt.budget import keep_all_peak
from solvers.brute_force import enumerate_raw


def _bound(profile, budget, *, relax=False, work_limit=30):
    """The registered bound method's bound (None below the minimum budget)."""
    return planopt.solve(
        profile, budget, "lower-bound", relax=relax, work_limit=work_limit
    ).lower_bound


def _optimum(profile, budget):
    score = planopt.Scorer(profile).score
    fitting = [
        t for t, peak in map(lambda raw: score(*raw), enumerate_raw(len(profile))) if peak <= budget
    ]
    return min(fitting) if fitting else None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=profiles(1, 4, exact=False), r=st.floats(0.0, 1.2))
def test_bound_is_below_the_brute_force_optimum(profile, r):
    low = planopt.min_budget(profile)
    budget = int(low + r * (keep_all_peak(profile) - low))  # whole bytes
    optimum = _optimum(profile, budget)
    bound = _bound(profile, budget)
    lp = _bound(profile, budget, relax=True)
    if optimum is None:
        return  # the relaxation may still fit: nothing to compare
    assert bound is not None and lp is not None
    assert profile.t_ideal <= lp <= bound * (1 + 1e-9)
    assert bound <= optimum * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_bound_is_below_the_exact_optimum_on_longer_chains(seed):
    rng = random.Random(500 + seed)
    profile = random_profile(rng, 8)
    budget = planopt.budget_from_fraction(profile, 0.5)
    exact = planopt.solve(profile, budget, "exact", work_limit=60)
    bound = _bound(profile, budget)
    if exact.status is Status.OPTIMAL:
        assert bound <= exact.makespan * (1 + 1e-9)
    elif exact.status is Status.INFEASIBLE:
        pass
    else:
        pytest.fail(exact.message)


@pytest.mark.parametrize(
    "name", ["resnet50-blocks-b128-pipedream", "gpt-48blk-b8-s1024-h100-pcie5-roofline"]
)
@pytest.mark.parametrize("fraction", [0.7, 0.5])
def test_bound_sits_between_t_ideal_and_the_heuristics(name, fraction):
    profile = planopt.bundled_profile(name)
    budget = planopt.budget_from_fraction(profile, fraction)
    bound = _bound(profile, budget, work_limit=5)
    assert bound >= profile.t_ideal
    for method in ("greedy", "sqrt-n"):
        solution = planopt.solve(profile, budget, method)
        if solution.status in (Status.FEASIBLE, Status.OPTIMAL):
            assert bound <= solution.makespan


def test_no_bound_below_the_minimum_budget():
    profile = planopt.bundled_profile("alexnet-b128-caffe-titanx")
    assert planopt.lower_bound(profile, planopt.min_budget(profile) - 1) is None
    with pytest.raises(planopt.SolverOptionError):
        planopt.lower_bound(profile, "50%", time_limit=0)


def test_an_lp_stopped_by_a_limit_gives_no_bound_beyond_t_ideal(monkeypatch):
    # PuLP reports a HiGHS LP cut short by its time limit as "Optimal" with
    # solution status "integer feasible"; that objective is a primal value of
    # an unfinished simplex, not a bound (it once sat 8 points above a
    # feasible plan on GPT-48). Simulate that report on a finished solve.
    import pulp

    from solvers.model import relaxation

    real = relaxation.solve_with_highs

    def stopped_by_the_clock(prob, **options):
        solver = real(prob, **options)
        prob.sol_status = pulp.LpSolutionIntegerFeasible
        return solver

    profile = planopt.random_chain(12, seed=0, family="transformer")
    budget = planopt.budget_from_fraction(profile, 0.5)
    finished = relaxation.pulp_relaxation_bound(profile, budget, relax=True)
    assert finished > profile.t_ideal  # the LP's bound says something here
    monkeypatch.setattr(relaxation, "solve_with_highs", stopped_by_the_clock)
    assert relaxation.pulp_relaxation_bound(profile, budget, relax=True) == profile.t_ideal


@pytest.mark.parametrize("relax", [True, False])
def test_a_first_layer_at_the_budget_exactly_gives_a_bound_not_a_crash(relax):
    # Found by hypothesis: F_0's memory check has no decision in it, and at a
    # budget equal to it the rounded constant compared as False, which PuLP
    # refused as a constraint ("A False object cannot be passed").
    from planopt.profile import Device, Layer, Profile

    profile = Profile(
        "edge",
        Device("dev", float("inf"), float("inf"), 0.125),
        0,
        (Layer.v1("l0", 1 / 8, 1 / 8, 17, 10, 0), Layer.v1("l1", 1 / 8, 1 / 8, 0, 0, 0)),
    )
    budget = keep_all_peak(profile)
    assert budget == planopt.min_budget(profile) == 27
    bound = _bound(profile, budget, relax=relax)
    assert bound <= _optimum(profile, budget) * (1 + 1e-9)
    for method in ("exact", "swap-only", "recompute-only"):
        assert planopt.solve(profile, budget, method, work_limit=30).status is Status.OPTIMAL
    # One byte less: nothing fits, and the bound says so without a crash.
    assert planopt.solve(profile, budget - 1, "exact", work_limit=30).status is Status.INFEASIBLE


@settings(max_examples=60, deadline=None)
@given(profile=v2_profiles(1, 4), data=st.data(), relax=st.booleans())
def test_the_bound_never_exceeds_the_optimum_on_v2_chains(profile, data, relax):
    """Cost model v2 (outputs shared, gradients in memory): below brute force too."""
    flags = tuple(x.saves_input for x in profile.layers)
    score = planopt.Scorer(profile).score
    scored = [score(*raw) for raw in enumerate_raw(len(profile.layers), saves_input=flags)]
    low = min(p for _, p in scored)
    budget = data.draw(st.integers(low, max(p for _, p in scored)))
    optimum = min(t for t, p in scored if p <= budget)
    bound = planopt.lower_bound(profile, budget, relax=relax)
    assert bound is not None and profile.t_ideal <= bound <= optimum * (1 + 1e-9)
