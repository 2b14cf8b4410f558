"""The back-end agreement verdict of `experiments/bench_exact.py`."""

from __future__ import annotations

from experiments.bench_exact import _agree


def test_equal_proven_optima_agree():
    found = {"cpsat": ("optimal", 1.0), "highs": ("optimal", 1.0 + 1e-8), "cbc": ("feasible", 1.2)}
    assert _agree(found) == "yes (2 proven)"


def test_different_proven_optima_disagree():
    assert _agree({"cpsat": ("optimal", 1.0), "highs": ("optimal", 1.01)}).startswith("NO")


def test_an_unproven_plan_beating_a_proven_optimum_is_a_disagreement():
    found = {"cpsat": ("feasible", 0.99), "highs": ("optimal", 1.0), "cbc": ("timeout", None)}
    assert _agree(found).startswith("NO")


def test_one_proof_or_none_is_said_as_such():
    one = {"cpsat": ("optimal", 1.0), "highs": ("feasible", 1.1), "cbc": ("timeout", None)}
    assert _agree(one) == "- (1 proven, no plan beats it)"
    assert _agree({"cpsat": ("feasible", 1.0), "highs": ("timeout", None)}) == "- (0 proven)"
