"""Random bytes, random JSON and random argument text into every command: the user sees
an exit code and at most one line, never a traceback (issue 16).

The documents come from the loaders' fuzzer (`tests/test_loaders_fuzz.py`:
valid profiles and plans with random changes, so many still load and reach
the command's later steps). Commands run in this process through
`planopt.cli.main`, so an exception escaping `main` fails the test with
its traceback. Exit 2 must come with exactly one `planopt: error:` line;
a document that happens to be valid may also give 0 or 1. `FUZZ_EXAMPLES`
scales the examples (the default keeps the file near half a minute).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planopt
from planopt import cli
from planopt.io import save_plan
from tests.test_loaders_fuzz import plan_docs, profile_docs

EXAMPLES = max(1, int(os.environ.get("FUZZ_EXAMPLES", "300")) // 10)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
NET = "alexnet-b128-caffe-titanx"
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "0", "-1", "0.5", "1e400", "nan", "inf", "50%", "1e-30", "=", "a=b"]),
)


def call(*argv: str) -> tuple[int, str]:
    """`planopt ARGV` in this process: the exit code and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, err.getvalue()


def check(code: int, err: str, *, bad: bool = False) -> None:
    """Exit 2 with one `planopt: error:` line (always, when `bad`), or a valid outcome."""
    assert "Traceback" not in err
    if bad or code == 2:
        assert code == 2, err
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("planopt: error: "), err
    else:
        assert code in (0, 1), err


def _write(folder: Path, doc: object) -> str:
    path = folder / "doc.json"
    try:
        text = json.dumps(doc)
    except ValueError:  # a float JSON cannot hold: Python's repr instead
        text = repr(doc)
    path.write_text(text)
    return str(path)


def _plan_file(folder: Path) -> str:
    path = folder / "good-plan.json"
    save_plan(planopt.solve(NET, "50%").plan, path)
    return str(path)


def _commands_on_profile(path: str, plan: str, out: Path) -> list[list[str]]:
    return [
        ["show", path],
        ["simulate", path, plan, "--json"],
        ["solve", path, "--budget", "50%", "--work-limit", "0.01", "--json"],
        ["run-check", path, plan, "--model", "no_such_module:factory"],
        ["experiment", "sweep", path, "--budgets", "50%", "--methods", "keep-all",
         "--no-bound", "--draws", "0", "--no-cache", "--no-plots", "--quiet", "--workers", "1",
         "--out", str(out)],
    ]  # fmt: skip


def _commands_on_plan(path: str) -> list[list[str]]:
    return [
        ["show", NET, path],
        ["simulate", NET, path, "--budget", "50%"],
        ["run-check", NET, path, "--model", "no_such_module:factory"],
        ["solve", NET, "--budget", "50%", "--method", "exact", "--work-limit", "0.01",
         "--option", f"warm_start={path}"],
    ]  # fmt: skip


@FUZZ
@given(st.binary(max_size=64))
def test_random_bytes_into_every_command(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "bytes.json"
    path.write_bytes(data)
    plan = _plan_file(folder)
    for argv in [
        *_commands_on_profile(str(path), plan, folder / "o"),
        *_commands_on_plan(str(path)),
    ]:
        check(*call(*argv), bad=True)


@FUZZ
@given(profile_docs())
def test_random_profile_documents_into_every_command(tmp_path_factory, doc):
    folder = tmp_path_factory.mktemp("fuzz")
    path = _write(folder, doc)
    for argv in _commands_on_profile(path, _plan_file(folder), folder / "o"):
        check(*call(*argv))


@FUZZ
@given(plan_docs())
def test_random_plan_documents_into_every_command(tmp_path_factory, doc):
    path = _write(tmp_path_factory.mktemp("fuzz"), doc)
    for argv in _commands_on_plan(path):
        check(*call(*argv))


@FUZZ
@given(TEXT)
def test_random_argument_text_into_every_option(tmp_path_factory, text):
    out = tmp_path_factory.mktemp("fuzz")
    solve = ["solve", NET, "--budget", "50%", "--method", "lns", "--work-limit", "0.01"]
    commands = [
        ["solve", NET, "--budget", text, "--work-limit", "0.01"],
        ["solve", NET, "--budget", "50%", "--method", text],
        [*solve, "--time-limit", text],
        [*solve[:-1], text],
        [*solve, "--seed", text],
        [*solve, "--option", text],
        [*solve, "--option", f"window={text}"],
        [*solve, "--output", str(out / (text.replace("/", "_") or "x"))],
        ["show", NET, "--budget", text],
        ["show", text or "x"],
        ["simulate", NET, text or "x"],
        ["experiment", "sweep", NET, "--budgets", text, "--methods", "keep-all", "--no-bound",
         "--draws", "0", "--no-cache", "--no-plots", "--quiet", "--workers", "1",
         "--out", str(out / "o")],
        ["experiment", "sweep", NET, "--noise", text, "--methods", "keep-all", "--no-bound",
         "--draws", "0", "--no-cache", "--no-plots", "--quiet", "--workers", "1",
         "--out", str(out / "p")],
        ["profile-model", text or "x", "-o", str(out / "p.json")],
    ]  # fmt: skip
    for argv in commands:
        code, err = call(*argv)
        check(code, err)
