"""The menus-on fidelity benchmark runs end to end on a small model and says what it measured."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from experiments.bench_fidelity_menus import main  # noqa: E402


def test_the_menus_bench_measures_plans_that_name_options(tmp_path):
    out = tmp_path / "fm.md"
    assert (
        main(["--models", "resnet", "--regimes", "kept", "--random", "3", "--output", str(out)])
        == 0
    )
    rows = json.loads(out.with_suffix(".json").read_text())
    assert any(r["options"] > 0 for r in rows) and any(r["kind"] == "random" for r in rows)
    for r in rows:  # the tracker against the simulator, target (e)
        assert -0.005 <= r["predicted"] / r["measured"] - 1 <= 0.02, r
    assert "| resnet (tiny) |" in out.read_text()
