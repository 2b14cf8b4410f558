"""Packaging: planopt imports without torch, `solvers` is ours, the wheel is complete.

The wheel test builds from a copy of the sources and runs the installed copy
from a folder outside the repository, so a missing package-data entry (the
bundled profiles) or module cannot hide behind the editable install.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import planopt
import solvers
from planopt import cli

REPO = Path(__file__).resolve().parent.parent


def _python(code: str, *, cwd: Path | None = None, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env=env,
    )


def test_import_and_solve_without_torch():
    # sys.modules['torch'] = None makes any `import torch` raise ImportError.
    code = """
import sys
sys.modules["torch"] = None
import planopt, solvers, planopt.cli
profile = planopt.bundled_profile(planopt.bundled_profile_names()[0])
solution = planopt.solve(profile, "100%", "keep-all")
assert solution.status.value == "optimal", solution
assert planopt.cli.main(["show", profile.name]) == 0
assert sys.modules["torch"] is None
print("ok")
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("ok")


def test_solvers_package_is_ours():
    assert solvers.PLANOPT_SOLVERS is True
    # Both top-level packages come from the same place: this repository
    # (editable install) or the same site-packages folder (wheel install).
    here = Path(solvers.__file__).resolve().parent.parent
    assert here == Path(planopt.__file__).resolve().parent.parent


def test_console_script_points_at_cli_main():
    scripts = importlib.metadata.entry_points(group="console_scripts", name="planopt")
    assert len(scripts) == 1
    (script,) = scripts
    assert script.value == "planopt.cli:main"
    assert script.load() is cli.main


def _pip(*args: str) -> subprocess.CompletedProcess:
    """pip offline (`--no-index`): the test must not depend on a registry."""
    return subprocess.run(
        [sys.executable, "-m", "pip", *args, "--no-index", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _setuptools_version() -> tuple[int, ...]:
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return (0,)
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


@pytest.mark.skipif(
    _setuptools_version() < (77,),
    reason="building offline needs setuptools>=77 in this environment (.ci/run installs it)",
)
def test_wheel_ships_everything_and_runs_outside_the_repo(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("planopt", "solvers"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    wheels = tmp_path / "wheels"
    build = _pip("wheel", str(src), "--no-deps", "--no-build-isolation", "-w", str(wheels))
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("planopt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in planopt.bundled_profile_names():
        assert f"planopt/data/profiles/{name}.json" in names
    for module in ("planopt/__main__.py", "planopt/cli/main.py", "solvers/__init__.py"):
        assert module in names

    target = tmp_path / "site"
    install = _pip("install", "--no-deps", "--target", str(target), str(wheel))
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = """
import planopt, solvers
from planopt.cli import main
print(planopt.__file__)
print(solvers.__file__)
print(",".join(planopt.bundled_profile_names()))
raise SystemExit(main(["solve", planopt.bundled_profile_names()[0], "--budget", "100%",
                       "--method", "keep-all"]))
"""
    proc = _python(code, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    planopt_file, solvers_file, bundled = proc.stdout.splitlines()[:3]
    assert planopt_file.startswith(str(target)) and solvers_file.startswith(str(target))
    assert bundled.split(",") == planopt.bundled_profile_names()


def _readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_readme_quickstart_is_two_commands_and_ci_runs_the_tests():
    commands = re.findall(r"```sh\n(.*?)```", _readme_section("Quickstart"), re.S)
    assert len(commands) == 2
    assert all(len(block.strip().splitlines()) == 1 for block in commands)
    install_and_demo, tests = (block.strip() for block in commands)
    assert "pip install ." in install_and_demo and install_and_demo.endswith("planopt demo")
    assert tests == "bash .ci/run"
    script = (REPO / ".ci" / "run").read_text()
    assert "set -euo pipefail" in script and "pytest" in script and "torch==" in script


def test_readme_python_example_runs(tmp_path, monkeypatch):
    (code,) = re.findall(r"```python\n(.*?)```", _readme_section("Python usage"), re.S)
    monkeypatch.chdir(tmp_path)  # it writes a plan file
    exec(compile(code, "README.md", "exec"), {})
    (written,) = tmp_path.glob("*.plan.json")
    plan = planopt.load_plan(written)
    assert plan.profile is not None  # the saved plan carries its profile's fingerprint


@pytest.mark.parametrize(
    "title", ["Work limits and determinism", "Known answers: run the bank against your own method"]
)
def test_readme_examples_run(title):
    (code,) = re.findall(r"```python\n(.*?)```", _readme_section(title), re.S)
    exec(compile(code, "README.md", "exec"), {})
