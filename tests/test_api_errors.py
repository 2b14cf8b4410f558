"""Every public function answers bad arguments with a `PlanoptError`, never a raw exception.

The issue "A user's first hour" found raw `AttributeError`, `TypeError`,
`IsADirectoryError`... from the API. Each of its cases is here by name; then
every callable of `planopt.__all__` is called with wrong-typed arguments, one
argument at a time, and only a `PlanoptError` may come out (the table below
must name every public callable, so a new one cannot skip the check).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import planopt
from planopt import (
    FormatError,
    InvalidPlanError,
    InvalidProfileError,
    OutputPathError,
    Plan,
    PlanoptError,
    ProfileMismatchError,
    SolverOptionError,
    Status,
)
from planopt.bundled import resolve_profile

NAME = "alexnet-b128-caffe-titanx"


@pytest.fixture(scope="module")
def profile():
    return planopt.bundled_profile(NAME)


@pytest.fixture(scope="module")
def plan(profile):
    return Plan.keep_all(profile)


def _message(info) -> str:
    assert isinstance(info.value, PlanoptError)
    return str(info.value)


# -- the cases, by name -------------------------------------------------------


def test_a_non_utf8_file_is_a_format_error_naming_the_file(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(b"\xff\xfe")
    for load in (planopt.load_profile, planopt.load_plan):
        with pytest.raises(FormatError) as info:
            load(path)
        assert str(path) in _message(info) and "UTF-8" in _message(info)


def test_saving_to_a_folder_a_missing_folder_or_a_full_device_is_an_output_path_error(
    tmp_path, profile, plan
):
    with pytest.raises(OutputPathError, match="folder") as info:
        planopt.save_plan(plan, tmp_path)
    assert str(tmp_path) in _message(info)
    with pytest.raises(OutputPathError, match="must exist") as info:
        planopt.save_plan(plan, "/missing/p.json")
    assert "/missing" in _message(info)
    if Path("/dev/full").exists():
        with pytest.raises(OutputPathError, match="cannot be written") as info:
            planopt.save_profile(profile, "/dev/full")
        assert "/dev/full" in _message(info)


def test_a_warm_start_of_the_wrong_type_is_an_option_error(profile):
    with pytest.raises(SolverOptionError) as info:
        planopt.solve(profile, "50%", method="exact", warm_start="x")
    message = _message(info)
    assert "warm_start" in message and "'x'" in message and "Plan" in message


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"threads": "2"}, ["threads", "'2'"]),
        ({"max_layers": 2.5}, ["max_layers", "2.5"]),
        ({"with_swap_wait": 1}, ["with_swap_wait", "1"]),
        ({"backend": 3}, ["backend", "3"]),
    ],
)
def test_every_option_of_the_wrong_type_is_an_option_error(profile, options, words):
    with pytest.raises(SolverOptionError) as info:
        planopt.solve(profile, "50%", method="exact", **options)
    for word in words:
        assert word in _message(info)


def test_simulating_no_plan_is_an_invalid_plan_error(profile):
    with pytest.raises(InvalidPlanError, match=r"plan must be a planopt\.Plan") as info:
        planopt.simulate(profile, None)
    assert "None" in _message(info)


def test_a_bundled_name_or_a_path_works_wherever_a_profile_is_taken(profile, tmp_path):
    path = tmp_path / "p.json"
    planopt.save_profile(profile, path)
    for given in (NAME, str(path), path):
        assert resolve_profile(given) == profile
        assert planopt.min_budget(given) == planopt.min_budget(profile)
        assert planopt.keep_all_peak(given) == planopt.keep_all_peak(profile)
        assert planopt.parse_budget("50%", given) == planopt.parse_budget("50%", profile)
        assert planopt.budget_from_fraction(given, 0.5) == planopt.parse_budget("50%", profile)
        assert planopt.min_budget_info(given) == planopt.min_budget_info(profile)
        assert planopt.min_memory_plan(given) == planopt.min_memory_plan(profile)
        assert planopt.find_blocks(given) == planopt.find_blocks(profile)
        assert planopt.Scorer(given).score_plan(Plan.keep_all(profile)) == planopt.Scorer(
            profile
        ).score_plan(Plan.keep_all(profile))
        plan = Plan.keep_all(given)
        assert planopt.simulate(given, plan).makespan == profile.t_ideal
    solution = planopt.solve(NAME, "50%", work_limit=1)
    assert solution.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert solution.plan.profile == profile.fingerprint
    assert planopt.lower_bound(NAME, "50%", relax=True) >= profile.t_ideal


@pytest.mark.parametrize(
    ("given", "error", "words"),
    [
        ("no-such-net", FormatError, ["bundled profile", "vgg16-b128-pipedream", "'no-such-net'"]),
        ("missing/p.json", FormatError, ["'missing/p.json'", "cannot be read"]),
        (None, InvalidProfileError, ["profile must be", "None"]),
        (3, InvalidProfileError, ["profile must be", "3"]),
    ],
)
def test_a_profile_that_cannot_be_resolved_says_why(given, error, words):
    for call in (resolve_profile, planopt.min_budget, lambda p: planopt.solve(p, "50%")):
        with pytest.raises(error) as info:
            call(given)
        for word in words:
            assert word in _message(info), _message(info)


def test_loading_none_is_a_format_error():
    for load in (planopt.load_profile, planopt.load_plan):
        with pytest.raises(FormatError, match="None"):
            load(None)


def test_a_plan_for_another_profile_of_another_length_says_so(profile):
    other = planopt.random_chain(len(profile.layers) + 3, seed=1)
    plan = Plan.keep_all(other)
    with pytest.raises(ProfileMismatchError, match="was made for profile") as info:
        plan.check(profile)
    assert other.fingerprint in _message(info)
    with pytest.raises(ProfileMismatchError):
        planopt.simulate(profile, plan)
    # Without a fingerprint the length is what can be checked.
    bare = Plan(plan.actions, plan.prefetch_at, plan.swap_wait)
    with pytest.raises(InvalidPlanError, match="one entry per profile layer"):
        bare.check(profile)


# -- option hints name what the user can do from the API and the CLI --------------------


def test_the_exact_size_error_says_how_to_allow_a_longer_net():
    profile = planopt.random_chain(8, seed=0)
    with pytest.raises(SolverOptionError) as info:
        planopt.solve(profile, "70%", method="exact", max_layers=4)
    message = _message(info)
    assert "max_layers=8" in message and "planopt.solve" in message
    # Actionable from both doors: the API's keyword and the CLI's --option, or another method.
    assert "--option max_layers=8" in message and "--method" in message


def test_the_brute_force_size_error_says_how_to_allow_a_longer_net():
    profile = planopt.random_chain(8, seed=0)
    with pytest.raises(SolverOptionError) as info:
        planopt.solve(profile, "70%", method="brute-force")
    message = _message(info)
    assert "max_layers=8" in message and "planopt.solve" in message and "--method" in message
    assert "--option max_layers=8" in message


# -- every public callable, wrong-typed arguments ----------------------------------------


class _Thing:
    """An object of no expected type."""


WRONG = [None, 3, -1, 2.5, math.nan, math.inf, "", "x", b"x", [], {}, (1,), True, _Thing()]


def _public_calls(profile, plan, tmp_path):
    """name -> (positional arguments, keyword arguments) of a good call."""
    layer = profile.layers[0]
    return {
        "Action": (["keep"], {}),
        "Device": (["d", 1e9, 1e9, 0.0], {}),
        "Layer": (["a", 1.0, 1.0, 10], {}),
        "LayerOption": (["o", 0, 0.0], {}),
        "Plan": ([plan.actions, plan.prefetch_at, plan.swap_wait], {}),
        "Profile": (["p", profile.device, 0, profile.layers], {}),
        "Scorer": ([profile], {}),
        "budget_from_fraction": ([profile, 0.5], {}),
        "bundled_profile": ([NAME], {}),
        "bundled_profile_names": ([], {}),
        "find_blocks": ([profile], {"rtol": 0.05, "min_layers": 2}),
        "keep_all_peak": ([profile], {}),
        "load_plan": ([tmp_path / "plan.json"], {}),
        "load_profile": ([tmp_path / "profile.json"], {}),
        "lower_bound": ([profile, "50%"], {"time_limit": 5.0, "relax": True}),
        "min_budget": ([profile], {}),
        "min_budget_info": ([profile], {}),
        "min_memory_plan": ([profile], {}),
        "parse_budget": (["50%", profile], {}),
        "random_chain": ([4], {"seed": 1, "family": "cnn", "device": profile.device}),
        "repeated_chain": ([[layer], 2], {"prefix": [layer], "suffix": [layer]}),
        "save_plan": ([plan, tmp_path / "out.plan.json"], {}),
        "save_profile": ([profile, tmp_path / "out.profile.json"], {}),
        "simulate": ([profile, plan], {"budget": "50%"}),
        "solve": (
            [profile, "50%", "greedy"],
            {"time_limit": 5.0, "work_limit": 1.0, "seed": 0},
        ),
    }


# Plain records and enumerations of results: built by planopt, never from user input.
RECORDS = {
    "BlockStructure",
    "Operation",
    "Repeat",
    "Schedule",
    "Solution",
    "Status",
}


def test_the_table_names_every_public_callable(profile, plan, tmp_path):
    calls = _public_calls(profile, plan, tmp_path)
    public = {
        name
        for name in planopt.__all__
        if callable(getattr(planopt, name))
        and not (
            isinstance(getattr(planopt, name), type)
            and issubclass(getattr(planopt, name), BaseException)
        )
    }
    assert public - RECORDS == set(calls)


def test_every_public_callable_answers_wrong_types_with_a_planopt_error(
    profile, plan, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # a wrong "path" such as "x" lands here
    planopt.save_plan(plan, tmp_path / "plan.json")
    planopt.save_profile(profile, tmp_path / "profile.json")
    calls = _public_calls(profile, plan, tmp_path)
    wrong_by_kind = [*WRONG, profile, plan, profile.device]
    raw = []
    calls_made = 0
    for name, (args, kwargs) in calls.items():
        fn = getattr(planopt, name)
        fn(*args, **kwargs)  # the good call works
        slots = [(i, None) for i in range(len(args))] + [(None, k) for k in kwargs]
        for index, key in slots:
            for bad in wrong_by_kind:
                a, kw = list(args), dict(kwargs)
                if key is None:
                    if a[index] is bad:
                        continue
                    a[index] = bad
                else:
                    if kw[key] is bad:
                        continue
                    kw[key] = bad
                calls_made += 1
                try:
                    fn(*a, **kw)
                except PlanoptError:
                    pass
                except Exception as exc:  # what the test looks for
                    where = index if key is None else key
                    raw.append(f"{name}[{where}]={bad!r:.40}: {type(exc).__name__}: {exc!s:.200}")
    assert not raw, "\n".join(raw)
    assert calls_made > 20 * len(calls)
