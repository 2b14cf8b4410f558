"""One rule for every output path (`planopt.paths.check_output_path`).

The parent folder must exist (nothing is created above the path), the target
must not be a folder, and a location that cannot be written is refused with
an `OutputPathError` naming the path; `save_plan`/`save_profile` follow it,
and a write that fails half way (a full device) is the same error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import planopt
from planopt import OutputPathError, Plan, PlanoptError
from planopt.paths import check_output_path, write_text

NAME = "alexnet-b128-caffe-titanx"


@pytest.fixture(scope="module")
def profile():
    return planopt.bundled_profile(NAME)


def test_a_file_in_an_existing_folder_is_fine(tmp_path):
    assert check_output_path(tmp_path / "a.json", "--output") == tmp_path / "a.json"
    assert check_output_path(str(tmp_path / "a.json"), "--output") == tmp_path / "a.json"
    (tmp_path / "a.json").write_text("old")
    assert check_output_path(tmp_path / "a.json", "--output") == tmp_path / "a.json"


def test_a_missing_parent_folder_is_refused_and_not_created(tmp_path):
    target = tmp_path / "nope" / "deeper" / "x.png"
    with pytest.raises(OutputPathError) as info:
        check_output_path(target, "--plot")
    message = str(info.value)
    assert "--plot" in message and "must exist" in message and str(target.parent) in message
    assert not (tmp_path / "nope").exists()


def test_a_folder_as_the_target_is_refused(tmp_path):
    with pytest.raises(OutputPathError, match="folder") as info:
        check_output_path(tmp_path, "--output")
    assert str(tmp_path) in str(info.value)


def test_a_folder_target_is_what_folder_mode_wants(tmp_path):
    assert check_output_path(tmp_path / "new", "--out", folder=True) == tmp_path / "new"
    assert check_output_path(tmp_path, "--out", folder=True) == tmp_path
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputPathError, match="must be a folder"):
        check_output_path(tmp_path / "f", "--out", folder=True)


def test_a_parent_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputPathError, match="folder"):
        check_output_path(tmp_path / "file" / "x.json", "--output")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(OutputPathError, match="cannot be written"):
            check_output_path(locked / "x.json", "--output")
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("bad", [None, 3, "", b"x.json", "a\0b.json"])
def test_a_path_of_the_wrong_kind_is_refused(bad):
    with pytest.raises(OutputPathError):
        check_output_path(bad, "--output")


def test_a_write_that_fails_is_an_output_path_error(tmp_path):
    if Path("/dev/full").exists():
        with pytest.raises(OutputPathError, match="No space left"):
            write_text("/dev/full", "x" * 100_000, "plan file")
    with pytest.raises(OutputPathError, match="cannot be written"):
        write_text("/proc/planopt-test.json", "x", "plan file")


def test_save_plan_and_save_profile_follow_the_rule(tmp_path, profile):
    plan = Plan.keep_all(profile)
    for save, obj in ((planopt.save_plan, plan), (planopt.save_profile, profile)):
        with pytest.raises(OutputPathError, match="must exist"):
            save(obj, tmp_path / "missing" / "x.json")
        assert not (tmp_path / "missing").exists()
        with pytest.raises(OutputPathError, match="folder"):
            save(obj, tmp_path)
        save(obj, tmp_path / "ok.json")
        assert (tmp_path / "ok.json").read_text().startswith("{")


def test_saving_the_wrong_object_is_refused(tmp_path, profile):
    plan = Plan.keep_all(profile)
    with pytest.raises(PlanoptError, match=r"planopt\.Plan"):
        planopt.save_plan(profile, tmp_path / "x.json")
    with pytest.raises(PlanoptError, match=r"planopt\.Profile"):
        planopt.save_profile(plan, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
