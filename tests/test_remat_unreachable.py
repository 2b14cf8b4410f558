"""remat-dp's early "infeasible" for long chains: the same answers as the search gave.

Above `SHORT_LAYERS` layers `solve_certified` first asks a greedy walk
(`reach.longest_runs`) and then `reach`'s exact pass whether any plan fits,
before the numpy model is built. The tests check the walk's plans fit, that
it finds none where enumeration finds none, and that every answer (status,
plan, bound, message, certificate) is the one the numpy path gives, on the
bundled long nets and random chains, just below and just above the space's
minimum budget.
"""

from __future__ import annotations

import math

import pytest
from remat_chains import random_v2_chain

from planopt.budget import space_min_budget
from planopt.bundled import bundled_profile
from planopt.problem import Problem
from planopt.profile import Profile
from solvers import remat_dp
from solvers.remat.chain import ChainModel
from solvers.remat.pychain import PyChain
from solvers.remat.reach import longest_runs, reach
from solvers.remat.short import SHORT_LAYERS

LONG_NETS = (
    "gpt-12blk-b8-s1024-h100-pcie5-roofline",
    "bert-base-b32-s512-h100-pcie5-roofline",
    "resnet50-ops-b128-a100-pcie4-roofline",
)


@pytest.mark.parametrize("seed", range(40))
def test_the_greedy_walk_finds_only_plans_that_fit(seed):
    profile = random_v2_chain(seed, 1, 11)
    model = PyChain(profile)
    n = model.n
    peaks = sorted(
        {
            model.peak([i for i in range(n) if bits >> i & 1]) - profile.static_bytes
            for bits in range(2**n)
        }
    )
    least = peaks[0]
    for room in sorted({*peaks, *(p - 1 for p in peaks), least - 1}):
        if room < model.pg_total:
            continue
        kept = longest_runs(PyChain(profile), room)
        exact, _ = reach(PyChain(profile), room)
        assert (exact is not None) == (room >= least)
        if kept is not None:
            assert model.peak(kept) - profile.static_bytes <= room
            assert room >= least


@pytest.mark.parametrize("seed", range(6))
def test_the_greedy_walk_is_sound_on_long_chains(seed):
    profile = random_v2_chain(100 + seed, SHORT_LAYERS + 1, 140)
    model = ChainModel(profile)
    low = space_min_budget(profile, "recompute-only").value - profile.static_bytes
    high = model.peak(list(range(model.n))) - profile.static_bytes
    for room in {low - 1, low, low + 1, (low + high) // 2, high}:
        kept = longest_runs(PyChain(profile), room)
        if kept is not None:
            assert model.peak(list(kept)) - profile.static_bytes <= room
        assert (reach(PyChain(profile), room)[0] is not None) == (room >= low)


def _answer(profile: Profile, budget: int):
    out, cert = remat_dp.solve_certified(Problem(profile, budget, 0))
    actions = None if out.plan is None else tuple(out.plan.actions)
    return out.status, actions, out.lower_bound, out.message, cert


def _both(profile: Profile, budget: int, monkeypatch):
    new = _answer(profile, budget)
    with monkeypatch.context() as patch:
        patch.setattr(remat_dp, "_unreachable", lambda *args: None)  # the numpy path alone
        old = _answer(profile, budget)
    return new, old


def _check_around_the_minimum(profile: Profile, monkeypatch) -> None:
    assert len(profile.layers) > SHORT_LAYERS
    minimum = space_min_budget(profile, "recompute-only").value
    for budget in (minimum - 1, minimum):
        new, old = _both(profile, budget, monkeypatch)
        assert new == old
        assert (new[0].value == "infeasible") == (budget < minimum)
        if budget < minimum:
            assert f"needs at least {minimum} bytes" in new[3]
        room = budget - profile.static_bytes
        early = remat_dp._unreachable(PyChain(profile), room, lambda units: None, lambda: False)
        assert (early is None) == (budget >= minimum)  # the early pass answered, not the search


@pytest.mark.parametrize("name", LONG_NETS)
def test_bundled_long_nets_answer_as_the_numpy_path_did(name, monkeypatch):
    _check_around_the_minimum(bundled_profile(name), monkeypatch)


@pytest.mark.parametrize("seed", range(8))
def test_random_long_chains_answer_as_the_numpy_path_did(seed, monkeypatch):
    _check_around_the_minimum(random_v2_chain(200 + seed, SHORT_LAYERS + 1, 120), monkeypatch)


@pytest.mark.parametrize("fraction", [0.2, 0.3, 0.5])
def test_the_bundled_nets_at_fractions_answer_as_before(fraction, monkeypatch):
    profile = bundled_profile("resnet50-ops-b128-a100-pcie4-roofline")
    low = space_min_budget(profile, "recompute-only").value
    high = ChainModel(profile).peak(list(range(len(profile.layers))))
    budget = math.floor(profile.static_bytes + fraction * (high - profile.static_bytes))
    new, old = _both(profile, budget, monkeypatch)
    assert new == old
    assert (new[0].value == "infeasible") == (budget < low)
