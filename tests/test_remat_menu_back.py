"""remat-dp over menus searched backwards (`solvers.remat.menu_back`): the same optimum.

The backward search prunes completions with a Lagrangian bound on the prefix
below them (`PrefixBound`) against a cap. Checked against the enumeration of
every keep/option/recompute plan (chains of 1-5 layers, at tight rooms
where the bound prunes), against a plain-Python label search with only
dominance (30-60 layers, tight budgets), and the bound itself against every
fitting plan's prefix at every node it passes: a wrong pruning loses the
optimum or passes below a prefix, and these fail.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from remat_chains import random_v2_chain
from strategies import v3_profiles
from test_remat_menu_speed import unpruned, with_menus
from test_remat_menu_targets import _plans

import planopt
from planopt.budget import keep_all_peak
from solvers.remat import menu_back
from solvers.remat.menu_back import _prepared, route_prices, run_back, solve_back
from solvers.remat.menu_graph import MenuGraph
from solvers.remat.menus import MenuChain

EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


def _room(plans, pick: int) -> int:
    """A room among the plans' peaks, the tight end drawn most (where pruning acts)."""
    peaks = sorted({p for _, _, p in plans})
    return peaks[min(pick % len(peaks), pick % 3)] + (pick % 2)


@EXAMPLES
@given(v3_profiles(1, 5), st.integers(0, 1000))
def test_the_backward_search_finds_the_enumerated_optimum_at_its_cap_and_none_below(profile, pick):
    chain = MenuChain(profile)
    plans = _plans(chain)
    room = _room(plans, pick)
    best = min((s for _, s, p in plans if p <= room), default=None)
    graph = MenuGraph.build(chain, room)
    if best is None:
        assert graph.empty or run_back(graph, graph.tables, _prices(graph), math.inf).plan is None
        return
    prices = _prices(graph)
    got = run_back(graph, graph.tables, prices, best)  # the optimum as cap: pruning at its edge
    assert got.plan is not None and not got.stopped
    assert got.seconds == pytest.approx(best, rel=1e-9, abs=1e-12)
    assert got.plan.makespan == pytest.approx(profile.t_ideal + best, rel=1e-9, abs=1e-12)
    assert got.plan.peak - chain.static <= room
    below = best - 1e-6 * (1.0 + abs(best))
    assert run_back(graph, graph.tables, prices, below).plan is None  # none beats the optimum
    exact, _beam = solve_back(graph, best + abs(best) + 1.0)
    assert exact.plan is not None
    assert exact.seconds == pytest.approx(best, rel=1e-9, abs=1e-12)


@EXAMPLES
@given(v3_profiles(1, 5), st.integers(0, 1000))
def test_the_prefix_bound_is_below_every_fitting_plans_prefix(profile, pick):
    """At every node of a fitting plan, the bound at the bytes it holds there (`H`) is at
    most the seconds its prefix added: pruning 4 of `menu_back`'s NOTE."""
    chain = MenuChain(profile)
    plans = _plans(chain)
    room = _room(plans, pick)
    graph = MenuGraph.build(chain, room)
    if graph.empty:
        return
    prefix = _prepared(graph, graph.tables, _prices(graph), lambda units: None).prefix
    index = {node: x for x, node in enumerate(graph.order)}
    n = chain.n
    for nodes, _seconds, peak in plans:
        if peak > room:
            continue
        held, spent = 0, 0.0
        for x, (k, a) in enumerate(nodes):
            here = np.array([held], dtype=np.int64)
            low = float(prefix.lower(index[(k, a)], here)[0])
            assert low <= spent + prefix.margin + 1e-12, (k, a, held)
            some = np.arange(len(prefix.prices))[::3]
            assert float(prefix.lower(index[(k, a)], here, some)[0]) <= low + 1e-12
            top = nodes[x + 1] if x + 1 < len(nodes) else (n, 0)
            held += chain.segment(k, a, top[0] - 1, top[1])[1]
            spent += sum(chain.fwd[k + 1 : top[0]]) + (
                chain.choices[top[0]][top[1]][2] if top[0] < n else 0.0
            )


@pytest.mark.parametrize("seed", range(8))
def test_the_backward_route_finds_the_unpruned_optimum_on_longer_chains(seed, monkeypatch):
    """Tight budgets (5-40% of the way from the least to keep-all), where the prefix
    bound and the ranges prune most; the beam's cap and the exact search after it."""
    profile = with_menus(random_v2_chain(seed, 30, 60), seed)
    chain = MenuChain(profile)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    for fraction in (0.05, 0.1, 0.2, 0.4):
        room = int(low + fraction * (high - low)) - profile.static_bytes
        want = unpruned(chain, room)
        graph = MenuGraph.build(chain, room)
        if want is None:
            assert graph.empty or solve_back(graph, math.inf)[0].plan is None
            continue
        exact, beam = solve_back(graph, want * 1.5 + 1.0)
        assert beam is not None and beam.seconds >= want - 1e-9 * (1 + want)
        assert exact.plan is not None
        assert exact.seconds == pytest.approx(want, rel=1e-9, abs=1e-12)
        for first, width in itertools.product((want, want * 1.02 + 1e-6, want * 1.2), (0, 1)):
            # the beam keeps every label of a plan within `first` (and `width` others): what
            # it finds there is the optimum, however narrow the beam
            monkeypatch.setattr(menu_back, "BEAM", width)
            proven, _beam = solve_back(graph, want * 1.5 + 1.0, first)
            assert proven.seconds == pytest.approx(want, rel=1e-9, abs=1e-12)
        plan = planopt.Plan.build(
            list(exact.plan.actions), profile=profile, options=list(exact.plan.options)
        )
        schedule = planopt.simulate(profile, plan)
        assert schedule.peak_bytes - profile.static_bytes <= room
        assert schedule.makespan == pytest.approx(exact.plan.makespan, rel=1e-9, abs=1e-12)


def test_a_work_limited_backward_search_stops_at_the_same_place_twice():
    profile = with_menus(random_v2_chain(3, 50, 50), 3)
    chain = MenuChain(profile)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    room = int(low + 0.3 * (high - low)) - profile.static_bytes
    want = unpruned(chain, room)
    outcomes = []
    for _ in range(2):
        graph = MenuGraph.build(chain, room)
        used = [0.0]

        def charge(units: float, used=used) -> None:
            used[0] += units

        full = run_back(graph, graph.tables, _prices(graph), want, charge=charge)
        assert full.plan is not None
        half = used[0] / 2
        graph = MenuGraph.build(chain, room)
        used[0] = 0.0
        cut = run_back(graph, graph.tables, _prices(graph), want, charge=charge, work_cap=half)
        outcomes.append((cut.capped, cut.plan, used[0]))
    assert outcomes[0] == outcomes[1] and outcomes[0][0]


def _prices(graph: MenuGraph) -> np.ndarray:
    return route_prices(graph.coarse)
