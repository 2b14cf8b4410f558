"""Block detection (`planopt.find_blocks`) and the decomposed planner (method "blocks").

Detection is checked on chains with a planted period (with signatures, and
without them under noise inside the tolerance), on random chains (where it
must find nothing) and on the bundled ResNet-50 (four stages in a row). The
planner is checked against the exact optimum on nets of k copies of a block
(k = 2..6) small enough for CP-SAT to prove optimality, and every plan it
returns is replayed in the simulator at the requested budget.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planopt
from planopt import Layer, Status, find_blocks, random_chain, repeated_chain
from planopt.blocks import BlockStructure, Repeat
from planopt.errors import InvalidProfileError, SolverOptionError
from solvers.block_front import BlockOption, block_front, lower_hull
from solvers.search.repeats import block_level, compose, copy_classes


def _planted(seed: int, period: int, repeats: int, pre: int, post: int, *, signatures: bool):
    """prefix + block * repeats + suffix from distinct random layers (seeded)."""
    base = random_chain(period + pre + post, seed=seed, family="uniform")
    layers = base.layers
    block = layers[pre : pre + period]
    chain = repeated_chain(block, repeats, layers[:pre], layers[pre + period :])
    if not signatures:
        chain = tuple(dataclasses.replace(layer, signature=None) for layer in chain)
    return base.replace_layers(chain)


def _noisy(profile, noise: float, seed: int):
    """Every time scaled by a factor in [1 - noise, 1 + noise] (sizes unchanged)."""
    rng = random.Random(seed)
    return profile.replace_layers(
        [
            dataclasses.replace(
                layer,
                fwd=layer.fwd * rng.uniform(1 - noise, 1 + noise),
                bwd=layer.bwd * rng.uniform(1 - noise, 1 + noise),
            )
            for layer in profile.layers
        ]
    )


# -- detection -------------------------------------------------------------------------


# A planted net: `repeats` copies of a `period`-layer block between `pre` and `post` layers.
PLANTED = dict(
    seed=st.integers(0, 10_000),
    period=st.integers(1, 6),
    repeats=st.integers(2, 8),
    pre=st.integers(0, 3),
    post=st.integers(0, 3),
)


@settings(max_examples=60, deadline=None)
@given(**PLANTED)
def test_finds_the_planted_period_from_signatures(seed, period, repeats, pre, post):
    profile = _planted(seed, period, repeats, pre, post, signatures=True)
    found = find_blocks(profile)
    assert found.repeats == (Repeat(pre, period, repeats),)
    assert found.prefix == range(0, pre)
    assert found.suffix == range(pre + period * repeats, len(profile))


@settings(max_examples=60, deadline=None)
@given(**PLANTED, noise=st.sampled_from([0.0, 0.01, 0.02]))
def test_finds_the_planted_period_from_numbers_under_noise(seed, period, repeats, pre, post, noise):
    if period * repeats < 4:
        return  # numbers alone need 4 layers of evidence (see planopt.blocks)
    profile = _noisy(_planted(seed, period, repeats, pre, post, signatures=False), noise, seed)
    found = find_blocks(profile)  # rtol 5%: noise of 2% keeps copies within it
    assert found.repeats == (Repeat(pre, period, repeats),)


def test_noise_beyond_the_tolerance_breaks_the_match():
    profile = _planted(7, 3, 6, 1, 1, signatures=False)
    assert find_blocks(profile).repeats == (Repeat(1, 3, 6),)
    # every other copy 30% slower: now the period is two copies
    slow = profile.replace_layers(
        [
            dataclasses.replace(layer, fwd=layer.fwd * (1.3 if (i - 1) // 3 % 2 else 1.0))
            for i, layer in enumerate(profile.layers)
        ]
    )
    assert find_blocks(slow).repeats == (Repeat(1, 6, 3),)


@pytest.mark.parametrize("n", [50, 200, 600])
@pytest.mark.parametrize("seed", range(4))
def test_finds_nothing_in_random_chains(n, seed):
    profile = random_chain(n, seed=seed, family="uniform")
    found = find_blocks(profile)
    assert not found.found, found.summary()
    assert found.irregular() == [range(0, n)]


def test_finds_resnet_stages_in_sequence():
    profile = planopt.bundled_profile("resnet50-ops-b128-a100-pcie4-roofline")
    found = find_blocks(profile)
    stages = [(r.period, r.repeats) for r in found.repeats if r.period == 10]
    assert stages == [(10, 2), (10, 3), (10, 5), (10, 2)]  # bottlenecks 2-3, 3-4, 4-6, 5-3
    for rep in found.repeats:  # every copy really repeats the first one's signatures
        first = [profile.layers[i].signature for i in rep.copy(0)]
        for r in range(rep.repeats):
            assert [profile.layers[i].signature for i in rep.copy(r)] == first


@pytest.mark.parametrize("blocks", [12, 48])
def test_finds_the_gpt_blocks(blocks):
    profile = planopt.bundled_profile(f"gpt-{blocks}blk-b8-s1024-h100-pcie5-roofline")
    found = find_blocks(profile)
    assert found.repeats == (Repeat(1, 13, blocks),)
    assert found.summary() == f"1 + {blocks}x13 + 3"


def test_two_distinct_blocks_in_a_row():
    base = random_chain(7, seed=3, family="uniform").layers
    chain = (
        *repeated_chain(base[1:3], 3, base[:1]),
        *(
            dataclasses.replace(x, name=f"c{j}.{x.name}", signature=x.name)
            for j in range(4)
            for x in base[3:6]
        ),
        base[6],
    )
    profile = random_chain(7, seed=3, family="uniform").replace_layers(chain)
    found = find_blocks(profile)
    assert found.repeats == (Repeat(1, 2, 3), Repeat(7, 3, 4))
    assert found.irregular() == [range(0, 1), range(19, 20)]
    assert found.covered == 18


def test_structure_helpers_and_errors():
    rep = Repeat(2, 3, 4)
    assert rep.copy(1) == range(5, 8) and rep.stop == 14
    with pytest.raises(IndexError):
        rep.copy(4)
    none = BlockStructure(5, (), (0, 1, 2, 3, 4))
    assert none.prefix == range(0, 5) and none.suffix == range(5, 5) and none.summary() == "5"
    profile = random_chain(5, seed=1)
    with pytest.raises(InvalidProfileError, match="rtol"):
        find_blocks(profile, rtol=1.5)
    with pytest.raises(InvalidProfileError, match="min_layers"):
        find_blocks(profile, min_layers=1)


def test_copy_classes_and_levels():
    assert copy_classes(Repeat(0, 2, 2), 0) == [[0], [1]]
    assert copy_classes(Repeat(0, 2, 10), 0) == [[0], list(range(1, 9)), [9]]
    assert copy_classes(Repeat(0, 2, 10), 1) == [[0], [1, 2, 3, 4], [5, 6, 7, 8], [9]]
    assert copy_classes(Repeat(0, 2, 5), 5) == [[0], [1], [2], [3], [4]]
    structure = find_blocks(_planted(1, 3, 6, 1, 2, signatures=True))
    level = block_level(structure, 0)
    every = sorted(i for group in level.groups for i in group)
    assert every == list(range(structure.n))  # each layer in exactly one group


def test_block_front_is_a_front():
    """Options get cheaper as they may keep more, and each respects its model."""
    profile = planopt.bundled_profile("gpt-12blk-b8-s1024-h100-pcie5-roofline")
    rep = find_blocks(profile).repeats[0]
    front = block_front(profile, rep)
    assert len(front) >= 5
    kept = [opt.kept for opt in front]
    assert kept == sorted(kept)
    assert front[0].kept == 0 and front[-1].seconds == 0.0
    total = sum(profile.layers[i].product_bytes for i in rep.copy(0))
    assert all(0 <= opt.kept <= total for opt in front)


@settings(max_examples=200, deadline=None)
@given(
    points=st.lists(
        st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=25, unique=True
    )
)
def test_lower_hull_is_the_convex_lower_envelope_of_the_front(points):
    front = [BlockOption((), kept, float(seconds)) for kept, seconds in points]
    hull = lower_hull(front)
    assert hull and all(h in front for h in hull)
    kept = [h.kept for h in hull]
    seconds = [h.seconds for h in hull]
    assert kept == sorted(set(kept)) and seconds == sorted(seconds, reverse=True)
    assert len(set(seconds)) == len(seconds)
    for a, b, c in zip(hull, hull[1:], hull[2:], strict=False):  # strictly convex turns
        left = (b.seconds - a.seconds) * (c.kept - a.kept)
        assert left < (c.seconds - a.seconds) * (b.kept - a.kept)

    def envelope(x: float) -> float:  # the hull as a function of kept bytes
        if x >= hull[-1].kept:
            return hull[-1].seconds
        for a, b in itertools.pairwise(hull):
            if a.kept <= x <= b.kept:
                return a.seconds + (b.seconds - a.seconds) * (x - a.kept) / (b.kept - a.kept)
        return float("inf")  # below the least kept: no option fits

    assert all(opt.seconds >= envelope(opt.kept) - 1e-9 for opt in front)


@pytest.mark.parametrize("fraction", [0.7, 0.5, 0.3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_composition_never_loses_and_keeps_the_plan_fitting(seed, fraction):
    from planopt.budget import min_memory_plan
    from planopt.problem import Problem
    from solvers.search.engine import Incumbent

    profile = _planted(seed, 3, 8, 1, 2, signatures=True)
    budget = planopt.budget_from_fraction(profile, fraction)
    problem = Problem(profile, budget, planopt.min_budget(profile))
    if budget < problem.min_budget:
        pytest.skip("below the minimum budget")
    inc = Incumbent(problem, min_memory_plan(profile))
    before = inc.key
    assert inc.feasible
    improved = compose(inc, find_blocks(profile))
    assert inc.feasible and not Incumbent.better(before, inc.key)
    makespan, peak = planopt.Scorer(profile).score_plan(inc.plan())
    assert peak <= budget and makespan == pytest.approx(inc.makespan, rel=1e-12)
    assert improved == Incumbent.better(inc.key, before)


# -- the decomposed planner -------------------------------------------------------------


def _copies_net(seed: int, k: int):
    """One random layer, k copies of a 2-layer block, one random layer."""
    base = random_chain(4, seed=seed, family="uniform")
    layers = base.layers
    return base.replace_layers(repeated_chain(layers[1:3], k, layers[:1], layers[3:]))


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("seed", [0, 1, 3])  # seed 3, k = 4: its optimum waits 6 forwards
def test_blocks_is_within_one_percent_of_the_exact_optimum(seed, k):
    profile = _copies_net(seed, k)
    budget = planopt.budget_from_fraction(profile, 0.5)
    if budget < planopt.min_budget(profile):
        pytest.skip("50% is below the minimum budget")
    exact = planopt.solve(profile, budget, "exact", work_limit=60)
    assert exact.status is Status.OPTIMAL, exact.message
    sol = planopt.solve(profile, budget, "blocks", work_limit=10)
    assert sol.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert sol.schedule.feasible and sol.schedule.peak_bytes <= budget
    assert sol.makespan <= exact.makespan * 1.01
    assert sol.makespan >= exact.makespan * (1 - 1e-9)  # the optimum is optimal
    assert sol.lower_bound is not None
    assert sol.lower_bound <= exact.makespan * (1 + 1e-9)


@pytest.mark.parametrize("fraction", [0.7, 0.5, 0.3])
def test_blocks_plans_a_gpt_feasibly_and_beats_the_greedy(fraction):
    profile = planopt.bundled_profile("gpt-12blk-b8-s1024-h100-pcie5-roofline")
    budget = max(planopt.budget_from_fraction(profile, fraction), planopt.min_budget(profile))
    greedy = planopt.solve(profile, budget, "greedy")
    sol = planopt.solve(profile, budget, "blocks", work_limit=1.0, window=0)
    schedule = planopt.simulate(profile, sol.plan, budget)
    assert schedule.feasible
    assert sol.makespan <= greedy.makespan
    assert sol.lower_bound <= sol.makespan
    assert "blocks 1 + 12x13 + 3" in sol.message


def test_blocks_without_repeats_searches_layers():
    profile = random_chain(20, seed=5, family="uniform")
    budget = planopt.budget_from_fraction(profile, 0.5)
    sol = planopt.solve(profile, budget, "blocks", work_limit=0.05, window=0)
    assert "no repeated blocks found" in sol.message
    assert sol.schedule.feasible
    assert sol.makespan <= planopt.solve(profile, budget, "greedy").makespan


def test_blocks_is_deterministic_under_a_work_limit():
    profile = _copies_net(3, 6)
    budget = planopt.budget_from_fraction(profile, 0.5)
    runs = [planopt.solve(profile, budget, "blocks", work_limit=0.05) for _ in range(2)]
    assert runs[0].plan == runs[1].plan and runs[0].work_used == runs[1].work_used


def test_blocks_options_are_checked():
    profile = _copies_net(0, 3)
    with pytest.raises(SolverOptionError, match="window"):
        planopt.solve(profile, "50%", "blocks", window=-1)
    with pytest.raises(SolverOptionError, match="window_work"):
        planopt.solve(profile, "50%", "blocks", window_work=0)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), k=st.integers(2, 6), r=st.floats(0.0, 1.0))
def test_every_blocks_plan_fits_its_budget(seed, k, r):
    profile = _copies_net(seed, k)
    low = planopt.min_budget(profile)
    budget = int(low + r * (planopt.keep_all_peak(profile) - low))  # whole bytes
    sol = planopt.solve(profile, budget, "blocks", work_limit=0.02, window=0)
    assert sol.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert planopt.simulate(profile, sol.plan, budget).feasible
    assert sol.makespan <= planopt.solve(profile, budget, "greedy").makespan


def test_find_blocks_is_exported():
    assert planopt.find_blocks is find_blocks
    assert isinstance(Layer, type)
