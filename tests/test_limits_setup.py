"""Limits reach the preparation, not only the search loop (issue 16: "every method
stops within its limit at any size").

On 10^4-10^5 layers the time went before any search looked at its deadline:
the recompute-only seed's completion bound (several seconds, no check), the
relaxation's model building. Each test gives a limit that has already passed
and checks, from the work charged, that the step stopped at once rather than
running to the end; no clock is read.
"""

from __future__ import annotations

import dataclasses
import time

import planopt
from planopt.blocks import find_blocks
from planopt.random_chain import random_chain, repeated_chain
from solvers.remat.bounds import WORK_PER_SWEPT_NODE
from solvers.remat.chain import ChainModel
from solvers.remat.optimum import solve_room


def test_the_recompute_only_bound_stops_when_the_limit_has_passed():
    profile = random_chain(3000, seed=0)
    model = ChainModel(profile)
    room = int(0.4 * (model.peak(list(range(model.n))) - profile.static_bytes))
    charged: list[float] = []
    result = solve_room(model, room, charge=charged.append, expired=lambda: True)
    assert result.found is None and not result.proven
    # At most the one sweep under way when the limit was seen (the bound alone sweeps
    # at least three times, then the search charges its own).
    assert sum(charged) <= model.n * WORK_PER_SWEPT_NODE


def test_the_time_limit_counts_from_solves_door(monkeypatch):
    """The minimum budget is computed inside the limit (seconds at 10^5 layers)."""
    import planopt.api as api

    seen: dict[str, float] = {}
    real_min_budget, real_problem = api.min_budget, api.Problem

    def min_budget(profile):
        seen["min_budget_at"] = time.monotonic()
        return real_min_budget(profile)

    def problem(**kwargs):
        seen["deadline"] = kwargs["deadline"]
        return real_problem(**kwargs)

    monkeypatch.setattr(api, "min_budget", min_budget)
    monkeypatch.setattr(api, "Problem", problem)
    api.solve(random_chain(20, seed=0), "50%", "greedy", time_limit=100.0)
    assert seen["deadline"] - 100.0 <= seen["min_budget_at"]


def _repeated(period: int, copies: int) -> planopt.Profile:
    base = random_chain(period, seed=0)
    layers = repeated_chain(base.layers, copies)
    return dataclasses.replace(base, name=f"repeated-{period}x{copies}", layers=layers)


def test_find_blocks_stops_when_asked():
    profile = _repeated(4, 20)
    assert find_blocks(profile).found
    calls: list[int] = []

    def stop() -> bool:
        calls.append(1)
        return True

    stopped = find_blocks(profile, stop=stop)
    assert calls and not stopped.found
    assert len(set(stopped.keys)) == len(stopped.keys)  # no layer compared: no repeat


def test_the_relaxation_is_not_solved_when_its_build_ran_past_the_limit(monkeypatch):
    from solvers.model import relaxation

    solved: list[int] = []

    def solve(*args, **kwargs):
        solved.append(1)
        raise AssertionError("the deadline had passed: nothing to solve")

    monkeypatch.setattr(relaxation, "solve_with_highs", solve)
    profile = random_chain(300, seed=0)
    budget = planopt.budget_from_fraction(profile, 0.5)
    bound = relaxation.relaxation_bound(profile, budget, time_limit=1e-9, relax=True)
    assert bound == profile.t_ideal and not solved


def test_block_levels_are_built_when_the_search_reaches_them(monkeypatch):
    from solvers.search import repeats

    structure = find_blocks(_repeated(3, 40))
    built: list[int] = []
    real = repeats.block_level

    def block_level(s, level):
        built.append(level)
        return real(s, level)

    monkeypatch.setattr(repeats, "block_level", block_level)
    phases = repeats.block_phases(structure, 0, 0.1)
    assert built == [0]  # the finer levels wait for the search
    names = [name for name, _ in phases]
    assert "blocks level 1" in names and names.index("blocks level 1") > names.index(
        "blocks level 0"
    )


def test_min_budget_does_not_simulate_its_witness(monkeypatch):
    """Every solve computes the minimum budget inside its limit: the bound alone (the
    witness only says whether it is exact; simulating it took 2 s at 10^5 layers)."""
    from planopt.simulate import Scorer

    profile = random_chain(50, seed=0)
    expected = planopt.min_budget(profile)

    def no_simulation(self, plan):
        raise AssertionError("min_budget simulated a plan")

    monkeypatch.setattr(Scorer, "score_plan", no_simulation)
    assert planopt.min_budget(profile) == expected


def test_the_exact_methods_hint_stops_when_the_limit_has_passed():
    """Working out the warm start's every variable swept the model until nothing
    changed: 17 s of a 5 s limit at 10^3 layers (recompute-only), with no look at the
    deadline. It now asks before each sweep; told to stop, it gives no hint."""
    from planopt.budget import keep_all_peak
    from planopt.plan import Plan
    from solvers.model import build, evaluate

    profile = random_chain(30, seed=1)
    form = build(profile, budget=keep_all_peak(profile))
    decisions = form.decisions(Plan.keep_all(profile))
    asked: list[int] = []

    def never() -> bool:
        asked.append(1)
        return False

    assert evaluate(form, decisions, stop=never) == evaluate(form, decisions)
    assert len(asked) >= 2  # asked before every sweep, the last one included
    assert evaluate(form, decisions, stop=lambda: True) is None


def test_the_fingerprint_is_hashed_before_the_methods_deadline(monkeypatch):
    """Every returned plan carries the profile's fingerprint (2.4 s at 10^6 layers):
    hashed inside the method's share of the limit, not in the time kept back for
    re-scoring after the method's deadline."""
    import planopt.api as api

    seen: dict[str, bool] = {}
    real_problem = api.Problem

    def problem(**kwargs):
        seen["hashed"] = "fingerprint" in vars(kwargs["profile"])  # a cached_property
        return real_problem(**kwargs)

    monkeypatch.setattr(api, "Problem", problem)
    profile = random_chain(20, seed=0)
    assert "fingerprint" not in vars(profile)
    api.solve(profile, "50%", "greedy", time_limit=100.0)
    assert seen["hashed"]
