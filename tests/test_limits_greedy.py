"""The greedy's time limit reaches inside a simulation (issue 16: at 10^6 layers one
simulation takes seconds, and the deadline was looked at only between them).

No clock is read: the simulator asks a `stop` callable, and the greedy's
problem answers "out of time" after a given number of looks. `STOP_EVERY` is
made small so a short chain is cut at many places.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field

import pytest

import planopt
from planopt import Scorer, simulate
from planopt.budget import min_budget
from planopt.plan import KEEP, RECOMPUTE, SWAP, Plan
from planopt.problem import Problem
from planopt.random_chain import random_chain
from planopt.result import Status
from planopt.simulate import SimulationStopped
from solvers.pooch import pooch
from solvers.scoring import free_copy_makespans


@pytest.fixture
def stop_every_4(monkeypatch):
    """Look at the deadline every 4 layers, in the simulator and in the greedy."""
    # `planopt.simulate` the attribute is the function: take the module itself.
    for module in ("planopt.simulate", "solvers.scoring", "solvers.pooch"):
        monkeypatch.setattr(importlib.import_module(module), "STOP_EVERY", 4)


@dataclass(frozen=True)
class OutOfTimeAfter(Problem):
    """A problem whose time limit passes after `looks` looks at the clock (none read)."""

    looks: int = 10**9
    seen: list = field(default_factory=lambda: [0], compare=False)

    def out_of_time(self) -> bool:
        self.seen[0] += 1
        return self.seen[0] > self.looks

    def expired(self) -> bool:
        return self.meter.exhausted() or self.out_of_time()


class StopAfter:
    """A `stop` that says yes from its `k+1`-th call on, counting its calls."""

    def __init__(self, k: int) -> None:
        self.k, self.calls = k, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls > self.k


def mixed_plan(n: int, seed: int) -> Plan:
    rng = random.Random(seed)
    actions = [rng.choice([KEEP, SWAP, RECOMPUTE]) for _ in range(n)]
    actions[-1] = KEEP
    return Plan.build(actions)


@pytest.mark.usefixtures("stop_every_4")
def test_a_simulation_asks_stop_between_chunks_and_gives_up_when_told():
    profile = random_chain(30, seed=3)
    plan = mixed_plan(30, seed=3)
    scorer = Scorer(profile)
    lists = (plan.actions, plan.prefetch_at, plan.swap_wait)
    never = StopAfter(10**9)
    # Asked, never at the start: 7 chunk ends forward, 7 backward, once before the memory.
    assert scorer.score(*lists, stop=never) == scorer.score(*lists)
    assert never.calls == 7 + 7 + 1
    for k in range(never.calls):
        stop = StopAfter(k)
        with pytest.raises(SimulationStopped):
            scorer.score(*lists, stop=stop)
        assert stop.calls == k + 1  # it stops at the first yes


def test_a_chain_within_one_chunk_never_asks():
    profile = random_chain(30, seed=3)
    plan = mixed_plan(30, seed=3)
    stop = StopAfter(0)  # the limit has passed before the simulation starts
    assert Scorer(profile).score_plan(plan) == Scorer(profile).score(
        plan.actions, plan.prefetch_at, plan.swap_wait, stop=stop
    )
    assert stop.calls == 0


@pytest.mark.usefixtures("stop_every_4")
def test_the_batched_probe_asks_stop_and_gives_up_when_told():
    profile = random_chain(30, seed=4)
    plan = mixed_plan(30, seed=4)
    swaps = [i for i, a in enumerate(plan.actions) if a is SWAP]
    lists = (list(plan.actions), list(plan.prefetch_at), list(plan.swap_wait))
    scorer = Scorer(profile)
    never = StopAfter(10**9)
    makespan, free = free_copy_makespans(scorer, *lists, swaps, stop=never)
    plain_makespan, plain_free = free_copy_makespans(scorer, *lists, swaps)
    assert makespan == plain_makespan and free.tolist() == plain_free.tolist()
    assert never.calls > 2
    with pytest.raises(SimulationStopped):
        free_copy_makespans(scorer, *lists, swaps, stop=StopAfter(1))


@pytest.mark.usefixtures("stop_every_4")
@pytest.mark.parametrize(("seed", "fraction"), [(2, 0.2), (5, 0.5), (7, 0.8)])
def test_the_greedy_cut_at_any_look_returns_its_last_fitting_plan_or_timeout(seed, fraction):
    profile = random_chain(40, seed=seed)
    least = min_budget(profile)
    budget = max(planopt.budget_from_fraction(profile, fraction), least)
    plain = pooch(Problem(profile, budget, least))
    never = OutOfTimeAfter(profile, budget, least)
    full = pooch(never)
    # Looking at the clock (and never being told to stop) changes nothing.
    assert full.plan == plain.plan and full.message == plain.message and not full.stopped
    looks = never.seen[0]
    assert looks > 50  # inside simulations, not only between them
    statuses = set()
    # Every look of the first simulations (where there is no plan yet), then about 80 more.
    for k in sorted(set(range(min(looks, 40))) | set(range(0, looks, max(1, looks // 80)))):
        out = pooch(OutOfTimeAfter(profile, budget, least, looks=k))
        assert out.stopped, k
        statuses.add(out.status)
        if out.status is Status.TIMEOUT:
            assert out.plan is None and "before any plan fitted" in out.message
        else:
            assert out.status is Status.FEASIBLE, (k, out.message)
            assert simulate(profile, out.plan, budget).peak_bytes <= budget, k
    # Cut during the first simulations there is no plan yet; later there always is.
    assert statuses == {Status.TIMEOUT, Status.FEASIBLE}


@pytest.mark.usefixtures("stop_every_4")
def test_the_greedy_cut_in_its_first_simulation_says_timeout():
    profile = random_chain(40, seed=5)
    least = min_budget(profile)
    budget = planopt.budget_from_fraction(profile, 0.5)
    out = pooch(OutOfTimeAfter(profile, budget, least, looks=0))
    assert out.status is Status.TIMEOUT and out.plan is None and out.stopped
    assert "keep-all" in out.message


@pytest.mark.usefixtures("stop_every_4")
@pytest.mark.parametrize("work", [1e-4, 1e-3])
def test_under_a_work_limit_the_clocks_looks_change_nothing(work):
    """A work limit stops the greedy between whole simulations (each charged in full
    before it runs): the looks at the clock inside them, none of which says stop,
    leave the plan and the work spent as they are."""
    profile = random_chain(60, seed=5)
    least = min_budget(profile)
    budget = planopt.budget_from_fraction(profile, 0.4)
    plain = Problem(profile, budget, least, work_limit=work)
    looked = OutOfTimeAfter(profile, budget, least, work_limit=work)
    first, second = pooch(plain), pooch(looked)
    assert first.stopped and "limit reached" in first.message
    assert (first.plan, first.message) == (second.plan, second.message)
    assert plain.meter.used == looked.meter.used
    assert looked.seen[0] > 0
