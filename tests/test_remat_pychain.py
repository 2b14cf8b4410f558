"""remat-dp's plain-Python model and its proven bounds, against `ChainModel` and enumeration.

Short chains never build the numpy `ChainModel`: `PyChain` must give the
same numbers (every cost, and rows cut only where no later top can fit);
`short.reach` must find a plan exactly when one fits, and when none does
its `next` must never exceed the space's true minimum (enumerated); the
minimum it leads to must be the enumerated one.
"""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st
from remat_chains import random_v2_chain
from test_remat_dp import SMALL, _budgets, _recompute_only, v2_chains

from solvers.remat.chain import ChainModel
from solvers.remat.minpeak import min_peak
from solvers.remat.pychain import PyChain
from solvers.remat.reach import min_peak_short, reach


def _same_numbers(profile, limits) -> None:
    model, chain = ChainModel(profile), PyChain(profile)
    n = model.n
    assert chain.near == model.near_cost.tolist()
    assert chain.base == model.base.tolist()
    assert chain.r_node == model.r_node.tolist()
    assert chain.pg_total == model.pg_total
    table = model.cost_table.tolist()
    for x in range(n + 1):
        for limit in limits:
            row = chain.row(x, limit)
            assert row == table[x][x : x + len(row)]
            # every top past the row is out of reach at this limit
            assert all(c > limit for c in table[x][x + len(row) : n])
        assert chain.row(x, math.inf) == table[x][x:n]
        assert chain.last(x) == int(model.last_cost[x])
    kept = tuple(range(0, n, 2))
    assert chain.peak(kept) == model.peak(list(kept))


@SMALL
@given(v2_chains(max_layers=8), st.lists(st.integers(-5, 400), min_size=1, max_size=4))
def test_the_plain_model_has_the_numpy_models_numbers(profile, limits):
    _same_numbers(profile, sorted(limits))  # rows only grow: limits in any order
    _same_numbers(profile, sorted(limits, reverse=True))


def test_the_plain_model_agrees_on_longer_random_chains():
    rng = random.Random(7)
    for seed in range(40):
        _same_numbers(random_v2_chain(seed, 1, 40), [rng.randint(0, 300) for _ in range(3)])


@SMALL
@given(v2_chains(max_layers=6))
def test_reach_is_exact_and_its_next_is_a_lower_bound_on_the_minimum(profile):
    """A plan exactly when one fits; otherwise `next` is above the room and at most
    the smallest enumerated peak (so 'infeasible' is never said where a plan fits)."""
    scores = _recompute_only(profile)
    smallest = min(peak for _, peak, _ in scores) - profile.static_bytes
    chain = PyChain(profile)
    for budget in _budgets(scores):
        room = budget - profile.static_bytes
        if room < chain.pg_total:
            continue  # the gradients' floor is the caller's
        kept, nxt = reach(chain, room)
        if room >= smallest:
            assert kept is not None and chain.peak(kept) - chain.static <= room
        else:
            assert kept is None and room < nxt <= smallest


@SMALL
@given(v2_chains(max_layers=7))
def test_the_short_minimum_is_the_enumerated_one(profile):
    scores = _recompute_only(profile)
    smallest = min(peak for _, peak, _ in scores)
    chain = PyChain(profile)
    assert min_peak(chain).peak == smallest
    # from any proven lower bound at or below it
    peak, kept = min_peak_short(chain, max(chain.pg_total, 0))
    assert chain.static + peak == smallest == chain.peak(kept)


def test_the_short_minimum_on_longer_random_chains():
    for seed in range(8):
        profile = random_v2_chain(200 + seed, 10, 40)
        numpy_side = min_peak(ChainModel(profile, table=False))  # the vectorised search
        assert min_peak(PyChain(profile)).peak == numpy_side.peak
