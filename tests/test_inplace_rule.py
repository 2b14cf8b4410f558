"""The in-place rule in the planner: the profile field, the predicate and every method.

Issue 25, item 5a: a layer that changes its input in place
(`Layer.modifies_input`) restricts the plans that run (cost model, "The
in-place rule", `planopt.runnable`). Evidence: exhaustive enumeration under
the rule, written here from the rule's text (the test's own `_breaks`),
against brute force, the exact model on CP-SAT and HiGHS, and remat-dp in its
space; every registered method's plan keeps the rule. Before, the planners
knew nothing of it: exact and remat-dp returned plans the runtimes refuse.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import v2_profiles, v3_profiles

import planopt
from planopt import InvalidPlanError, Plan, Status, registry
from planopt.errors import UnsupportedProfileError
from planopt.io import profile_from_dict, profile_to_dict
from planopt.plan import KEEP, RECOMPUTE, SWAP
from planopt.runnable import repair, runnable
from solvers.brute_force import enumerate_raw_v3

RULED = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _flagged(profile, flags):
    pairs = zip(profile.layers, flags, strict=True)
    layers = [dataclasses.replace(x, modifies_input=f) for x, f in pairs]
    return profile.replace_layers(layers)


@st.composite
def ruled(draw, base):
    profile = draw(base)
    flags = draw(st.lists(st.booleans(), min_size=len(profile), max_size=len(profile)))
    return _flagged(profile, flags)


def _breaks(profile, actions, options, wait) -> bool:
    """The rule as the cost model states it (docs/cost-model.md, "The in-place rule")."""
    layers = profile.layers
    for j, layer in enumerate(layers):
        if not layer.modifies_input:
            continue
        replayed = actions[j] is RECOMPUTE or options[j] is not None
        below = KEEP if j == 0 else actions[j - 1]
        read = j > 0 and (layers[j - 1].saves_output or layer.saves_input)
        if replayed and below is KEEP:
            return True
        if not replayed and below is not KEEP and read:
            return True
        if replayed and below is SWAP and wait[j - 1] != j:
            return True
    return False


def _scores(profile, space=None):
    """(makespan, peak, raw) of every plan that keeps the rule (of `space`'s actions)."""
    score = planopt.Scorer(profile).score
    menus = tuple(tuple(o.name for o in x.options) for x in profile.layers)
    flags = tuple(x.saves_input for x in profile.layers)
    out = []
    for raw in enumerate_raw_v3(len(profile), saves_input=flags, menus=menus):
        actions, prefetch, wait, options = raw
        if space is not None and not set(actions) <= space:
            continue
        if not _breaks(profile, actions, options, wait):
            out.append((*score(actions, prefetch, wait, options=options), raw))
    return out


def _budgets(scores):
    peaks = sorted({peak for _, peak, _ in scores})
    return sorted({peaks[0], peaks[len(peaks) // 2], peaks[-1], max(0, peaks[0] - 1)})


def _check(solution, scores, budget):
    fitting = [t for t, peak, _ in scores if peak <= budget]
    if not fitting:
        assert solution.plan is None, solution.message
        assert solution.status is Status.INFEASIBLE, solution.message
        return
    assert solution.status is Status.OPTIMAL, solution.message
    assert solution.makespan == pytest.approx(min(fitting), rel=1e-6, abs=1e-12)


def _check_sound(solution, scores, budget):
    """What a floating-point back-end answers is true, proven or not.

    HiGHS solves the linear translation in floating point
    (`solvers/backends/highs.py` says what that costs): `exact` may then
    answer `feasible` or `no plan found` where CP-SAT proves the optimum. What
    it says must hold: an optimum is the optimum, `infeasible` means no plan
    fits, a bound is below every plan that fits.
    """
    fitting = [t for t, peak, _ in scores if peak <= budget]
    if solution.status is Status.OPTIMAL or solution.status is Status.INFEASIBLE:
        _check(solution, scores, budget)
        return
    assert solution.status is not Status.FEASIBLE or fitting, solution.message
    if fitting and solution.lower_bound is not None:
        assert solution.lower_bound <= min(fitting) * (1 + 1e-6), solution.message
    if solution.plan is not None:
        assert solution.makespan >= min(fitting) * (1 - 1e-6), solution.message


@RULED
@given(ruled(v2_profiles(1, 4)))
def test_brute_force_and_the_exact_model_find_the_optimum_under_the_rule(profile):
    """Before: the exact model's optimum broke the rule on most such chains."""
    scores = _scores(profile)
    for budget in _budgets(scores):
        for method, kw, check in (
            ("brute-force", {}, _check),
            ("exact", {}, _check),
            ("exact", {"backend": "highs"}, _check_sound),
        ):
            solution = planopt.solve(profile, budget, method, work_limit=60, **kw)
            check(solution, scores, budget)


@RULED
@given(ruled(v2_profiles(1, 5)))
def test_remat_dp_finds_the_recompute_only_optimum_under_the_rule(profile):
    scores = _scores(profile, {KEEP, RECOMPUTE})
    for budget in _budgets(scores):
        _check(planopt.solve(profile, budget, "remat-dp"), scores, budget)


@RULED
@given(ruled(v3_profiles(1, 3)))
def test_remat_dp_over_menus_finds_the_optimum_under_the_rule(profile):
    scores = _scores(profile, {KEEP, RECOMPUTE})
    for budget in _budgets(scores):
        _check(planopt.solve(profile, budget, "remat-dp"), scores, budget)


def _methods():
    return [m for m in registry.planners() if registry.get(m).role is not registry.Role.BOUND]


@RULED
@given(ruled(v3_profiles(2, 5)), st.integers(0, 3))
def test_every_method_returns_a_plan_that_keeps_the_rule(profile, pick):
    if len(profile) <= 4:
        choices = _budgets(_scores(profile))
        budget = choices[pick % len(choices)]
    else:
        budget = planopt.budget_from_fraction(profile, 0.25 * pick + 0.2)
    for method in _methods():
        try:
            solution = planopt.solve(profile, budget, method, work_limit=2)
        except UnsupportedProfileError:
            continue
        plan = solution.plan
        if plan is not None:
            assert runnable(profile, plan.actions, plan.options, plan.swap_wait), method


# -- the field, the predicate, the refusal ------------------------------------------


def _chain(flags=(False, True, False), saves_input=True):
    layers = [
        planopt.Layer(f"l{i}", 1.0, 1.0, 64, 32, saves_input=saves_input, modifies_input=f)
        for i, f in enumerate(flags)
    ]
    return planopt.Profile("chain", planopt.Device("d", 1e3, 1e3), 0, tuple(layers))


def test_the_field_round_trips_and_older_files_mean_what_they_meant():
    ruled_profile = _chain()
    data = profile_to_dict(ruled_profile)
    assert data["format"] == "planopt.profile/2"
    assert [x.get("modifies_input") for x in data["layers"]] == [None, True, None]
    assert profile_from_dict(data) == ruled_profile
    plain = _chain((False, False, False))
    assert "modifies_input" not in str(profile_to_dict(plain))
    # the fingerprint of a profile without the flag is what it was (plans stay valid)
    assert plain.fingerprint != ruled_profile.fingerprint
    before = plain.replace_layers(
        [dataclasses.replace(x, modifies_input=False) for x in plain.layers]
    )
    assert before.fingerprint == plain.fingerprint


@pytest.mark.parametrize(
    ("below", "above", "option", "wait", "ok"),
    [
        (KEEP, KEEP, False, None, True),
        (KEEP, SWAP, False, None, True),
        (KEEP, RECOMPUTE, False, None, False),
        (SWAP, RECOMPUTE, False, None, False),  # the copy would race the change
        (SWAP, RECOMPUTE, False, 1, True),
        (RECOMPUTE, RECOMPUTE, False, None, True),
        (SWAP, KEEP, False, None, False),
        (RECOMPUTE, SWAP, False, None, False),
        (KEEP, KEEP, True, None, False),
        (RECOMPUTE, KEEP, True, None, True),
    ],
)
def test_the_predicate_is_the_table(below, above, option, wait, ok):
    profile = _chain((False, True))
    options = (None, "o") if option else None
    assert runnable(profile, (below, above), options, (wait, None)) is ok


def test_a_plan_that_breaks_the_rule_is_refused_naming_both_layers():
    profile = _chain()
    plan = Plan.build([KEEP, RECOMPUTE, KEEP], profile=profile)
    with pytest.raises(InvalidPlanError, match=r"layer 1 \(l1\).*layer 0 \(l0\).*in-place rule"):
        planopt.simulate(profile, plan)
    # where nothing reads x_1 below the change, a swap below a kept l1 runs
    free = _chain(saves_input=False)
    planopt.simulate(free, Plan.build([SWAP, KEEP, KEEP], profile=free))


@given(ruled(v2_profiles(1, 6)), st.data())
@settings(max_examples=60, deadline=None)
def test_repair_keeps_the_rule_and_only_keeps_or_waits(profile, data):
    n = len(profile)
    acts = data.draw(st.lists(st.sampled_from([KEEP, SWAP, RECOMPUTE]), min_size=n, max_size=n))
    plan = Plan.build(acts, profile=profile)
    fixed = repair(profile, plan.actions, plan.prefetch_at, plan.swap_wait)
    assert runnable(profile, fixed[0], None, fixed[2])
    for old, new in zip(plan.actions, fixed[0], strict=True):
        assert new is old or new is KEEP
    planopt.simulate(profile, Plan.build(*fixed[:3], profile=profile))  # valid


def test_the_minimum_memory_plan_keeps_the_rule():
    profile = _chain((True, True, True))
    plan = planopt.min_memory_plan(profile)
    assert runnable(profile, plan.actions, plan.options, plan.swap_wait)
    assert math.isfinite(planopt.simulate(profile, plan).peak_bytes)
