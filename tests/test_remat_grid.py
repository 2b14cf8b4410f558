"""remat-dp's memory-grid bound (`solvers.remat.grid`) against enumeration, and the
searches it prunes against the exact answers.

The grid bound is a relaxation only if every edge a true completion takes
stays allowed on the grid: checked here at every kept layer of every plan
that fits, at grids coarse enough for the rounding to matter. The searches
are forced through it (the first search capped at once) and must still
give the enumerated optimum, and on longer chains the untargeted search's.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from remat_chains import (
    check_against_enumeration,
    check_against_untargeted,
    completions,
    random_v2_chain,
)
from test_remat_dp import SMALL, _budgets, _recompute_only, v2_chains

import planopt
from planopt import Status
from planopt.budget import keep_all_peak
from planopt.bundled import bundled_profile
from planopt.testing.load import busy_cores
from solvers.remat import grid, minpeak, optimum
from solvers.remat.chain import ChainModel
from solvers.remat.grid import GridBound, grid_steps


def _grid_first(monkeypatch, steps: int) -> None:
    """Every long-chain search: the first one capped at once, then the grid of `steps`."""
    monkeypatch.setattr(optimum, "SHORT_LAYERS", 0)
    monkeypatch.setattr(minpeak, "SHORT_LAYERS", 0)
    monkeypatch.setattr(grid, "STEPS", steps)
    monkeypatch.setattr(grid, "MIN_STEPS", 1)
    monkeypatch.setattr(optimum, "grid_cost", lambda model, tmax, steps: 0.0)


@SMALL
@given(v2_chains(max_layers=6))
def test_the_grid_bound_is_above_every_completion(profile):
    """At every kept layer of every plan that fits, what the layers above save is at
    most the grid's bound at the bytes held below it, on grids of 1 to 64 steps."""
    scores = _recompute_only(profile)
    model = ChainModel(profile)
    for budget in _budgets(scores):
        room = budget - profile.static_bytes
        if room < 0:
            continue
        tmax = model.last_feasible_top(room)
        for steps in (1, 3, 64):
            bound = GridBound(model, room, tmax, steps)
            for kept, saved, segment, above in completions(model, scores, budget):
                assert saved <= bound.root() + 1e-9, (kept, steps)
                at = bound.at(segment.kept + 1, np.array([segment.held]))[0]
                assert above <= at + 1e-9, (kept, segment, steps)


@pytest.mark.parametrize("steps", [2, 16, 4096])
@pytest.mark.parametrize("seed", range(3))
def test_searches_pruned_by_the_grid_are_the_enumerated_optimum(monkeypatch, seed, steps):
    _grid_first(monkeypatch, steps)
    profile = random_v2_chain(seed, 8, 10)
    scores = _recompute_only(profile)
    peaks = sorted({p for _, p, _ in scores})
    check_against_enumeration(profile, scores, [peaks[0] - 1, peaks[0], *peaks[1::4], peaks[-1]])


@pytest.mark.parametrize("seed", range(3))
def test_searches_pruned_by_the_grid_reach_the_untargeted_optimum(monkeypatch, seed):
    """Chains of 40-64 layers, rooms from one byte below the space's minimum up."""
    _grid_first(monkeypatch, 512)
    gridded = check_against_untargeted(random_v2_chain(400 + seed, 40, 64))
    assert gridded, "no search went through the grid: the test is not testing"


def test_the_grid_shrinks_with_the_chain_and_is_not_built_too_coarse(monkeypatch):
    """Its steps are capped by the cells (far edges x steps) and by the table's size; a
    grid coarser than `MIN_STEPS` is not built (0)."""
    profile = random_v2_chain(7, 60, 64)
    model = ChainModel(profile)
    room = (keep_all_peak(profile) - profile.static_bytes) // 2
    tmax = model.last_feasible_top(room)
    edges = grid.far_edges(model, tmax) + model.n + 1
    assert edges > model.n + 1  # some far edges
    assert grid_steps(model, tmax) == grid.STEPS
    monkeypatch.setattr(grid, "MAX_CELLS", edges * 300)
    assert grid_steps(model, tmax) == 300
    monkeypatch.setattr(grid, "MAX_TABLE", (model.n + 1) * 280)
    assert grid_steps(model, tmax) == 279
    monkeypatch.setattr(grid, "MAX_CELLS", edges * (grid.MIN_STEPS - 1))
    assert grid_steps(model, tmax) == 0


def test_a_work_limited_solve_through_the_grid_is_the_same_under_load():
    """The first search's cap is counted in work units, not seconds: on gpt-12 at 50%
    (its first search is capped, then the grid prunes the second) the answer and the work
    counted are the same on a quiet machine and with both cores busy."""
    profile = bundled_profile("gpt-12blk-b8-s1024-h100-pcie5-roofline")
    quiet = planopt.solve(profile, "50%", "remat-dp", work_limit=4.0)
    with busy_cores():
        loaded = planopt.solve(profile, "50%", "remat-dp", work_limit=4.0)
    assert quiet.status is Status.OPTIMAL
    assert "2 search(es)" in quiet.message  # the capped first one, then the grid's
    assert loaded.status == quiet.status and loaded.plan == quiet.plan
    assert loaded.work_used == quiet.work_used
