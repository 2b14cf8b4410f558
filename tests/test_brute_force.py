"""The brute-force oracle: it enumerates exactly the valid plans and picks the best.

Its answer is checked against a direct minimum computed with
`planopt.simulate` (not the scorer it uses), so the oracle and the fast
scoring path are checked against each other too.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import budgets, plans, profiles

import planopt
from planopt import Plan, SolverOptionError, Status, min_budget, simulate
from planopt.errors import InvalidPlanError
from planopt.plan import SWAP, need_indices
from planopt.problem import Problem
from planopt.registry import get
from solvers.brute_force import ACTIONS, brute_force, enumerate_plans, enumerate_raw

SMALL = settings(max_examples=40, deadline=None)


def formula_count(n: int, with_swap_wait: bool) -> int:
    """Sum over action tuples of the product, over swapped layers, of the number
    of `prefetch_at` values (`L - need(i)`) times `swap_wait` values (`L - i`:
    None or `i+1 .. L-1`)."""
    total = 0
    for actions in itertools.product(ACTIONS, repeat=n):
        need = need_indices(actions)
        ways = 1
        for i, a in enumerate(actions):
            if a is SWAP:
                ways *= (n - need[i]) * ((n - i) if with_swap_wait else 1)
        total += ways
    return total


# Hand counts. L=1: keep, recompute, swap (prefetch 0) = 3 either way.
# L=2 without waits: a1 in {keep, swap} leaves layer 0 with keep, recompute and
# swap at prefetch 0 or 1 (4 each); a1 = recompute forces prefetch 1 (3): 11.
# With waits layer 0's swap doubles (None or 1): 6 + 6 + 4 = 16.
# L=3 without waits (worked by cases on a2, a1): 19 + 19 + 13 = 51.
HAND = {(1, False): 3, (1, True): 3, (2, False): 11, (2, True): 16, (3, False): 51}


@pytest.mark.parametrize(("n", "with_swap_wait"), sorted(HAND))
def test_count_matches_hand_count(n, with_swap_wait):
    got = sum(1 for _ in enumerate_raw(n, with_swap_wait=with_swap_wait))
    assert got == HAND[n, with_swap_wait] == formula_count(n, with_swap_wait)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("with_swap_wait", [False, True])
def test_count_matches_formula(n, with_swap_wait):
    raw = list(enumerate_raw(n, with_swap_wait=with_swap_wait))
    assert len(raw) == formula_count(n, with_swap_wait)
    assert len(set(raw)) == len(raw)  # no plan twice


@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_enumerated_plan_is_valid(n):
    for plan in enumerate_plans(n):
        # Plan() validated on construction; rebuilding from strings re-checks ranges.
        Plan([a.value for a in plan.actions], plan.prefetch_at, plan.swap_wait)
    for plan in enumerate_plans(n, with_swap_wait=False):
        assert all(w is None for w in plan.swap_wait)


def test_enumeration_order_is_documented():
    first = next(enumerate_raw(3))
    assert first == (tuple(ACTIONS[:1] * 3), (None,) * 3, (None,) * 3)  # keep-all first
    swaps = [r for r in enumerate_raw(2) if r[0] == (SWAP, ACTIONS[0])]
    # layer 0 swapped under a kept layer 1: prefetch 0 then 1, each with wait None then 1.
    assert [(r[1][0], r[2][0]) for r in swaps] == [(0, None), (0, 1), (1, None), (1, 1)]


@SMALL
@given(st.data(), profiles(1, 4))
def test_enumeration_is_complete(data, profile):
    plan = data.draw(plans(profile))
    raw = (plan.actions, plan.prefetch_at, plan.swap_wait)
    assert raw in set(enumerate_raw(len(profile.layers)))


@pytest.mark.parametrize(
    ("actions", "prefetch", "wait"),
    [
        (("swap", "keep"), (2, None), (None, None)),  # prefetch_at above L-1
        (("swap", "recompute"), (0, None), (None, None)),  # below need(0) = 1
        (("swap", "keep"), (1, None), (0, None)),  # swap_wait below i+1
        (("keep", "swap"), (None, 1), (None, 2)),  # swap_wait above L-1
    ],
)
def test_invalid_plans_are_not_enumerated(actions, prefetch, wait):
    with pytest.raises(InvalidPlanError):
        Plan(actions, prefetch, wait)
    raw = (tuple(planopt.Action(a) for a in actions), prefetch, wait)
    assert raw not in set(enumerate_raw(2))


def direct_best(profile, budget, with_swap_wait=True):
    """Fastest plan within budget by `simulate`; ties: lowest peak, then first."""
    best = None
    for k, plan in enumerate(enumerate_plans(len(profile.layers), with_swap_wait=with_swap_wait)):
        s = simulate(profile, plan.for_profile(profile))
        if s.peak_bytes <= budget:
            key = (s.makespan, s.peak_bytes, k)
            if best is None or key < best[0]:
                best = (key, plan)
    return best


@SMALL
@given(st.data(), profiles(1, 3))
def test_solve_agrees_with_a_direct_minimum(data, profile):
    budget = data.draw(budgets(profile))
    expected = direct_best(profile, budget)
    if budget < min_budget(profile):
        return  # solve() answers infeasible before running the method
    solution = planopt.solve(profile, budget, "brute-force")
    if expected is None:
        assert solution.status is Status.INFEASIBLE
        assert solution.plan is None
        return
    (makespan, peak, _), plan = expected
    assert solution.status is Status.OPTIMAL
    assert solution.makespan == makespan
    assert solution.schedule.peak_bytes == peak
    assert solution.lower_bound == pytest.approx(makespan, rel=1e-12)
    assert (solution.plan.actions, solution.plan.prefetch_at, solution.plan.swap_wait) == (
        plan.actions,
        plan.prefetch_at,
        plan.swap_wait,
    )


def problem_for(profile, budget, **kw) -> Problem:
    return Problem(profile=profile, budget=budget, min_budget=min_budget(profile), **kw)


@SMALL
@given(st.data(), profiles(1, 3))
def test_method_output_and_swap_wait_option(data, profile):
    budget = data.draw(budgets(profile))
    out = brute_force(problem_for(profile, budget))
    no_wait = brute_force(problem_for(profile, budget), with_swap_wait=False)
    expected = direct_best(profile, budget, with_swap_wait=False)
    if expected is None:
        assert no_wait.status is Status.INFEASIBLE and no_wait.plan is None
    else:
        assert no_wait.status is Status.OPTIMAL
        assert all(w is None for w in no_wait.plan.swap_wait)
        assert no_wait.lower_bound == expected[0][0]
        # More plans to choose from can only help.
        assert out.status is Status.OPTIMAL
        assert out.lower_bound <= no_wait.lower_bound
    if out.plan is not None:
        s = simulate(profile, out.plan)
        assert out.lower_bound == s.makespan
        assert s.peak_bytes <= budget
        assert out.plan.profile == profile.fingerprint


def _flat_profile(n: int) -> planopt.Profile:
    # Every time zero and every size 1: all plans take no time, so the tie
    # rules alone decide.
    return planopt.Profile(
        "flat",
        planopt.Device("d", math.inf, math.inf, 0.0),
        0,
        tuple(planopt.Layer.v1(f"l{i}", 0.0, 0.0, 1) for i in range(n)),
    )


def test_ties_go_to_the_lowest_peak_then_the_first_plan():
    profile = _flat_profile(3)
    out = brute_force(problem_for(profile, 100))
    # Every makespan is 0 and every tensor has an empty lifetime [t, t): every
    # plan peaks at 0, so the first plan enumerated (keep-all) wins.
    assert out.status is Status.OPTIMAL
    assert out.plan.actions == Plan.keep_all(profile).actions
    # Free copies: keep-all and every keep/swap plan take T_ideal, keep-all
    # (first) with the largest peak. Without a memory limit the winner is
    # still a T_ideal plan, but the one with the smallest peak.
    free = _timed_profile(math.inf)
    got = brute_force(problem_for(free, math.inf))
    (makespan, peak, _), plan = direct_best(free, math.inf)
    assert got.lower_bound == makespan == free.t_ideal
    raw = (got.plan.actions, got.plan.prefetch_at, got.plan.swap_wait)
    assert raw == (plan.actions, plan.prefetch_at, plan.swap_wait)
    assert simulate(free, got.plan).peak_bytes == peak
    assert peak < simulate(free, Plan.keep_all(free)).peak_bytes


def _timed_profile(bandwidth: float = 8.0) -> planopt.Profile:
    return planopt.Profile(
        "timed",
        planopt.Device("d", bandwidth, bandwidth, 0.0),
        0,
        tuple(planopt.Layer.v1(f"l{i}", 1.0, 2.0, 8 + 4 * i) for i in range(3)),
    )


def test_infeasible_when_no_plan_fits():
    profile = _timed_profile()
    smallest = min(simulate(profile, p.for_profile(profile)).peak_bytes for p in enumerate_plans(3))
    out = brute_force(problem_for(profile, smallest - 1))
    assert out.status is Status.INFEASIBLE
    assert out.plan is None
    assert str(smallest) in out.message


def test_refuses_long_nets():
    profile = planopt.bundled_profile("alexnet-b128-caffe-titanx")  # 11 layers
    with pytest.raises(SolverOptionError, match=r"max_layers=6 .*got 11"):
        planopt.solve(profile, "100%", "brute-force")
    with pytest.raises(SolverOptionError, match=r"max_layers=10 .*got 11"):
        brute_force(problem_for(profile, math.inf), max_layers=10)


@pytest.mark.parametrize(
    "options",
    [{"max_layers": 0}, {"max_layers": "6"}, {"max_layers": True}, {"with_swap_wait": "yes"}],
)
def test_rejects_bad_options(options):
    with pytest.raises(SolverOptionError, match=next(iter(options))):
        brute_force(problem_for(_timed_profile(), math.inf), **options)


def test_registered_with_its_options():
    spec = get("brute-force")
    assert spec.exact
    assert spec.options() == ["with_swap_wait", "max_layers"]
    with pytest.raises(SolverOptionError):
        planopt.solve(_timed_profile(), "100%", "brute-force", frobnicate=1)


@dataclass(frozen=True)
class _CountdownProblem(Problem):
    """A problem whose deadline passes after `allowed` checks (no wall clock)."""

    allowed: int = 0
    checks: list = field(default_factory=lambda: [0], compare=False)

    def expired(self) -> bool:
        self.checks[0] += 1
        return self.checks[0] > self.allowed


def _countdown(profile, budget, allowed) -> _CountdownProblem:
    return _CountdownProblem(
        profile=profile, budget=budget, min_budget=min_budget(profile), allowed=allowed
    )


def test_timeout_before_any_plan():
    out = brute_force(_countdown(_timed_profile(), math.inf, 0))
    assert out.status is Status.TIMEOUT
    assert out.plan is None


def test_expired_returns_the_best_so_far_as_feasible():
    # 4 layers with waits: 2872 plans; the deadline passes at the third check,
    # so exactly the first 2 * 256 = 512 plans are scored.
    profile = planopt.Profile(
        "four",
        planopt.Device("d", 8.0, 8.0, 0.0),
        0,
        tuple(planopt.Layer.v1(f"l{i}", 1.0, 2.0, 8 + 4 * i) for i in range(4)),
    )
    budget = 40
    out = brute_force(_countdown(profile, budget, 2))
    assert out.status is Status.FEASIBLE
    first = list(itertools.islice(enumerate_plans(4), 512))
    best = None
    for k, plan in enumerate(first):
        s = simulate(profile, plan.for_profile(profile))
        if s.peak_bytes <= budget and (best is None or (s.makespan, s.peak_bytes, k) < best[0]):
            best = ((s.makespan, s.peak_bytes, k), plan)
    assert best is not None
    assert out.plan.actions == best[1].actions
    assert out.plan.prefetch_at == best[1].prefetch_at
    assert out.plan.swap_wait == best[1].swap_wait
    full = brute_force(problem_for(profile, budget))
    assert full.status is Status.OPTIMAL
    assert full.lower_bound <= simulate(profile, out.plan).makespan
    assert out.lower_bound <= full.lower_bound  # a valid bound


def test_enumerate_rejects_empty_nets():
    with pytest.raises(ValueError, match="n_layers"):
        list(enumerate_raw(0))
