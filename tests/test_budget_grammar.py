"""One budget grammar: whole bytes everywhere, and no bare fraction taken for bytes.

`--budget 0.5` meant half a byte on `solve` and 50% in `experiment sweep`;
`--json` printed `959080036.5`. Now `parse_budget` returns whole bytes
(rounded down: a plan fits `b` bytes exactly when it fits `floor(b)`, and
never more than asked), a bare number strictly between 0 and 1 is refused
with a hint to write a percentage, and `parse_budget_fraction` is the same
grammar for the commands that take a share of keep-all (the sweeps).
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

import planopt
from planopt import BudgetError, Plan, parse_budget
from planopt.budget import MAX_BUDGET_BYTES, budget_from_fraction, parse_budget_fraction

NAME = "alexnet-b128-caffe-titanx"


@pytest.fixture(scope="module")
def profile():
    return planopt.bundled_profile(NAME)


@pytest.mark.parametrize("text", ["0.5", 0.5, "0.999", ".5", "5e-1", 1e-9])
def test_a_bare_number_below_one_is_refused_with_a_percentage_hint(profile, text):
    with pytest.raises(BudgetError) as info:
        parse_budget(text, profile)
    message = str(info.value)
    assert "50%" in message and repr(text) in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        (0, 0),
        ("1", 1),
        ("1.0", 1),
        (1000.0, 1000),
        ("1.5GB", 1_500_000_000),
        ("0.5GiB", 2**29),
        ("1e3", 1000),
        ("12884901888", 12884901888),
        (2**62, 2**62),
        ("0.3kB", 300),  # exact: 0.3 * 1000 is 299.99999999999994 in float
    ],
)
def test_byte_budgets_are_whole_bytes(profile, text, expected):
    value = parse_budget(text, profile)
    assert value == expected and type(value) is int


@pytest.mark.parametrize("text", ["50%", "33.3%", "12.5%", "0%", "100%", "0.1%", "99.99%"])
def test_a_percentage_is_the_whole_bytes_at_or_below_it(profile, text):
    static = profile.static_bytes
    activation = planopt.keep_all_peak(profile) - static
    want = static + math.floor(Fraction(text[:-1]) / 100 * activation)
    value = parse_budget(text, profile)
    assert value == want and type(value) is int


def test_budget_from_fraction_is_whole_bytes(profile):
    for fraction in (0.0, 0.3, 0.5, 1.0):
        value = budget_from_fraction(profile, fraction)
        static = profile.static_bytes
        activation = planopt.keep_all_peak(profile) - static
        assert type(value) is int
        assert value == static + math.floor(Fraction(fraction) * activation)


@pytest.mark.parametrize(
    "text", ["1.5", 1.5, "1000.9", 1000.9, "2.5B", 1.5e9 + 0.5, "1e-999999999B"]
)
def test_a_byte_count_must_be_whole(profile, text):
    # Issue 25: `--budget 1.5` and `solve(p, 1.5)` were read as 1 byte.
    with pytest.raises(BudgetError, match="must be a whole number") as info:
        parse_budget(text, profile)
    assert repr(text) in str(info.value)
    with pytest.raises(BudgetError, match="must be a whole number"):
        planopt.simulate(profile, Plan.keep_all(profile), text)
    with pytest.raises(BudgetError, match="must be a whole number"):
        planopt.solve(profile, text, "keep-all")


@pytest.mark.parametrize("text", ["150%", "1e3%", "100.0001%", "1e999999999%"])
def test_a_percentage_above_keep_all_is_refused_saying_so(profile, text):
    # Issue 25: `150%` and `1e3%` were taken silently.
    for parse in (lambda t: parse_budget(t, profile), parse_budget_fraction):
        with pytest.raises(BudgetError, match="at most 100%") as info:
            parse(text)
        message = str(info.value)
        assert repr(text) in message and "above keep-all" in message
        assert "100% is keep-all" in message


def test_a_fraction_above_one_is_refused_saying_so(profile):
    with pytest.raises(BudgetError, match="at most 1") as info:
        budget_from_fraction(profile, 1.5)
    assert "above keep-all" in str(info.value)


@pytest.mark.parametrize("text", ["-5%", "-5", "-1GiB", " - 2.5 kB"])
def test_a_negative_budget_says_it_must_be_at_least_zero(profile, text):
    with pytest.raises(BudgetError, match=">= 0") as info:
        parse_budget(text, profile)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("text", [str(2**63), 10**400, "1e400", 2**63, "10000000TiB"])
def test_a_budget_beyond_the_largest_is_refused(profile, text):
    with pytest.raises(BudgetError, match="at most") as info:
        parse_budget(text, profile)
    assert str(MAX_BUDGET_BYTES) in str(info.value)


def test_a_tiny_exponent_is_not_slow(profile):
    # A huge exponent would make exact arithmetic build a huge integer.
    assert parse_budget("1e-999999999GiB", profile) == 0
    with pytest.raises(BudgetError, match="50%"):
        parse_budget("1e-999999999", profile)
    with pytest.raises(BudgetError, match="at most"):
        parse_budget("1e999999999", profile)


def test_solutions_and_schedules_carry_whole_byte_budgets(profile):
    solution = planopt.solve(profile, "50%", "greedy")
    assert type(solution.budget) is int
    assert type(solution.to_dict()["budget"]) is int
    assert type(solution.schedule.budget) is int
    assert type(solution.schedule.to_dict()["budget"]) is int
    infeasible = planopt.solve(profile, "0%", "greedy")
    assert type(infeasible.budget) is int and type(infeasible.to_dict()["budget"]) is int
    schedule = planopt.simulate(profile, Plan.keep_all(profile), 1.5e9)
    assert schedule.budget == 1_500_000_000 and type(schedule.budget) is int
    assert planopt.simulate(profile, Plan.keep_all(profile), "50%").budget == solution.budget


def test_simulate_takes_the_same_grammar(profile):
    plan = Plan.keep_all(profile)
    with pytest.raises(BudgetError, match="50%"):
        planopt.simulate(profile, plan, 0.5)
    assert planopt.simulate(profile, plan, "1GiB").budget == 2**30


@pytest.mark.parametrize(("text", "expected"), [("50%", 0.5), ("12.5%", 0.125), ("0%", 0.0)])
def test_the_fraction_grammar_takes_percentages(text, expected):
    assert parse_budget_fraction(text) == expected


@pytest.mark.parametrize(
    "text", ["0.5", "0.3", 0.5, "12GiB", "12", "-5%", "abc", None, "nan%", "150%", "1e3%"]
)
def test_the_fraction_grammar_refuses_anything_else_with_a_hint(text):
    with pytest.raises(BudgetError) as info:
        parse_budget_fraction(text)
    assert "%" in str(info.value) and repr(text) in str(info.value)
