"""PoocH: batched probes equal the simulator, plans fit, never beat brute force, and
each stage does what it says on hand-worked chains."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import budgets, plans, profile_and_plan, profiles

import planopt
from planopt import Device, Layer, Profile, Scorer, simulate
from planopt.budget import min_budget, min_budget_info
from planopt.plan import KEEP, RECOMPUTE, SWAP, Plan
from planopt.problem import Problem
from planopt.random_chain import random_chain
from planopt.result import Status
from planopt.work import method_rate
from solvers.pooch import PROBES_PER_SIMULATION, VECTOR_PASS_SIMULATIONS, _Greedy, _Work, pooch
from solvers.scoring import free_copy_makespans

SMALL = settings(max_examples=60, deadline=None)
ACTS = {"k": KEEP, "s": SWAP, "r": RECOMPUTE}


def problem_for(profile: Profile, budget: float, deadline: float | None = None) -> Problem:
    return Problem(profile, budget, min_budget(profile), deadline=deadline)


def chain(sizes, fwd, bwd, d2h=1.0, h2d=None) -> Profile:
    n = len(sizes)
    fwd = fwd if isinstance(fwd, list) else [fwd] * n
    bwd = bwd if isinstance(bwd, list) else [bwd] * n
    return Profile(
        "hand",
        Device("d", h2d if h2d is not None else d2h, d2h, 0.0),
        0,
        tuple(Layer.v1(f"l{i}", float(fwd[i]), float(bwd[i]), sizes[i]) for i in range(n)),
    )


def work(text: str, prefetch=None, wait=None) -> _Work:
    """`"ssk"` -> a working plan with Plan.build's default prefetch."""
    plan = Plan.build([ACTS[c] for c in text], prefetch, wait)
    return _Work(list(plan.actions), list(plan.prefetch_at), list(plan.swap_wait))


def text(w: _Work) -> str:
    return "".join(a.value[0] for a in w.actions)


# -- the batched probe ----------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(profile_and_plan(1, 8))
def test_free_copy_makespans_equal_the_scalar_probe_bit_for_bit(case):
    profile, plan = case
    scorer = Scorer(profile)
    lists = (list(plan.actions), list(plan.prefetch_at), list(plan.swap_wait))
    swapped = [i for i, a in enumerate(plan.actions) if a is SWAP]
    base, free = free_copy_makespans(scorer, *lists, swapped)
    assert base == scorer.makespan(*lists)
    for c, value in zip(swapped, free.tolist(), strict=True):
        assert value == scorer.score(*lists, free_copies={c})[0]


@settings(max_examples=30, deadline=None)
@given(profiles(2, 12, exact=False), st.data())
def test_free_copy_makespans_match_with_general_floats(profile, data):
    plan = data.draw(plans(profile))
    scorer = Scorer(profile)
    lists = (list(plan.actions), list(plan.prefetch_at), list(plan.swap_wait))
    swapped = [i for i, a in enumerate(plan.actions) if a is SWAP]
    _, free = free_copy_makespans(scorer, *lists, swapped)
    expected = [scorer.makespan(*lists, free_copies={c}) for c in swapped]
    assert free.tolist() == expected


# -- feasibility and the budget contract ------------------------------------------


@SMALL
@given(data=st.data())
def test_pooch_plans_fit_and_are_infeasible_only_below_min_budget(data):
    profile = data.draw(profiles(1, 7))
    budget = data.draw(budgets(profile))
    out = pooch(problem_for(profile, budget))
    value, exact = min_budget_info(profile)
    if out.status is Status.FEASIBLE:
        assert simulate(profile, out.plan, budget).peak_bytes <= budget
    else:
        # `infeasible` only when proven (below min_budget); else the greedy proves nothing
        assert out.plan is None
        if budget < value:
            assert out.status is Status.INFEASIBLE, out.message
        else:
            assert out.status is Status.NO_PLAN and not exact, out.message


@SMALL
@given(profiles(1, 7, positive_times=True), st.integers(min_value=0, max_value=40))
def test_pooch_is_never_infeasible_at_or_above_min_budget(profile, extra):
    budget = min_budget(profile) + extra
    out = pooch(problem_for(profile, budget))
    assert out.status is Status.FEASIBLE, out.message
    assert simulate(profile, out.plan, budget).peak_bytes <= budget


def test_pooch_is_infeasible_below_min_budget_and_says_the_minimum():
    profile = chain([4, 4, 4], 1, 1)
    out = pooch(problem_for(profile, min_budget(profile) - 1))
    assert out.status is Status.INFEASIBLE
    assert f"at least {min_budget(profile)} bytes" in out.message


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.5, 0.7, 1.0])
def test_pooch_fits_a_200_layer_chain_down_to_min_budget(fraction):
    profile = random_chain(200, seed=3)
    low, high = min_budget(profile), planopt.keep_all_peak(profile)
    budget = int(low + fraction * (high - low))  # whole bytes
    out = pooch(problem_for(profile, budget))
    assert out.status is Status.FEASIBLE, out.message
    assert simulate(profile, out.plan, budget).peak_bytes <= budget


# -- never faster than the optimum ---------------------------------------------------


def all_plans(n: int):
    """Every valid plan of an n-layer chain (our own enumeration, swap_wait included)."""
    for actions in itertools.product((KEEP, SWAP, RECOMPUTE), repeat=n):
        need = Plan.build(actions).need()
        options = []
        for i, a in enumerate(actions):
            if a is SWAP:
                waits = [None, *range(i + 1, n)]
                options.append([(i, p, w) for p in range(need[i], n) for w in waits])
        for combo in itertools.product(*options):
            prefetch, wait = [None] * n, [None] * n
            for i, p, w in combo:
                prefetch[i], wait[i] = p, w
            yield list(actions), prefetch, wait


@settings(max_examples=25, deadline=None)
@given(profiles(1, 4, positive_times=True), st.data())
def test_pooch_is_never_faster_than_brute_force(profile, data):
    scorer = Scorer(profile)
    budget = data.draw(budgets(profile))
    best = math.inf
    for raw in all_plans(len(profile.layers)):
        makespan, peak = scorer.score(*raw)
        if peak <= budget:
            best = min(best, makespan)
    out = pooch(problem_for(profile, budget))
    if out.status is Status.FEASIBLE:
        assert simulate(profile, out.plan).makespan >= best
    else:
        assert best == math.inf  # positive times: infeasible only when nothing fits


# -- determinism and the time limit ----------------------------------------------------


@pytest.mark.parametrize("fraction", [0.3, 0.6])
def test_pooch_returns_the_same_plan_twice(fraction):
    profile = random_chain(80, seed=11)
    budget = planopt.budget_from_fraction(profile, fraction)
    first = pooch(problem_for(profile, budget))
    second = pooch(problem_for(profile, budget))
    assert first.plan == second.plan
    assert first.message == second.message


def test_pooch_returns_a_fitting_plan_when_the_time_limit_has_passed():
    profile = random_chain(60, seed=5)
    budget = planopt.budget_from_fraction(profile, 0.5)
    out = pooch(problem_for(profile, budget, deadline=time.monotonic() - 1.0))
    assert out.status is Status.FEASIBLE and out.stopped
    assert "limit reached" in out.message
    assert simulate(profile, out.plan, budget).peak_bytes <= budget


@dataclass(frozen=True)
class ExpiresAfter(Problem):
    """A problem whose time limit passes after `calls` checks (no clock involved)."""

    calls: int = 0
    counter: list = field(default_factory=lambda: [0], compare=False)

    def expired(self) -> bool:
        self.counter[0] += 1
        return self.counter[0] > self.calls


@pytest.mark.parametrize("fraction", [0.2, 0.5])
def test_pooch_stopped_at_any_check_returns_a_plan_that_fits(fraction):
    profile = random_chain(40, seed=2)
    budget = planopt.budget_from_fraction(profile, fraction)
    budget = max(budget, min_budget(profile))
    full = ExpiresAfter(profile, budget, min_budget(profile), calls=10**9)
    assert pooch(full).status is Status.FEASIBLE
    total = full.counter[0]
    assert total > 10
    for calls in range(0, total, max(1, total // 40)):
        problem = ExpiresAfter(profile, budget, min_budget(profile), calls=calls)
        out = pooch(problem)
        assert out.status is Status.FEASIBLE
        assert "limit reached" in out.message and out.stopped
        assert simulate(profile, out.plan, budget).peak_bytes <= budget


def test_solve_passes_the_time_limit_to_pooch():
    profile = random_chain(60, seed=5)
    solution = planopt.solve(profile, "50%", "greedy", time_limit=1e-9)
    assert solution.status is Status.FEASIBLE
    assert solution.schedule.feasible


# -- hand-worked stages --------------------------------------------------------------


def test_stage1_keeps_the_exposed_copy_first():
    # bandwidth 1 B/s, s = (2, 1, 1, 1), fwd = (1, 1, 2, 1), bwd = 1, budget 4.
    # All-swap: F0 [0,1], copy out of s0 [1,3] still runs when F1 ends at 2:
    # exposed. s1's copy [3,4] ends with F2 [2,4]; s2's [4,5] with F3 [4,5].
    # Exposed first: keep 0 (peak 4: s0 + s1 + s2 during F2), then in reverse
    # order keep 2 (kept 2 + 1 + 1 = 4; s1 is back only after B3 frees s3),
    # then keep 1 fails (keep-all: 5). Reverse order alone would keep 2 and 1
    # and then fail on 0: "skkk".
    profile = chain([2, 1, 1, 1], [1, 1, 2, 1], 1)
    greedy = _Greedy(problem_for(profile, 4))
    w = work("sssk")
    assert greedy.exposed(w) == [0]
    greedy.stage1(w)
    assert text(w) == "kskk"
    assert w.prefetch == [None, 2, None, None]


def test_stage1_stops_the_exposed_pass_at_the_first_that_does_not_fit():
    # bandwidth 1 B/s, s = (2, 3, 1, 1, 3), fwd = (1, 1, 3, 3, 1), bwd = 1,
    # budget 6. Copies out: s0 [1,3] outlasts F1 [1,2], s1 [3,6] outlasts
    # F2 [2,5]: exposed = [0, 1]; s2 [6,7] and s3 [8,9] end with F3, F4.
    # Latest first: keeping 1 breaks the budget (at F4: s1 + s3 + s4 = 7), so
    # the exposed pass stops before trying 0. The reverse pass keeps 3 and 2
    # and then cannot keep 0 (kept 2 + 1 + 1 + 3 = 7). Skipping instead of
    # stopping would have kept 0 first ("ksskk").
    profile = chain([2, 3, 1, 1, 3], [1, 1, 3, 3, 1], 1)
    greedy = _Greedy(problem_for(profile, 6))
    w = work("ssssk")
    assert greedy.exposed(w) == [0, 1]
    greedy.stage1(w)
    assert text(w) == "sskkk"


def test_stage2_recomputes_when_the_swap_costs_more_than_the_forward():
    # [s, k], s = 4 bytes at 1 B/s (copies 4 s), fwd = bwd = 1. Swap: copy out
    # [1,5], copy back from 5 to 9, B0 [9,10]: makespan 10. Copies free: 4.
    # Swap cost 6 > recompute cost fwd0 = 1: layer 0 becomes recompute (4+1 = 5).
    profile = chain([4, 4], 1, 1)
    greedy = _Greedy(problem_for(profile, 8))
    w = work("sk")
    assert greedy.score(w)[0] == 10.0
    greedy.stage2(w)
    assert text(w) == "rk"
    assert greedy.score(w)[0] == 5.0


def test_stage2_keeps_the_swap_when_the_forward_costs_more():
    # fwd0 = 8: copy out [8,12], copy back [12,16] while B1 runs [9,10]: B0
    # [16,17]; free copies: 8+1+1+1 = 11. Swap cost 6 < fwd0 = 8: ratio >= 1.
    profile = chain([4, 4], [8, 1], 1)
    greedy = _Greedy(problem_for(profile, 8))
    w = work("sk")
    greedy.stage2(w)
    assert text(w) == "sk"


@pytest.mark.parametrize(("budget", "expected"), [(8, "rrsk"), (12, "rrrk")])
def test_stage2_does_not_recompute_what_breaks_the_budget(budget, expected):
    # [r, r, s, k], 4 bytes each, copies 4 s, fwd = bwd = 1. Swapping s2 costs
    # 6 s (makespan 16 vs 10 with free copies), recompute costs 1 s. But the
    # merged run 0..2 regenerates s0, s1, s2 together before B2: 12 bytes,
    # where the plan as it stands peaks at 8.
    profile = chain([4, 4, 4, 4], 1, 1)
    greedy = _Greedy(problem_for(profile, budget))
    w = work("rrsk")
    assert greedy.score(w) == (16.0, 8)
    greedy.stage2(w)
    assert text(w) == expected


@pytest.mark.parametrize("retry", [False, True])
def test_stage2_recompute_over_budget_until_the_forward_waits(retry):
    # 4 layers of 2 bytes, copies 2 s, all times 1, budget 4. Stages 4 and 1
    # give [s, s(wait 2), k, k], makespan 13; free copies of 0 give 11, of 1
    # give 10: ratios 1/2 and 1/3. Recomputing 1 first breaks the budget as
    # the plan stands (s0's copy out is still running when F2 and F3 allocate:
    # 6 > 4); with F1 waiting for that copy (PoocH's runtime waits for memory)
    # it fits, so it is taken in the first round, with or without
    # `retry_over_budget`, and 0 is then recomputed too: run 0..1 regenerated
    # after B2, makespan 10. (It was dropped for good before: [r, s, k, k], 12.)
    profile = chain([2, 2, 2, 2], 1, 1)
    out = pooch(problem_for(profile, 4), retry_over_budget=retry)
    assert "".join(a.value[0] for a in out.plan.actions) == "rrkk"
    assert simulate(profile, out.plan, 4).makespan == 10.0


def test_stage2_drops_an_over_budget_recompute_for_good_unless_told_to_retry():
    # Traced BERT-base at 50%: a recompute over the budget even with the forward
    # waiting is dropped for good (52.6% over T_ideal); tried again in later
    # rounds it fits once others are recomputed (38.2%).
    profile = planopt.bundled_profile("bert-base-b32-s512-h100-pcie5-traced")
    plain = planopt.solve(profile, "50%", method="pooch", work_limit=5.0)
    retried = planopt.solve(profile, "50%", method="pooch", work_limit=5.0, retry_over_budget=True)
    assert retried.schedule.makespan < 0.95 * plain.schedule.makespan


def test_stage3_issues_a_slow_copy_back_early():
    # s = (8, 1, 1); d2h fast (100 B/s), h2d 1 B/s (s0 back takes 8 s); bwd2 = 10.
    # Default: s0 is fetched at step 1 (t = 13) and B0 waits until 21: 22.
    # Issued at step 2 (t = 3) behind s1 it ends at 12, hidden by B2: 15 = T_ideal.
    # Delaying it again would expose it, so it stays at step 2.
    profile = chain([8, 1, 1], 1, [1, 1, 10], d2h=100.0, h2d=1.0)
    greedy = _Greedy(problem_for(profile, math.inf))
    w = work("ssk")
    assert greedy.score(w)[0] == 22.0
    greedy.stage3(w)
    assert w.prefetch == [2, 2, None]
    assert greedy.score(w)[0] == profile.t_ideal == 15.0


@pytest.mark.parametrize(("h2d", "expected"), [(1.0, 1), (0.5, 2)])
def test_stage3_delays_each_copy_back_as_late_as_stays_hidden(h2d, expected):
    # [s, k, k, k], 1 byte each, all times 1: B3..B0 run [4,5] .. [7,8].
    # Stage 3 first issues s0 at step 3 (earliest), then delays it: a 1 s copy
    # is hidden when issued at step 1 (t = 6), a 2 s copy at step 2 (t = 5).
    profile = chain([1, 1, 1, 1], 1, 1, d2h=1.0, h2d=h2d)
    greedy = _Greedy(problem_for(profile, math.inf))
    w = work("skkk")
    greedy.stage3(w)
    assert w.prefetch[0] == expected
    assert greedy.score(w)[0] == 8.0


def test_stage4_adds_the_swap_wait_the_budget_needs():
    # 3 layers of 4 bytes, copies 4 s, fwd = bwd = 1, budget 8 (= min_budget).
    # All-swap peaks at 12 (s0, s1, s2 all live when F2 starts at 2). From the
    # minimum-memory plan, both copies back go one step ahead and layer 1's
    # wait goes (F2 then starts at 6, just as s0's memory is freed), but
    # layer 0's wait must stay: without it F2 starts while s0 is still copied.
    profile = chain([4, 4, 4], 1, 1)
    assert min_budget(profile) == 8
    greedy = _Greedy(problem_for(profile, 8))
    w = work("ssk")
    assert greedy.score(w)[1] == 12
    greedy.start(w)
    assert text(w) == "ssk"
    assert w.prefetch == [1, 2, None]
    assert w.wait == [1, None, None]
    out = pooch(problem_for(profile, 8))
    assert out.status is Status.FEASIBLE
    assert simulate(profile, out.plan, 8).peak_bytes <= 8


def test_pooch_on_a_bundled_profile_beats_all_swap_where_both_fit():
    profile = planopt.bundled_profile("alexnet-b128-caffe-titanx")
    budget = planopt.budget_from_fraction(profile, 0.7)
    ours = planopt.solve(profile, budget, "pooch")
    swap = planopt.solve(profile, budget, "all-swap")
    assert swap.status is Status.FEASIBLE
    assert ours.makespan <= swap.makespan
    assert ours.schedule.feasible


@pytest.mark.parametrize("work", [1e-4, 1e-3, 1e-2])
def test_pooch_under_a_work_limit_is_deterministic_and_fits(work):
    profile = random_chain(60, seed=5)
    budget = planopt.budget_from_fraction(profile, 0.4)
    runs = [planopt.solve(profile, budget, "greedy", work_limit=work) for _ in range(2)]
    assert runs[0].plan == runs[1].plan and runs[0].work_used == runs[1].work_used
    assert runs[0].schedule.feasible
    # it stops at the first check past its limit: at most one batched probe beyond it
    # (two simulations and a share per probe, at the greedy's rate)
    probe = VECTOR_PASS_SIMULATIONS + 60 / PROBES_PER_SIMULATION
    assert runs[0].work_used <= work + method_rate("pooch") * 60e-6 * probe


def test_pooch_returns_keep_all_at_once_when_it_fits():
    profile = random_chain(5000, seed=1)
    sol = planopt.solve(profile, planopt.keep_all_peak(profile) * 13, "greedy")
    assert sol.plan.actions == (KEEP,) * 5000
    assert sol.status is Status.OPTIMAL and sol.makespan == profile.t_ideal
    assert sol.work_used <= method_rate("pooch") * 5000e-6  # one simulation
