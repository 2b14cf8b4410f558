"""Bank instances, the bank's JSON file, and the checks a method of each role must pass."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from planopt.api import solve
from planopt.io import profile_from_dict
from planopt.profile import Profile
from planopt.registry import Role, Space, get
from planopt.result import Status
from planopt.simulate import simulate

BANK_FILE = "bank.json"
# Optima are compared to this relative tolerance (exact methods round time to
# ticks of ~1e-9 of the horizon and prove within 5e-7).
REL = 1e-6


@dataclass(frozen=True)
class Instance:
    """A profile, a budget and the optimum of each plan space (None: nothing fits)."""

    name: str
    profile: Profile
    budget: int
    optimum: dict[Space, float | None]
    source: str
    why: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Instance:
        return cls(
            name=data["name"],
            profile=profile_from_dict(data["profile"]),
            budget=int(data["budget"]),
            optimum={Space(k): v for k, v in data["optimum"].items()},
            source=data["source"],
            why=data.get("why", ""),
        )

    def optimum_of(self, space: Space) -> float | None:
        """The optimum a method of `space` competes with (fixed plans: the joint one)."""
        return self.optimum[Space.JOINT if space is Space.FIXED else space]


def _fits(sol) -> bool:
    return sol.plan is not None and sol.schedule.feasible


@cache
def load_bank() -> tuple[Instance, ...]:
    """Every instance of the bank shipped with planopt, in file order."""
    text = resources.files("planopt.testing").joinpath(BANK_FILE).read_text(encoding="utf-8")
    return tuple(Instance.from_dict(row) for row in json.loads(text)["instances"])


def check_method(
    method: str, instance: Instance, *, work_limit: float = 5.0, **options: Any
) -> list[str]:
    """What `method` got wrong on `instance` (empty: nothing). Every plan is re-scored.

    * every method: a plan it returns is re-scored by the simulator; `optimal`
      only when it is the optimum of the method's space; `infeasible` never
      when a plan of its space fits, except for baselines (a rule may miss);
    * exact and oracle: the optimum of their space, or `infeasible` exactly
      when their space has no plan;
    * heuristic: a fitting plan whenever its space has one, never faster
      than the optimum, any bound it reports at most the optimum;
    * baseline: any plan it returns fits and is never faster than the optimum;
    * bound: a bound at most the joint optimum; `infeasible` only when no plan fits.
    """
    spec = get(method)
    optimum = instance.optimum_of(spec.space)
    joint = instance.optimum[Space.JOINT]
    sol = solve(instance.profile, instance.budget, method, work_limit=work_limit, **options)
    problems: list[str] = []

    def fail(what: str) -> None:
        problems.append(f"{method} on {instance.name}: {what} ({sol.status}: {sol.message})")

    if sol.plan is not None:
        schedule = simulate(instance.profile, sol.plan, instance.budget)
        if not math.isclose(schedule.makespan, sol.makespan, rel_tol=1e-12):
            fail(f"reported makespan {sol.makespan} is not the simulator's {schedule.makespan}")
        if sol.status in (Status.OPTIMAL, Status.FEASIBLE) and not schedule.feasible:
            fail(f"plan peak {schedule.peak_bytes} exceeds the budget {instance.budget}")
        if optimum is not None and schedule.feasible:
            if schedule.makespan < optimum * (1 - REL):
                fail(f"makespan {schedule.makespan} beats the proven optimum {optimum}")
            if sol.status is Status.OPTIMAL and schedule.makespan > optimum * (1 + REL):
                fail(f"claims optimal at {schedule.makespan}, the optimum is {optimum}")
    own = optimum if optimum is not None else joint
    bounded = sol.lower_bound is not None and own is not None and spec.role is not Role.BASELINE
    if bounded and sol.lower_bound > own * (1 + REL):
        fail(f"lower bound {sol.lower_bound} is above the optimum {own}")
    if spec.role is Role.BOUND:
        if (sol.status is Status.INFEASIBLE) != (joint is None):
            fail(f"says {sol.status} where the joint optimum is {joint}")
    elif spec.role in (Role.EXACT, Role.ORACLE):
        if optimum is None and sol.status is not Status.INFEASIBLE:
            fail("no plan of its space fits, yet it did not say infeasible")
        if optimum is not None and sol.status is not Status.OPTIMAL:
            fail(f"the optimum {optimum} is not proven")
    elif spec.role is Role.HEURISTIC and optimum is not None and not _fits(sol):
        fail(f"no fitting plan although one exists (optimum {optimum})")
    if sol.status is Status.INFEASIBLE and optimum is not None and spec.role is not Role.BASELINE:
        fail(f"says infeasible although a plan of its space fits (optimum {optimum})")
    return problems
