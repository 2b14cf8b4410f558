"""The v3.1 probe (`experiments.selective_v31`) on the cached GPT-2 profile and its cached
fronts (no torch): the menus nest, the charged profile only adds forward scratch, the
verdict follows target (a)'s rule, and the report describes the block, not the embedding."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from experiments.selective import CACHE, run, whole
from experiments.selective_report import _front_words
from experiments.selective_v31 import (
    FRONTS,
    _meets,
    block_class,
    relative_price,
    why_lines,
    why_words,
    widened,
)
from planopt import budget_from_fraction, load_profile

NAME = "gpt2-b8-s1024-h100-pcie5-traced"


@pytest.fixture(scope="module")
def current():
    return load_profile(CACHE / f"{NAME}.json")


@pytest.fixture(scope="module")
def classes():
    return json.loads((FRONTS / f"{NAME}.json").read_text())


def _points(profile):
    return [{(o.saved_bytes, o.recompute) for o in x.options} for x in profile.layers]


def test_menus_nest_and_charging_adds_only_the_largest_extra(current, classes):
    v3 = widened(current, classes, "v3")
    full = widened(current, classes, "full")
    charged = widened(current, classes, "full", charge=True)
    for a, b, c in zip(_points(current), _points(v3), _points(full), strict=True):
        assert a <= b <= c
    assert _points(full) == _points(charged)
    head = current.layers[-1]  # GPT-2's head: policies beyond its forward, by 12-24 MiB
    extras = [p[3] for p in classes[head.name]["full"] if p[0] < head.saved_bytes]
    raised = charged.layers[-1].fwd_work_bytes - head.fwd_work_bytes
    assert raised == max(extras) > 0
    assert all(
        x.fwd_work_bytes == y.fwd_work_bytes
        for x, y in zip(current.layers[1:-1], charged.layers[1:-1], strict=True)
    )  # GPT2Block's whole front fits its plain forward: nothing to charge


def test_remat_dp_over_nested_menus_never_worsens(current, classes):
    budget = budget_from_fraction(whole(current), 0.7)
    seen = [
        run(p, budget, "remat-dp", 5.0)
        for p in (whole(current), current, widened(current, classes, "full"))
    ]
    assert all(r.status == "optimal" for r in seen)
    assert seen[2].overhead <= seen[1].overhead <= seen[0].overhead


def test_price_by_hand():
    layer = SimpleNamespace(fwd=1.0, saved_bytes=100, out_bytes=0)
    # replay 0.9 s to free 100 bytes, or 0.2 s to free 50: 0.004 s a byte against 0.01
    assert relative_price(layer, [(0, 0.9), (50, 0.2), (100, 0.0)]) == pytest.approx(0.4)
    assert relative_price(layer, [(100, 0.0)]) is None


def test_the_report_describes_the_block_not_the_embedding(current):
    assert current.layers[block_class(current)].name == "block0"
    words = _front_words("gpt2-b8-s1024")
    assert words.startswith("block0's 8 entries") and "price" in words


def test_verdict_follows_target_a(tmp_path):
    assert _meets([0.05, "optimal"], [0.1, "optimal"])
    assert not _meets([0.051, "optimal"], [0.1, "optimal"])
    assert _meets([0.2, "optimal"], [None, "infeasible"])
    assert not _meets([None, "infeasible"], [None, "infeasible"])
    cells = {
        "whole": [0.1, "optimal"],
        "current": [0.09, "optimal"],
        "v3 x32": [0.09, "optimal"],
        "v3.1 optimistic": [0.04, "optimal"],
        "v3.1 charged": [0.06, "optimal"],
    }
    row = {
        "model": "m-b1",
        "fraction": 0.7,
        "method": "remat-dp",
        "cells": cells,
        "front": {"embed": 2, "block0": 10},
        "beyond_forward": {"embed": 1, "block0": 3},
        "extra_bytes": [2**20, 2**21],
        "price": 0.5,
    }
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([row]))
    assert "could meet (a) in 1 more cells" in why_words(path)
    assert "3 of 10 points from m's block front" in why_words(path)
    assert "| m-b1 | 70% | remat-dp | 10.00% | 9.00% | 9.00% | 4.00% | 6.00% | 5.00% | yes |" in (
        why_lines(path)
    )
    cells["v3.1 optimistic"] = [0.06, "optimal"]
    path.write_text(json.dumps([row]))
    assert "cannot meet (a)" in why_words(path)


def test_why_only_rewrites_the_paragraph_as_render_writes_it(tmp_path):
    from experiments.selective import why_only
    from experiments.selective_report import render

    text = render([], {}, "", 5.0, 0.0)
    assert "| model | budget | method | whole | current |" in text  # the v3.1 table is in
    start = text.index("**Why (a)")
    end = text.index("## Models and minimum budgets")
    path = tmp_path / "selective.md"
    path.write_text(text[:start] + "**Why (a) stale.**\n\nold table\n\n" + text[end:])
    assert why_only(path) == 0
    assert path.read_text() == text
