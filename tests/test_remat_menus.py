"""remat-dp over menus (cost model v3): proven against enumeration and the simulator.

Every keep/option/recompute plan of small random /3 chains is enumerated and
simulated: the DP's optimum must be the fastest one that fits (and none when
none fits), and its segment decomposition must give each plan's simulated
peak. A negative backward scratch without menus goes through the v2 DP,
checked the same way.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import v3_profiles

import planopt
from planopt import Plan
from planopt.result import Status
from solvers.remat.menu_search import solve_menus
from solvers.remat.menus import MenuChain

EXAMPLES = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


def _space(profile):
    """Every keep/option/recompute plan, simulated: [(makespan, peak, plan)]."""
    out = []
    for acts in itertools.product(["keep", "recompute"], repeat=len(profile.layers)):
        menus = [
            [None, *(o.name for o in x.options)] if a == "keep" else [None]
            for a, x in zip(acts, profile.layers, strict=True)
        ]
        for opts in itertools.product(*menus):
            plan = Plan.build(list(acts), profile=profile, options=list(opts))
            schedule = planopt.simulate(profile, plan)
            out.append((schedule.makespan, schedule.peak_bytes, plan))
    return out


def _budget(space, pick: int) -> int:
    peaks = sorted({p for _, p, _ in space})
    return peaks[pick % len(peaks)] + (pick % 3) - 1


@EXAMPLES
@given(v3_profiles(1, 5), st.integers(0, 1000))
def test_the_optimum_over_menus_is_the_enumerated_one(profile, pick):
    space = _space(profile)
    budget = _budget(space, pick)
    best = min((m for m, p, _ in space if p <= budget), default=None)
    result = solve_menus(MenuChain(profile), budget - profile.static_bytes)
    found = result.plan
    assert result.proven
    if best is None:
        assert found is None
        return
    assert found is not None
    assert found.makespan == pytest.approx(best, rel=1e-12, abs=1e-15)
    plan = Plan.build(list(found.actions), profile=profile, options=list(found.options))
    schedule = planopt.simulate(profile, plan)
    assert schedule.peak_bytes <= budget
    assert schedule.makespan == pytest.approx(found.makespan, rel=1e-12, abs=1e-15)


@EXAMPLES
@given(v3_profiles(1, 5, positive_times=True))
def test_the_segment_decomposition_gives_every_plans_simulated_peak(profile):
    chain = MenuChain(profile)
    for _, peak, plan in _space(profile):
        assert chain.peak(tuple(a.value for a in plan.actions), plan.options) == peak


@EXAMPLES
@given(v3_profiles(1, 5), st.integers(0, 1000))
def test_remat_dp_through_solve_plans_over_menus(profile, pick):
    space = _space(profile)
    budget = _budget(space, pick)
    best = min((m for m, p, _ in space if p <= budget), default=None)
    if budget < planopt.min_budget(profile):
        return  # solve answers below the minimum without the method
    solution = planopt.solve(profile, budget, "remat-dp")
    if best is None:
        assert solution.plan is None and solution.status is Status.INFEASIBLE
        return
    assert solution.status is Status.OPTIMAL
    assert solution.schedule.makespan == pytest.approx(best, rel=1e-12, abs=1e-15)
    assert all(a.value in ("keep", "recompute") for a in solution.plan.actions)


@EXAMPLES
@given(v3_profiles(1, 6), st.integers(0, 1000))
def test_a_negative_scratch_without_menus_is_planned_exactly(profile, pick):
    profile = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])
    space = _space(profile)
    budget = _budget(space, pick)
    if budget < planopt.min_budget(profile):
        return
    best = min((m for m, p, _ in space if p <= budget), default=None)
    solution = planopt.solve(profile, budget, "remat-dp")
    if best is None:
        assert solution.plan is None
    else:
        assert solution.schedule.makespan == pytest.approx(best, rel=1e-12, abs=1e-15)


def test_a_menu_lowers_the_cost_of_a_tight_budget():
    """Four blocks whose options keep a quarter of their internals for a tenth of their forward:
    where whole blocks cannot fit the menu plan can, and where both fit the menu plan is faster."""
    mib = 1 << 20
    layers = []
    for i in range(4):
        menu = (planopt.LayerOption("quarter", 25 * mib, 0.0001, (0,)),)
        layers.append(
            planopt.Layer(
                f"block{i}", 0.001, 0.002, 10 * mib, saved_bytes=100 * mib, saves_input=True,
                input_grad_bytes=10 * mib if i else 0, options=menu,
            )
        )  # fmt: skip
    profile = planopt.Profile("blocks", planopt.Device("d", 1e10, 1e10), 0, tuple(layers))
    whole = profile.replace_layers([dataclasses.replace(x, options=()) for x in layers])
    tight = planopt.budget_from_fraction(whole, 0.6)
    assert planopt.solve(whole, tight, "remat-dp").status is Status.INFEASIBLE
    assert planopt.solve(profile, tight, "remat-dp").status is Status.OPTIMAL
    budget = planopt.budget_from_fraction(whole, 0.85)
    with_menu = planopt.solve(profile, budget, "remat-dp")
    without = planopt.solve(whole, budget, "remat-dp")
    assert with_menu.status is Status.OPTIMAL and without.status is Status.OPTIMAL
    assert with_menu.schedule.makespan < without.schedule.makespan
    assert any(o is not None for o in with_menu.plan.options)


@EXAMPLES
@given(v3_profiles(1, 7))
def test_the_running_rows_are_the_segment_costs(profile):
    chain = MenuChain(profile)
    for k in range(-1, chain.n):
        for a in range(len(chain.choices[k])) if k >= 0 else (0,):
            for t, b, cost, held, growing in chain.row(k, a):
                assert (cost, held, growing) == chain.segment(k, a, t, b), (k, a, t, b)


def test_cut_short_it_returns_the_whole_layer_start_with_a_valid_bound():
    """Anytime: a work limit that stops the label search still returns a plan that fits
    (the whole-layer optimum it starts from), never worse than it, with a bound below it."""
    mib = 1 << 20
    layers = tuple(
        planopt.Layer(
            f"block{i}", 0.001, 0.002, 10 * mib, saved_bytes=100 * mib, saves_input=True,
            input_grad_bytes=10 * mib if i else 0,
            options=tuple(
                planopt.LayerOption(f"k{q}", q * 25 * mib, 2e-4 * (4 - q), (q,)) for q in (1, 2, 3)
            ),
        )
        for i in range(40)
    )  # fmt: skip
    profile = planopt.Profile("blocks", planopt.Device("d", 1e10, 1e10), 0, layers)
    whole = profile.replace_layers([dataclasses.replace(x, options=()) for x in layers])
    budget = planopt.budget_from_fraction(whole, 0.7)
    start = planopt.solve(whole, budget, "remat-dp")
    full = planopt.solve(profile, budget, "remat-dp")
    assert full.status is Status.OPTIMAL
    assert start.work_used < full.work_used
    limit = (start.work_used + full.work_used) / 2  # the limit falls inside the label search
    cut = planopt.solve(profile, budget, "remat-dp", work_limit=limit)
    assert cut.status is Status.FEASIBLE
    assert cut.schedule.peak_bytes <= budget
    assert cut.schedule.makespan <= start.schedule.makespan * (1 + 1e-12)
    assert cut.lower_bound <= full.schedule.makespan * (1 + 1e-12)
    assert full.schedule.makespan <= cut.schedule.makespan * (1 + 1e-12)
