"""Budgets: `min_budget` against brute force, fractions of keep-all, parsing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import profiles

import planopt
from planopt import (
    BudgetError,
    Plan,
    Scorer,
    budget_from_fraction,
    keep_all_peak,
    min_budget,
    min_memory_plan,
    parse_budget,
    simulate,
)
from planopt.budget import min_budget_info
from planopt.result import Status
from solvers.brute_force import enumerate_raw

SMALL = settings(max_examples=40, deadline=None)


def smallest_peak(profile) -> int:
    """The smallest peak over every plan (with swap_wait), by brute force."""
    peak = Scorer(profile).peak
    return min(peak(*raw) for raw in enumerate_raw(len(profile.layers)))


@SMALL
@given(profiles(1, 4, positive_times=True))
def test_min_budget_is_the_smallest_peak_of_all_plans(profile):
    # With positive times min_budget is exact: equal to brute force's minimum.
    assert min_budget(profile) == smallest_peak(profile)
    assert min_budget_info(profile) == (min_budget(profile), True)


@SMALL
@given(profiles(1, 4))
def test_min_budget_is_a_lower_bound_and_exact_when_it_says_so(profile):
    # Zero-duration layers can make tensors vanish (free before allocate), so
    # there min_budget is only a lower bound; it must say which.
    value, exact = min_budget_info(profile)
    best = smallest_peak(profile)
    assert value == min_budget(profile)
    assert value <= best
    if exact:
        assert value == best


def test_min_budget_says_when_its_witness_misses_the_bound():
    # Two layers, every time 0, s0 = 1, s1 = 0, latency 0.25. No operation
    # lasts, so the bound is static = 0, and keep-all meets it: s0 lives
    # [0, B0 end 0), an empty interval. min_memory_plan swaps layer 0 and
    # s0 then lives until its copy out ends at 0.25: its peak is 1. The
    # bound is right (brute force finds 0) but min_memory_plan is not its
    # witness, and min_budget_info must say "not exact".
    profile = planopt.Profile(
        "zero-times",
        planopt.Device("d", math.inf, math.inf, 0.25),
        0,
        (planopt.Layer.v1("l0", 0.0, 0.0, 1), planopt.Layer.v1("l1", 0.0, 0.0, 0)),
    )
    assert smallest_peak(profile) == 0
    assert min_budget_info(profile) == (0, False)
    assert simulate(profile, min_memory_plan(profile)).peak_bytes == 1


@SMALL
@given(profiles(1, 6, positive_times=True))
def test_min_memory_plan_meets_min_budget(profile):
    plan = min_memory_plan(profile)
    plan.check(profile)
    assert simulate(profile, plan).peak_bytes == min_budget(profile)


@SMALL
@given(profiles(1, 6))
def test_min_memory_plan_meets_min_budget_when_exact(profile):
    value, exact = min_budget_info(profile)
    peak = simulate(profile, min_memory_plan(profile)).peak_bytes
    assert peak >= value
    assert (peak == value) == exact


@SMALL
@given(profiles(1, 8))
def test_budget_fractions_span_static_to_keep_all(profile):
    keep_all = simulate(profile, Plan.keep_all(profile)).peak_bytes
    assert keep_all_peak(profile) == keep_all
    assert budget_from_fraction(profile, 1.0) == keep_all
    assert budget_from_fraction(profile, 0.0) == profile.static_bytes
    # Budgets are whole bytes, rounded down (a plan fits b exactly when it fits floor(b)).
    half = math.floor(profile.static_bytes + 0.5 * (keep_all - profile.static_bytes))
    assert budget_from_fraction(profile, 0.5) == half
    assert parse_budget("50%", profile) == half
    assert parse_budget("100%", profile) == pytest.approx(keep_all)


@pytest.fixture
def profile():
    return planopt.bundled_profile(planopt.bundled_profile_names()[0])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (12884901888, 12884901888),
        (1000.0, 1000.0),
        ("12884901888", 12884901888),
        ("12GiB", 12 * 2**30),
        ("12 GiB", 12 * 2**30),
        ("1.5GB", 1.5e9),
        ("1.5gb", 1.5e9),
        ("512MiB", 512 * 2**20),
        ("2kb", 2000),
        ("3KiB", 3072),
        ("1TiB", 2**40),
        ("7B", 7),
        ("0", 0),
    ],
)
def test_parse_budget_sizes(profile, text, expected):
    assert parse_budget(text, profile) == pytest.approx(expected, rel=1e-15)


def test_parse_budget_percentages(profile):
    static = profile.static_bytes
    keep = keep_all_peak(profile)
    assert parse_budget("0%", profile) == static
    assert parse_budget("100%", profile) == keep
    assert parse_budget("50%", profile) == pytest.approx(static + 0.5 * (keep - static))
    assert parse_budget("12.5%", profile) == pytest.approx(static + 0.125 * (keep - static))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "12 parsecs",
        "GiB",
        "%",
        "50%%",
        "-5",
        "-5GiB",
        "1.2.3GB",
        "12GiBs",
        "five",
        "nan",
        "inf",
        -1,
        math.nan,
        math.inf,
        True,
        None,
    ],
)
def test_parse_budget_rejects_garbage(profile, text):
    with pytest.raises(BudgetError, match="budget"):
        parse_budget(text, profile)


@pytest.mark.parametrize("fraction", [-0.1, math.nan, math.inf, "half", True])
def test_budget_from_fraction_rejects_bad_fractions(profile, fraction):
    with pytest.raises(BudgetError, match="fraction"):
        budget_from_fraction(profile, fraction)


@SMALL
@given(profiles(1, 5), st.integers(1, 50))
def test_solve_below_min_budget_is_infeasible_with_the_minimum(profile, short):
    minimum = min_budget(profile)
    if minimum - short < 0:
        return
    solution = planopt.solve(profile, minimum - short, "keep-all")
    assert solution.status is Status.INFEASIBLE
    assert solution.plan is None
    assert solution.min_budget == minimum
    assert str(minimum) in solution.message
