"""The search tier and the large-net search (`solvers.search`, `solvers.lns`): the
engine's bookkeeping against the simulator, exact windows against the exact
planner, and the method's contract (feasible at the budget, never worse than
the greedy, a bound below the makespan, the same plan for the same work)."""

from __future__ import annotations

import pytest

import planopt
from planopt import Status, random_chain, registry
from planopt.plan import KEEP, SWAP
from planopt.problem import Problem
from planopt.work import method_rate
from solvers.backends.cpsat import solve as solve_cpsat
from solvers.model import Choices, build
from solvers.search.engine import Incumbent
from solvers.search.moves import improve_groups, kicks, layer_level
from solvers.search.starts import portfolio
from solvers.search.windows import Window, exact_window, sliding_windows


def _problem(profile, fraction=0.5, work=30.0):
    budget = max(planopt.budget_from_fraction(profile, fraction), planopt.min_budget(profile))
    return Problem(profile, budget, planopt.min_budget(profile), work_limit=work)


def greedy_start(problem):
    return portfolio(problem).best, None


def _matches_simulator(inc: Incumbent) -> None:
    makespan, peak = planopt.Scorer(inc.problem.profile).score_plan(inc.plan())
    assert inc.key == ((0, makespan) if peak <= inc.problem.budget else (1, float(peak)))


@pytest.mark.parametrize("seed", range(3))
def test_incumbent_tracks_the_simulator(seed):
    profile = random_chain(40, seed=seed)
    problem = _problem(profile)
    start, _ = greedy_start(problem)
    inc = Incumbent(problem.share(work_cap=600 * 40e-6), start.plan)
    before = inc.key
    level = layer_level(problem.n)
    improve_groups(inc, level.groups, level.pairs)
    _matches_simulator(inc)
    assert inc.key <= before
    assert inc.feasible


def test_kicks_never_leave_a_worse_incumbent():
    profile = random_chain(24, seed=4)
    problem = _problem(profile, 0.4)
    start, _ = greedy_start(problem)
    inc = Incumbent(problem.share(work_cap=2000 * 24e-6), start.plan)
    before = inc.key
    kicks(inc, layer_level(problem.n))
    _matches_simulator(inc)
    assert inc.key <= before


@pytest.mark.parametrize("seed", range(4))
def test_a_window_over_the_whole_chain_is_the_exact_optimum(seed):
    profile = random_chain(7, seed=seed, family="uniform")
    problem = _problem(profile, 0.5)
    exact = planopt.solve(profile, problem.budget, "exact", work_limit=60)
    assert exact.status is Status.OPTIMAL
    start, _ = greedy_start(problem)
    inc = Incumbent(problem, start.plan)
    exact_window(inc, Window(0, problem.n), work=30, reach=problem.n, waits=problem.n)
    _matches_simulator(inc)
    assert inc.makespan == pytest.approx(exact.makespan, rel=1e-6)


def test_a_window_leaves_the_layers_outside_it_alone():
    profile = random_chain(30, seed=2)
    problem = _problem(profile, 0.5)
    start, _ = greedy_start(problem)
    inc = Incumbent(problem, start.plan)
    before = inc.plan()
    exact_window(inc, Window(10, 16), work=10)
    after = inc.plan()
    for i in [*range(0, 10), *range(16, 30)]:
        assert after.actions[i] is before.actions[i]
        assert after.swap_wait[i] == before.swap_wait[i]
        if after.actions[i] is SWAP and before.need()[i] == after.need()[i]:
            assert after.prefetch_at[i] == before.prefetch_at[i]
    assert inc.key <= Incumbent(problem, before).key


def test_choices_pin_a_plan():
    """A model whose every layer has one choice has that plan as its only solution."""
    profile = random_chain(9, seed=6, family="uniform")
    problem = _problem(profile, 0.8)
    plan, _ = greedy_start(problem)
    plan = plan.plan
    choices = {
        i: Choices(
            (a,),
            () if a is not SWAP else (plan.prefetch_at[i],),
            () if plan.swap_wait[i] is None else (plan.swap_wait[i],),
        )
        for i, a in enumerate(plan.actions)
    }
    form = build(profile, problem.budget, choices=choices)
    assert sum(len(d) for d in form.prefetch) == plan.count(SWAP)
    result = solve_cpsat(form, time_limit=None, work_limit=20, threads=1, seed=0, hint=None)
    decoded = form.decode(lambda v: result.values[v])
    assert decoded.actions == plan.actions and decoded.prefetch_at == plan.prefetch_at
    makespan, _ = problem.scorer.score_plan(plan)
    assert abs(form.seconds(result.objective) - makespan) <= form.time_error_bound() + 1e-12


def test_choices_left_out_mean_every_choice():
    profile = random_chain(6, seed=1)
    full = build(profile, 1e18)
    some = build(profile, 1e18, choices={0: Choices((KEEP,))})
    assert len(some.model.vars) < len(full.model.vars)
    assert [len(d) for d in some.prefetch][1:] == [len(d) for d in full.prefetch][1:]


def test_sliding_windows_cover_the_chain_from_the_top():
    wins = sliding_windows(20, 8)
    assert wins[0] == Window(12, 20) and wins[-1].lo == 0
    assert set().union(*(range(w.lo, w.hi) for w in wins)) == set(range(20))
    assert sliding_windows(5, 8) == [Window(0, 5)]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("fraction", [0.6, 0.3])
def test_lns_fits_and_never_loses_to_the_greedy(seed, fraction):
    profile = random_chain(60, seed=seed)
    budget = max(planopt.budget_from_fraction(profile, fraction), planopt.min_budget(profile))
    greedy = planopt.solve(profile, budget, "greedy")
    sol = planopt.solve(profile, budget, "lns", work_limit=0.05, window=6)
    assert sol.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert planopt.simulate(profile, sol.plan, budget).feasible
    assert sol.makespan <= greedy.makespan
    assert sol.lower_bound is not None and sol.lower_bound <= sol.makespan * (1 + 1e-9)


def test_lns_improves_a_greedy_that_leaves_room():
    profile = random_chain(12, seed=1, family="uniform")
    budget = planopt.budget_from_fraction(profile, 0.5)
    greedy = planopt.solve(profile, budget, "greedy")
    sol = planopt.solve(profile, budget, "lns", work_limit=30)
    assert sol.makespan < greedy.makespan * 0.99


@pytest.mark.parametrize("window", [0, 6])
def test_lns_is_deterministic_under_a_work_limit(window):
    profile = random_chain(50, seed=9)
    runs = [planopt.solve(profile, "60%", "lns", work_limit=0.3, window=window) for _ in range(2)]
    assert runs[0].plan == runs[1].plan
    assert runs[0].work_used == runs[1].work_used
    assert 0 < runs[0].work_used <= 0.3 + 2.1  # at most one window past the limit


def test_a_search_stops_at_its_work_limit_and_more_work_never_hurts():
    profile = random_chain(60, seed=3)
    small = planopt.solve(profile, "35%", "lns", work_limit=0.02, window=0)
    large = planopt.solve(profile, "35%", "lns", work_limit=0.5, window=0)
    # the starters run to the end outside the limit (solvers.search.starts); the search
    # after them stops at most one simulation past it, at the search's rate
    # (each starter's work at its own rate, converted to the search's: lns charges them)
    starters = sum(
        planopt.solve(profile, "35%", name).work_used / method_rate(name) * method_rate("lns")
        for name in registry.starters()
    )
    assert small.work_used <= starters + 0.02 + method_rate("lns") * 60e-6
    assert large.makespan <= small.makespan
    assert "stopped by the limit" in small.message
