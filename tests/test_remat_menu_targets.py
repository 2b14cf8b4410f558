"""remat-dp over menus with targets (`solvers.remat.menu_optimum`) and the bound per cap.

The searches with caps from the bound must prove the same optimum as the
enumeration of every keep/option/recompute plan (chains of 1-5 layers) and
as a plain-Python label search with no pruning but dominance (30-60 layers);
the bound of the subgraph a cap allows (`MenuGraph.for_cap`) must lie below
the rest of every plan within that cap that fits, at every node it passes.
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

import planopt
from planopt.budget import keep_all_peak
from solvers.remat import menu_optimum
from solvers.remat.menu_graph import MenuGraph
from solvers.remat.menu_optimum import solve_menu_room
from solvers.remat.menu_search import solve_menus
from solvers.remat.menus import MenuChain

EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def _plans(chain: MenuChain):
    """Every keep/option/recompute plan: (kept nodes, seconds added, peak above static)."""
    n = chain.n
    out = []
    for acts in itertools.product((True, False), repeat=n):
        menus = [range(len(chain.choices[i])) if kept else (0,) for i, kept in enumerate(acts)]
        for picks in itertools.product(*menus):
            actions = tuple("keep" if kept else "recompute" for kept in acts)
            options = tuple(chain.choices[i][c][0] for i, c in enumerate(picks))
            nodes = [(-1, 0)] + [(k, picks[k]) for k in range(n) if acts[k]]
            seconds = sum(chain.fwd[i] for i in range(n) if not acts[i])
            seconds += sum(chain.choices[k][a][2] for k, a in nodes[1:])
            out.append((nodes, seconds, chain.peak(actions, options) - chain.static))
    return out


def _never_asked():
    raise AssertionError("the start was asked for")


@EXAMPLES
@given(v3_profiles(1, 5), st.integers(0, 1000))
def test_the_targets_prove_the_enumerated_optimum(profile, pick):
    chain = MenuChain(profile)
    plans = _plans(chain)
    peaks = sorted({p for _, _, p in plans})
    room = peaks[pick % len(peaks)] + (pick % 3) - 1
    best = min((s for _, s, p in plans if p <= room), default=None)
    asked = []

    def start():
        asked.append(True)
        return None  # no whole-layer plan: the last search has no cap

    result, started = solve_menu_room(chain, room, start)
    assert result.proven and started == bool(asked)
    if best is None:
        assert result.plan is None
        return
    assert result.plan.makespan == pytest.approx(profile.t_ideal + best, rel=1e-9, abs=1e-12)
    assert result.plan.peak - chain.static <= room


@EXAMPLES
@given(v3_profiles(1, 5), st.integers(0, 1000), st.integers(0, 1000))
def test_the_bound_of_a_caps_subgraph_is_below_every_plan_within_the_cap(profile, pick, cap_pick):
    """`menu_graph`'s NOTE: at every node of a fitting plan adding at most `cap`
    seconds, the subgraph's bound at the bytes held there is at most what the rest adds."""
    chain = MenuChain(profile)
    plans = _plans(chain)
    peaks = sorted({p for _, _, p in plans})
    room = peaks[pick % len(peaks)]
    fitting = [(nodes, s) for nodes, s, p in plans if p <= room]
    graph = MenuGraph.build(chain, room)
    if graph.empty:
        assert not fitting
        return
    caps = sorted({s for _, s in fitting})
    cap = caps[cap_pick % len(caps)]
    _tables, bound = graph.for_cap(cap)
    assert graph.root() <= min(s for _, s in fitting) + bound.margin
    index = {node: x for x, node in enumerate(graph.order)}
    n = chain.n
    for nodes, seconds in fitting:
        if seconds > cap:
            continue
        held, spent = 0, 0.0
        for x, (k, a) in enumerate(nodes):
            low = bound.lower(index[(k, a)], np.array([held], dtype=np.int64))[0]
            assert low <= seconds - spent + bound.margin + 1e-12, (k, a, held)
            top = nodes[x + 1] if x + 1 < len(nodes) else (n, 0)
            held += chain.segment(k, a, top[0] - 1, top[1])[1]
            spent += sum(chain.fwd[k + 1 : top[0]]) + (
                chain.choices[top[0]][top[1]][2] if top[0] < n else 0.0
            )


@pytest.mark.parametrize("seed", range(8))
def test_the_targets_find_the_unpruned_optimum_on_longer_chains(seed):
    profile = with_menus(random_v2_chain(seed, 30, 60), seed)
    chain = MenuChain(profile)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    for fraction in (0.05, 0.2, 0.4, 0.6, 0.8):
        room = int(low + fraction * (high - low)) - profile.static_bytes
        want = unpruned(chain, room)
        got, _ = solve_menu_room(chain, room, lambda: None)
        assert got.proven
        if want is None:
            assert got.plan is None
            continue
        assert got.plan.makespan == pytest.approx(profile.t_ideal + want, rel=1e-9, abs=1e-12)
        assert got.plan.peak - profile.static_bytes <= room
        assert got.plan.makespan == pytest.approx(
            solve_menus(chain, room).plan.makespan, rel=1e-12, abs=1e-15
        )


def test_the_targets_settle_a_roomy_chain_without_the_start():
    """The point of the targets: where the bound is tight the start is never asked for."""
    profile = with_menus(random_v2_chain(3, 50, 50), 3)
    chain = MenuChain(profile)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    room = int(low + 0.8 * (high - low)) - profile.static_bytes
    result, started = solve_menu_room(chain, room, _never_asked)
    assert result.proven and not started
    assert result.plan.makespan == pytest.approx(
        profile.t_ideal + unpruned(chain, room), rel=1e-9, abs=1e-12
    )


def test_a_work_limit_inside_the_targets_asks_for_the_start_and_keeps_a_valid_bound():
    profile = with_menus(random_v2_chain(5, 60, 60), 5)
    chain = MenuChain(profile)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    room = int(low + 0.4 * (high - low)) - profile.static_bytes
    full, _ = solve_menu_room(chain, room, lambda: None)
    assert full.proven
    built: list[float] = []
    MenuGraph.build(chain, room, charge=built.append)
    past = sum(built) * 1.05  # past the edges and bound: inside the targets' searches
    outcomes = []
    for _ in range(2):
        used = [0.0]

        def charge(units: float, used=used) -> None:
            used[0] += units

        cut, started = solve_menu_room(
            chain, room, lambda: None, charge=charge, expired=lambda used=used: used[0] > past
        )
        outcomes.append((cut.proven, cut.lower, cut.plan, started, used[0]))
    assert outcomes[0] == outcomes[1]  # deterministic under a work limit
    proven, lower, _plan, started, _ = outcomes[0]
    assert not proven and started
    assert lower <= full.plan.makespan * (1 + 1e-12)


def test_targets_that_spend_their_share_fall_back_to_the_start(monkeypatch):
    """Past `TARGET_WORK` the start caps one last search, as before the targets."""
    monkeypatch.setattr(menu_optimum, "TARGET_WORK", 0.0)
    profile = with_menus(random_v2_chain(5, 60, 60), 5)
    chain = MenuChain(profile)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    room = int(low + 0.4 * (high - low)) - profile.static_bytes
    want = unpruned(chain, room)
    result, started = solve_menu_room(chain, room, lambda: (math.inf, ("recompute",) * chain.n))
    assert result.proven and started
    assert result.plan.makespan == pytest.approx(profile.t_ideal + want, rel=1e-9, abs=1e-12)


def test_when_the_targets_share_of_the_limits_runs_out_the_start_still_settles_it():
    """`targets`' limit is the caps' share (remat_dp: half the work and time left): when
    it comes, the start is asked for and the search it caps runs under the whole limit,
    so the answer is still proven (before the share, a limit inside the caps stopped it)."""
    profile = with_menus(random_v2_chain(5, 60, 60), 5)
    chain = MenuChain(profile)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    room = int(low + 0.4 * (high - low)) - profile.static_bytes
    want = unpruned(chain, room)
    result, started = solve_menu_room(
        chain, room, lambda: None, targets=(lambda units: None, lambda: True)
    )
    assert result.proven and started
    assert result.plan.makespan == pytest.approx(profile.t_ideal + want, rel=1e-9, abs=1e-12)
