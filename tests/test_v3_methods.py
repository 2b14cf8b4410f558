"""Which methods plan over menus (cost model v3), and the others refuse cleanly.

The registry says it (`MethodSpec.menus`, `signed_scratch`); `solve`
enforces it with an `UnsupportedProfileError` naming the method, and
`min_budget` stays a valid bound on /3 profiles (never above any plan's
peak, enumerated with options).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from strategies import v3_profiles

import planopt
from planopt import Layer, LayerOption, Plan, registry
from planopt.errors import UnsupportedProfileError
from planopt.registry import Menus
from solvers.brute_force import enumerate_raw_v3

MIB = 1 << 20
PLANS_OVER_MENUS = {
    "pooch", "remat-dp", "brute-force", "exact", "recompute-only", "swap-only",
    "lns", "blocks", "auto", "lower-bound",
}  # fmt: skip
WHOLE_LAYER_RULES = {"keep-all", "all-swap", "sqrt-n", "superneurons"}


def _profile(*, menu: bool = True, scratch: int = 0) -> planopt.Profile:
    options = (LayerOption("half", 50 * MIB, 0.0005, (0,)),) if menu else ()
    layers = (
        Layer("a", 0.001, 0.002, 20 * MIB, saves_input=True),
        Layer("b", 0.001, 0.002, 20 * MIB, saved_bytes=100 * MIB, saves_input=True,
              input_grad_bytes=20 * MIB, bwd_work_bytes=scratch, options=options),
        Layer("c", 0.001, 0.002, 5 * MIB, saves_input=True, input_grad_bytes=20 * MIB),
    )  # fmt: skip
    return planopt.Profile("v3", planopt.Device("d", 1e10, 1e10), 0, layers)


def test_the_registry_says_which_methods_plan_over_menus():
    spaces = {name: registry.get(name).menus for name in registry.names()}
    assert {n for n, m in spaces.items() if m is Menus.PLANS} == PLANS_OVER_MENUS
    assert {n for n, m in spaces.items() if m is Menus.WHOLE} == WHOLE_LAYER_RULES
    for name in PLANS_OVER_MENUS:
        assert registry.get(name).space_label.endswith("+ options")


@pytest.mark.parametrize("name", sorted(registry.available()))
def test_every_method_plans_over_menus_or_refuses_naming_itself(name):
    profile = _profile()
    spec = registry.get(name)
    if spec.menus is Menus.REFUSES:
        with pytest.raises(UnsupportedProfileError) as info:
            planopt.solve(profile, "90%", name, work_limit=5)
        assert f"method {spec.name!r} does not plan over layer options yet" in str(info.value)
        assert "pooch" in str(info.value) and "remat-dp" in str(info.value)
        return
    solution = planopt.solve(profile, "90%", name, work_limit=5)
    if solution.plan is not None:
        assert solution.schedule.peak_bytes <= solution.budget or not solution.schedule.feasible
        if spec.menus is Menus.WHOLE:
            assert not solution.plan.has_options


@pytest.mark.parametrize("name", sorted(registry.available()))
def test_a_negative_scratch_is_modelled_or_refused(name):
    profile = _profile(menu=False, scratch=-10 * MIB)
    spec = registry.get(name)
    if not spec.signed_scratch:
        with pytest.raises(UnsupportedProfileError) as info:
            planopt.solve(profile, "90%", name, work_limit=5)
        assert "negative backward scratch" in str(info.value) and "layer 1 (b)" in str(info.value)
    else:
        planopt.solve(profile, "90%", name, work_limit=5)


def test_lower_bound_bounds_menus_and_a_negative_scratch():
    """The relaxation models options and the signed scratch (tests/test_bound_menus.py
    checks it against enumeration); it refused both before."""
    for profile in (_profile(), _profile(menu=False, scratch=-MIB)):
        bound = planopt.lower_bound(profile, "100%")
        assert bound is not None and bound >= profile.t_ideal
    assert planopt.lower_bound(_profile(menu=False), "100%") is not None


def test_every_built_in_method_models_a_negative_scratch():
    """Since the plan model states it (exact, recompute-only, swap-only and the searches
    on their windows: tests/test_exact_signed.py), no built-in method refuses one."""
    assert all(registry.get(name).signed_scratch for name in registry.names())


def test_the_cli_refuses_with_exit_2(tmp_path, capsys):
    """A method registered without the signed scratch is refused, naming itself."""
    from planopt import cli

    spec = dataclasses.replace(
        registry.get("keep-all"), name="unsigned-rule", aliases=(), signed_scratch=False
    )
    registry.register(spec)
    try:
        planopt.save_profile(_profile(menu=False, scratch=-MIB), tmp_path / "p.json")
        args = ["solve", str(tmp_path / "p.json"), "--budget", "90%", "--method", "unsigned-rule"]
        assert cli.main(args) == 2
    finally:
        registry.unregister("unsigned-rule")
    err = capsys.readouterr().err
    assert "method 'unsigned-rule' does not model a negative backward scratch yet" in err


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(v3_profiles(1, 4))
def test_min_budget_stays_a_valid_bound_on_v3_profiles(profile):
    """No plan, options and swaps included, peaks below min_budget; its witness is a plan."""
    low = planopt.min_budget(profile)
    layers = profile.layers
    flags = tuple(x.saves_input for x in layers)
    menus = tuple(tuple(o.name for o in x.options) for x in layers)
    scorer = planopt.Scorer(profile)
    raws = enumerate_raw_v3(len(layers), with_swap_wait=True, saves_input=flags, menus=menus)
    for actions, prefetch, wait, options in itertools.islice(raws, 4000):
        assert scorer.score(actions, prefetch, wait, options=options)[1] >= low
    value, exact = planopt.min_budget_info(profile)
    witness = planopt.simulate(profile, planopt.min_memory_plan(profile)).peak_bytes
    assert value == low and (witness == low) == exact


def test_a_plan_without_options_on_a_menu_profile_is_the_v2_plan():
    profile = _profile()
    bare = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])
    plan = Plan.build(["keep", "swap", "keep"], profile=profile)
    a = planopt.simulate(profile, plan)
    b = planopt.simulate(bare, Plan(plan.actions, plan.prefetch_at, plan.swap_wait))
    assert (a.makespan, a.peak_bytes) == (b.makespan, b.peak_bytes)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(v3_profiles(1, 3))
def test_brute_force_over_menus_bounds_every_method_that_plans_over_them(profile):
    """The oracle enumerates options too: nothing beats it, and menus never make it slower."""
    budget = planopt.budget_from_fraction(profile, 0.7)
    if budget < planopt.min_budget(profile):
        return
    oracle = planopt.solve(profile, budget, "brute-force")
    bare = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])
    whole = planopt.solve(bare, budget, "brute-force")
    if whole.plan is not None:
        assert oracle.schedule.makespan <= whole.schedule.makespan * (1 + 1e-12)
    for name in ("remat-dp", "pooch"):
        other = planopt.solve(profile, budget, name)
        if other.plan is not None:
            assert oracle.plan is not None
            assert oracle.schedule.makespan <= other.schedule.makespan * (1 + 1e-12)


def test_show_names_a_layers_option(tmp_path, capsys):
    from planopt import cli

    profile = _profile()
    planopt.save_profile(profile, tmp_path / "p.json")
    plan = Plan.build(["keep", "swap", "keep"], profile=profile, options=[None, "half", None])
    planopt.save_plan(plan, tmp_path / "plan.json")
    assert cli.main(["show", str(tmp_path / "p.json"), str(tmp_path / "plan.json")]) == 0
    assert "swap [half] (back at B2)" in capsys.readouterr().out
