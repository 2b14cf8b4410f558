"""PoocH's stage 5 (cost model v3): options offered to layers left swapped or recomputed whole.

Stages 1-3 never look at menus, so on a profile with menus they end where
they end on the same profile without; stage 5 only takes a change that fits
and is strictly faster: pooch with menus is never slower, always fits, and
on blocks whose options are cheap it takes them.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import v3_profiles

import planopt
from planopt.result import Status

EXAMPLES = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))


@EXAMPLES
@given(v3_profiles(1, 6), st.floats(0.0, 1.0))
def test_pooch_with_menus_fits_and_is_never_slower_than_without(profile, fraction):
    whole = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])
    budget = planopt.budget_from_fraction(profile, fraction)
    with_menu = planopt.solve(profile, budget, "pooch")
    without = planopt.solve(whole, budget, "pooch")
    assert (with_menu.plan is None) == (without.plan is None)
    if with_menu.plan is None:
        return
    assert with_menu.schedule.peak_bytes <= budget
    assert with_menu.schedule.makespan <= without.schedule.makespan * (1 + 1e-12)
    if with_menu.plan.has_options:
        assert with_menu.schedule.makespan < without.schedule.makespan
        assert "stage 5" in with_menu.message


def test_pooch_takes_a_cheap_option_before_a_whole_recompute():
    mib = 1 << 20
    layers = tuple(
        planopt.Layer(
            f"block{i}", 0.001, 0.002, 10 * mib, saved_bytes=100 * mib, saves_input=True,
            input_grad_bytes=10 * mib if i else 0,
            options=(planopt.LayerOption("quarter", 25 * mib, 0.0001, (0,)),),
        )
        for i in range(6)
    )  # fmt: skip
    device = planopt.Device("slow-link", 1e8, 1e8)  # copies cost far more than recompute
    profile = planopt.Profile("blocks", device, 0, layers)
    whole = profile.replace_layers([dataclasses.replace(x, options=()) for x in layers])
    # (at 70% only a swap with an option fits, which stage 5 no longer tries)
    budget = planopt.budget_from_fraction(whole, 0.75)
    with_menu = planopt.solve(profile, budget, "pooch")
    without = planopt.solve(whole, budget, "pooch")
    assert with_menu.status is Status.FEASIBLE and without.status is Status.FEASIBLE
    assert with_menu.plan.has_options
    assert with_menu.schedule.makespan < without.schedule.makespan
    assert with_menu.schedule.makespan == pytest.approx(
        planopt.simulate(profile, with_menu.plan).makespan
    )


def _no_swap_with_an_option(plan) -> None:
    for action, option in zip(plan.actions, plan.options or (), strict=False):
        assert option is None or action is planopt.plan.KEEP


def test_pooch_never_gives_an_option_to_a_swapped_layer():
    """No runtime runs a swap of an option's kept subset (the executor and apply
    refuse it), so stage 5 offers options as `keep` only: on these blocks at 70%
    it gave the swapped layer `swap` + "quarter" before."""
    mib = 1 << 20
    option = planopt.LayerOption("quarter", 25 * mib, 0.0001, (0,))
    layers = tuple(
        planopt.Layer(
            f"block{i}", 0.001, 0.002, 10 * mib, saved_bytes=100 * mib, saves_input=True,
            input_grad_bytes=10 * mib if i else 0, options=(option,),
        )
        for i in range(6)
    )  # fmt: skip
    profile = planopt.Profile("blocks", planopt.Device("slow-link", 1e8, 1e8), 0, layers)
    whole = profile.replace_layers([dataclasses.replace(x, options=()) for x in layers])
    for fraction in (0.6, 0.7, 0.75, 0.8, 0.9):
        solution = planopt.solve(profile, planopt.budget_from_fraction(whole, fraction), "pooch")
        _no_swap_with_an_option(solution.plan)


@EXAMPLES
@given(v3_profiles(1, 6), st.floats(0.0, 1.0))
def test_pooch_never_gives_an_option_to_a_swapped_layer_on_random_chains(profile, fraction):
    plan = planopt.solve(profile, planopt.budget_from_fraction(profile, fraction), "pooch").plan
    if plan is not None:
        _no_swap_with_an_option(plan)
