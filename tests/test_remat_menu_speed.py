"""remat-dp over menus, the fast search: the same optimum as the unpruned label search.

The search (`solvers.remat.menu_search`) prunes with bounds and keeps its
fronts as numpy arrays; here an independent plain-Python label search with
no pruning but Pareto dominance (every label that fits is kept) answers the
same chains of 30-60 layers, and every budget's optimum must agree. The
work a search charges must bound it: a limit just past its edges stops it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from remat_chains import random_v2_chain
from strategies import v3_profiles

import planopt
from planopt.budget import keep_all_peak
from planopt.result import Status
from solvers.remat.menu_search import solve_menus
from solvers.remat.menus import NEG, MenuChain


def with_menus(profile: planopt.Profile, seed: int) -> planopt.Profile:
    """Each layer with internals gets 1-3 options keeping part of them for part of its forward."""
    rng = random.Random(seed)
    layers = []
    for x in profile.layers:
        if x.saved_bytes > 0 and rng.random() < 0.8:
            options = tuple(
                planopt.LayerOption(
                    f"o{j}",
                    rng.randint(0, x.saved_bytes),
                    rng.choice([0.0, 0.25, 0.5, 1.0]) * max(x.fwd, 0.5),
                    (j,),
                    rng.choice([0, 0, rng.randint(1, 30)]),
                )
                for j in range(rng.randint(1, 3))
            )
            x = dataclasses.replace(x, options=options)
        layers.append(x)
    return profile.replace_layers(layers)


def unpruned(chain: MenuChain, room: int) -> float | None:
    """The least seconds beyond `T_ideal` over plans that fit: labels `(H, seconds)` per
    node, every label whose segment fits kept, only dominated ones dropped."""
    n = chain.n
    if chain.pg_from[0] > room:
        return None
    labels: dict[tuple[int, int], list[tuple[int, float]]] = {(-1, 0): [(0, 0.0)]}
    best = math.inf
    nodes = [(-1, 0)] + [(k, a) for k in range(n) for a in range(len(chain.choices[k]))]
    for k, a in nodes:
        here = labels.pop((k, a), [])
        front, least = [], math.inf
        for h, s in sorted(here):
            if s < least:
                front.append((h, s))
                least = s
        recompute, last_t = 0.0, k
        for t, b, cost, held, _ in chain.row(k, a):
            if t != last_t:
                recompute += chain.fwd[t]
                last_t = t
            extra = recompute + (chain.choices[t + 1][b][2] if t + 1 < n else 0.0)
            for h, s in front:
                if cost > NEG and h + cost > room:
                    continue
                if t + 1 < n:
                    labels.setdefault((t + 1, b), []).append((h + held, s + extra))
                else:
                    best = min(best, s + extra)
    return None if best == math.inf else best


@pytest.mark.parametrize("seed", range(8))
def test_the_fast_search_finds_the_unpruned_optimum(seed):
    profile = with_menus(random_v2_chain(seed, 30, 60), seed)
    chain = MenuChain(profile)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    for fraction in (0.05, 0.2, 0.4, 0.6, 0.8):
        room = int(low + fraction * (high - low)) - profile.static_bytes
        want = unpruned(chain, room)
        got = solve_menus(chain, room)
        assert got.proven
        if want is None:
            assert got.plan is None
            continue
        assert got.plan is not None, (seed, fraction)
        assert got.plan.makespan == pytest.approx(profile.t_ideal + want, rel=1e-9, abs=1e-12)
        plan = planopt.Plan.build(
            list(got.plan.actions), profile=profile, options=list(got.plan.options)
        )
        schedule = planopt.simulate(profile, plan)
        assert schedule.peak_bytes - profile.static_bytes <= room
        assert schedule.makespan == pytest.approx(got.plan.makespan, rel=1e-9, abs=1e-12)


def _chain_and_room(seed: int = 3) -> tuple[MenuChain, int]:
    profile = with_menus(random_v2_chain(seed, 50, 50), seed)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    return MenuChain(profile), int(low + 0.4 * (high - low)) - profile.static_bytes


def test_the_label_search_is_charged_and_a_work_limit_stops_it():
    """Labels are work: a limit that lets the edges be built stops the search inside it
    (before, only the edges were charged and the labels ran free)."""
    chain, room = _chain_and_room()
    charges: list[float] = []
    full = solve_menus(chain, room, charge=charges.append)
    assert full.proven and len(charges) > 1
    used = [0.0]

    def charge(units: float) -> None:
        used[0] += units

    cut = solve_menus(chain, room, charge=charge, expired=lambda: used[0] > charges[0] * 1.0001)
    assert not cut.proven
    assert cut.lower <= full.plan.makespan * (1 + 1e-12)


def test_a_work_limited_search_stops_at_the_same_place_twice():
    chain, room = _chain_and_room()
    results = []
    for _ in range(2):
        used = [0.0]

        def charge(units: float, used=used) -> None:
            used[0] += units

        out = solve_menus(chain, room, charge=charge, expired=lambda used=used: used[0] > 0.002)
        results.append((out.proven, out.lower, out.plan, used[0]))
    assert results[0] == results[1]


def test_through_solve_a_work_limit_gives_a_feasible_plan_no_slower_than_the_start():
    profile = with_menus(random_v2_chain(5, 60, 60), 5)
    whole = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])
    budget = (planopt.min_budget(profile) + keep_all_peak(profile)) // 2
    start = planopt.solve(whole, budget, "remat-dp")
    full = planopt.solve(profile, budget, "remat-dp")
    assert full.status is Status.OPTIMAL
    cut = planopt.solve(profile, budget, "remat-dp", work_limit=start.work_used * 1.01)
    assert cut.schedule.peak_bytes <= budget
    assert cut.schedule.makespan <= start.schedule.makespan * (1 + 1e-12)
    assert cut.lower_bound <= full.schedule.makespan * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_the_edge_arrays_are_the_running_rows(seed):
    """`MenuEdges` (numpy, a layer at a time) gives `MenuChain.row`'s entries that fit,
    up to the first top whose growing terms pass the room, in the same order."""
    from solvers.remat.menu_edges import MenuEdges

    profile = with_menus(random_v2_chain(seed, 1, 25), seed)
    chain = MenuChain(profile)
    edges = MenuEdges(chain)
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    for fraction in (0.1, 0.5, 1.0, 3.0):
        room = int(low + fraction * (high - low)) - profile.static_bytes
        for k in range(-1, chain.n):
            for a in range(len(chain.choices[k])) if k >= 0 else (0,):
                want, recompute, last = [], 0.0, k
                for t, b, cost, held, grown in chain.row(k, a):
                    if t != last:
                        recompute += chain.fwd[t]
                        last = t
                    if cost <= room:
                        regen = chain.choices[t + 1][b][2] if t + 1 < chain.n else 0.0
                        want.append((t, b, cost, held, recompute + regen))
                    if grown > room and t > k:
                        break
                got = list(zip(*(x.tolist() for x in edges.node(k, a, room)), strict=True))
                assert got == want, (k, a, fraction)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(v3_profiles(1, 6), st.integers(0, 1000))
def test_the_lagrangian_bound_is_below_every_fitting_completion(profile, pick):
    """At every node of every keep/option/recompute plan that fits, what the plan's rest
    adds is at least the bound at the bytes the plan holds there (`menu_bound`'s NOTE)."""
    from solvers.remat import menu_graph
    from solvers.remat.menu_bound import MenuBound

    chain = MenuChain(profile)
    n = chain.n
    order = [(-1, 0)] + [(k, a) for k in range(n) for a in range(len(chain.choices[k]))]
    index = {node: x for x, node in enumerate(order)}
    plans = []
    for acts in itertools.product((True, False), repeat=n):
        menus = [range(len(chain.choices[i])) if kept else (0,) for i, kept in enumerate(acts)]
        for picks in itertools.product(*menus):
            actions = tuple("keep" if kept else "recompute" for kept in acts)
            options = tuple(chain.choices[i][c][0] for i, c in enumerate(picks))
            plans.append((acts, picks, chain.peak(actions, options) - chain.static))
    peaks = sorted({p for _, _, p in plans})
    room = peaks[pick % len(peaks)]
    edges, _ = menu_graph._edges(chain, order, room, lambda: False)
    need, rest = menu_graph._lookahead(edges)
    tables = menu_graph._edge_tables(edges, need, rest, room)
    bound = MenuBound(chain, tables, room).refine(tables)  # the grid and the finer prices
    for acts, picks, peak in plans:
        if peak > room:
            continue
        kept = [(-1, 0)] + [(k, picks[k]) for k in range(n) if acts[k]]
        seconds = [0.0] * len(kept)  # what the plan adds above each kept node
        for x in range(len(kept) - 1, -1, -1):
            k = kept[x][0]
            top = kept[x + 1][0] if x + 1 < len(kept) else n
            regen = chain.choices[top][kept[x + 1][1]][2] if top < n else 0.0
            later = seconds[x + 1] if x + 1 < len(kept) else 0.0
            seconds[x] = later + sum(chain.fwd[k + 1 : top]) + regen
        held = 0
        for x, (k, a) in enumerate(kept):
            low = bound.lower(index[(k, a)], np.array([held], dtype=np.int64))[0]
            assert low <= seconds[x] + bound.margin, (k, a, held)
            top = kept[x + 1] if x + 1 < len(kept) else (n, 0)
            held += chain.segment(k, a, top[0] - 1, top[1])[1]


def test_the_label_cap_stops_the_search_with_a_plan_and_a_valid_bound(monkeypatch):
    """Memory is bounded by a count of labels held (MAX_LABELS), not only by work: under a
    small cap the search stops like a work limit stops it, keeping the start and a bound."""
    from solvers.remat import menu_search

    profile = with_menus(random_v2_chain(5, 60, 60), 5)
    whole = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])
    budget = (planopt.min_budget(profile) + keep_all_peak(profile)) // 2
    start = planopt.solve(whole, budget, "remat-dp")
    full = planopt.solve(profile, budget, "remat-dp")
    assert full.status is Status.OPTIMAL
    monkeypatch.setattr(menu_search, "MAX_LABELS", 50)
    cut = planopt.solve(profile, budget, "remat-dp")
    assert cut.status is Status.FEASIBLE and cut.plan is not None  # stopped, not proven
    assert cut.schedule.peak_bytes <= budget
    assert cut.schedule.makespan <= start.schedule.makespan * (1 + 1e-12)
    assert cut.lower_bound <= full.schedule.makespan * (1 + 1e-12)
