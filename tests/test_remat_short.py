"""remat-dp's short-chain searches (plain Python) against enumeration and the vectorised ones.

Chains up to `SHORT_LAYERS` take `solvers.remat.short`; longer ones the
numpy searches. Both must give the same exact answers: the tests force
each path on the same chains, and check the short path's pieces (the
feasibility pass, the price bound) against enumeration directly.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from remat_chains import (
    check_against_enumeration,
    check_against_untargeted,
    completions,
    random_v2_chain,
)
from test_remat_dp import SMALL, _budgets, _recompute_only, v2_chains

from planopt.budget import keep_all_peak
from solvers.remat import minpeak, optimum
from solvers.remat.chain import ChainModel
from solvers.remat.short import SHORT_LAYERS, PriceBound, ShortChain, fits


def _force(monkeypatch, short: bool) -> None:
    """Send every chain down one path: the short searches, or the vectorised ones."""
    limit = 10**9 if short else 0
    monkeypatch.setattr(optimum, "SHORT_LAYERS", limit)
    monkeypatch.setattr(minpeak, "SHORT_LAYERS", limit)


@SMALL
@given(v2_chains(max_layers=6))
def test_the_feasibility_pass_is_exact(profile):
    """`fits` finds a plan exactly when one fits (the gradients' floor is the caller's)."""
    scores = _recompute_only(profile)
    model = ChainModel(profile)
    for budget in _budgets(scores):
        room = budget - profile.static_bytes
        kept = fits(ShortChain(model, room), room)
        fitting = any(peak <= budget for _, peak, _ in scores)
        if room >= model.pg_total:
            assert (kept is not None) == fitting, budget
        if kept is not None:
            assert model.peak(list(kept)) - model.static <= max(room, model.pg_total)


@SMALL
@given(v2_chains(max_layers=6))
def test_the_price_bound_is_above_every_completion(profile):
    """At every kept layer of every plan that fits, what the layers above save is at
    most the bound at the bytes held below it, for each price the search tests with."""
    scores = _recompute_only(profile)
    model = ChainModel(profile)
    for budget in _budgets(scores):
        room = budget - profile.static_bytes
        bound = PriceBound(ShortChain(model, room))
        prices = [*bound.prices, *((lam, bound.sweep(lam)[0]) for lam in (0.0, 1e-3, 0.1))]
        for kept, saved, segment, above in completions(model, scores, budget):
            assert saved <= bound.root + 1e-9
            x = segment.kept + 1
            for price, g in prices:
                value = max(price * (room - segment.held) + g[x], bound.free[x])
                assert above <= value + 1e-9, (kept, segment, price)


@pytest.mark.parametrize("short", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_both_searches_are_the_enumerated_optimum(monkeypatch, seed, short):
    _force(monkeypatch, short)
    profile = random_v2_chain(seed, 8, 10)
    scores = _recompute_only(profile)
    peaks = sorted({p for _, p, _ in scores})
    rng = random.Random(seed)
    budgets = [peaks[0] - 1, peaks[0], *rng.sample(peaks, min(6, len(peaks))), peaks[-1]]
    check_against_enumeration(profile, scores, budgets)


@pytest.mark.parametrize("seed", range(4))
def test_the_short_and_the_vectorised_searches_agree(monkeypatch, seed):
    """On chains of 20-60 layers, at budgets from tight to loose, and the minimum budget."""
    profile = random_v2_chain(100 + seed, 20, 60)
    assert len(profile.layers) <= SHORT_LAYERS
    keep_all = keep_all_peak(profile) - profile.static_bytes
    answers = {}
    for short in (True, False):
        _force(monkeypatch, short)
        model = ChainModel(profile)
        low = minpeak.min_peak(model)
        assert low.proven and model.peak(list(low.kept)) == low.peak
        rows = [low.peak]
        for fraction in (0.3, 0.45, 0.6, 0.8):
            room = int(fraction * keep_all)
            result = optimum.solve_room(model, room)
            assert result.proven
            if result.found is None:
                rows.append(None)
                continue
            assert model.peak(list(result.found.kept)) - model.static <= room
            rows.append(round(result.found.saved, 9))
        answers[short] = rows
    assert answers[True] == answers[False]


@pytest.mark.parametrize("seed", range(3))
def test_the_lowered_targets_reach_the_untargeted_optimum(monkeypatch, seed):
    """The vectorised path's schedule of targets (the first one missed, the next three
    times further down, the feasibility pass between) changes its speed, never its
    answer: at every room, from one byte below the space's minimum up, it is the
    optimum of the search without a target, and below the minimum it proves none fits."""
    _force(monkeypatch, short=False)
    missed = check_against_untargeted(random_v2_chain(300 + seed, 40, 64))
    assert missed, "no room sent the search past its first target: the test is not testing"
