"""remat-dp's memory-grid bound (`solvers.remat.grid`) against enumeration, and the
searches it prunes against the exact answers.

The grid bound is a relaxation only if every edge a true completion takes
stays allowed on the grid: checked here at every kept layer of every plan
that fits, at grids coarse enough for the rounding to matter. The searches
are forced through it (the first search capped at once) and must still
give the enumerated optimum, and on longer chains the untargeted search's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from remat_chains import random_v2_chain
from test_remat_dp import SMALL, _budgets, _recompute_only, v2_chains

import planopt
from planopt import Status
from planopt.budget import keep_all_peak
from planopt.problem import Problem
from solvers.remat import grid, minpeak, optimum
from solvers.remat.certify import certify
from solvers.remat.chain import ChainModel
from solvers.remat.grid import GridBound, grid_steps
from solvers.remat.labels import LabelSearch
from solvers.remat_dp import solve_certified


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
            for _, peak, actions in scores:
                if peak > budget:
                    continue
                kept = tuple(i for i, a in enumerate(actions) if str(a) == "keep")
                saved = math.fsum(float(model.fwd[i]) for i in kept)
                assert saved <= bound.root() + 1e-9, (kept, steps)
                for segment in certify(model, kept, proven=False, upper_saved=0.0).segments:
                    above = math.fsum(float(model.fwd[i]) for i in kept if i > segment.kept)
                    at = bound.at(segment.kept + 1, np.array([segment.held]))[0]
                    assert above <= at + 1e-9, (kept, segment, steps)


@pytest.mark.parametrize("steps", [2, 16, 4096])
@pytest.mark.parametrize("seed", range(3))
def test_searches_pruned_by_the_grid_are_the_enumerated_optimum(monkeypatch, seed, steps):
    _grid_first(monkeypatch, steps)
    profile = random_v2_chain(seed, 8, 10)
    scores = _recompute_only(profile)
    peaks = sorted({p for _, p, _ in scores})
    for budget in [peaks[0] - 1, peaks[0], *peaks[1::4], peaks[-1]]:
        fitting = [m for m, p, _ in scores if p <= budget]
        out, _ = solve_certified(Problem(profile, budget, 0))
        if not fitting:
            assert out.status is Status.INFEASIBLE
        else:
            assert out.status is Status.OPTIMAL
            makespan = planopt.simulate(profile, out.plan, budget).makespan
            assert makespan == pytest.approx(min(fitting), rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_searches_pruned_by_the_grid_reach_the_untargeted_optimum(monkeypatch, seed):
    """Chains of 40-64 layers, rooms from one byte below the space's minimum up."""
    _grid_first(monkeypatch, 512)
    profile = random_v2_chain(400 + seed, 40, 64)
    model = ChainModel(profile)
    low = minpeak.min_peak(model).peak - model.static
    keep_all = keep_all_peak(profile) - profile.static_bytes
    gridded = 0
    for room in [low - 1, low, *(low + (keep_all - low) * k // 6 for k in range(1, 6))]:
        result = optimum.solve_room(model, room)
        assert result.proven, room
        untargeted, _ = LabelSearch(model, room).run(-math.inf, tol=0.0)
        if untargeted is None:
            assert result.found is None and room < low
            continue
        assert result.found is not None
        assert result.found.saved == pytest.approx(untargeted.saved, rel=1e-12, abs=1e-15)
        gridded += result.searches >= 2
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
