"""What a solve returns: a status enum and a `Solution` carrying bounds."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from planopt.certificate import Certificate
from planopt.plan import Plan
from planopt.schedule import Schedule


class Status(StrEnum):
    """Outcome of a solve.

    `optimal`: proven optimal under the cost model; `feasible`: a plan that
    fits the budget without proof of optimality (heuristics, or an exact
    solve stopped by its limit: its best plan and its bound);
    `infeasible`: *proven*: no plan of the method's space fits (below
    `min_budget` no plan at all; a fixed baseline's space is its one plan,
    `remat-dp`'s the keep/recompute plans); `no plan found`: a heuristic
    found none, which proves nothing (the message gives what the minimum
    budget is known to be); `timeout`: the time (or work) limit passed
    before any plan was found; `bound`: a bound-only method (role `bound`)
    proved `lower_bound` and returns no plan.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    NO_PLAN = "no plan found"
    TIMEOUT = "timeout"
    BOUND = "bound"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SolverOutput:
    """What a registered method hands back to `planopt.solve` before re-scoring.

    `stopped` says the method's time or work limit ended it before it
    finished (its plan is the best so far), so callers need not read the
    message to know. `certificate` says where `lower_bound` came from
    (`planopt.certificate`), where the method knows.
    """

    plan: Plan | None
    status: Status
    lower_bound: float | None = None
    message: str = ""
    stopped: bool = False
    certificate: Certificate | None = None


@dataclass(frozen=True)
class Solution:
    """A plan with its simulated schedule, status and (where known) a lower bound.

    `schedule` is always the simulator's, never a solver's own estimate.
    `gap` is `(makespan - lower_bound) / makespan` where both are known.
    `work_used` is the deterministic work the method spent (`planopt.work`).
    `bound_provenance` says where `lower_bound` came from (which relaxation,
    solved to the end or cut short, what it cost), so a large gap can be
    read as a weak plan or a weak certificate.
    `min_budget_exact` says whether `min_budget` is the smallest budget any
    plan meets (True) or only a proven lower bound (False: the
    minimum-memory plan needs `min_budget_upper`, so the minimum lies
    between); it is worked out when the solve returns no plan (one
    simulation), else None.
    """

    plan: Plan | None
    schedule: Schedule | None
    status: Status
    method: str
    budget: float
    lower_bound: float | None
    solve_seconds: float
    min_budget: int
    message: str = ""
    work_limit: float | None = None
    work_used: float = 0.0
    bound_provenance: Certificate | None = None
    min_budget_exact: bool | None = None
    min_budget_upper: int | None = None

    @property
    def makespan(self) -> float | None:
        return None if self.schedule is None else self.schedule.makespan

    @property
    def gap(self) -> float | None:
        if self.schedule is None or self.lower_bound is None or self.schedule.makespan <= 0:
            return None
        return max(0.0, (self.schedule.makespan - self.lower_bound) / self.schedule.makespan)

    def to_dict(self) -> dict:
        """The `--json` shape of `planopt solve`."""
        out = {
            "status": self.status.value,
            "method": self.method,
            "budget": self.budget,
            "min_budget": self.min_budget,
            "min_budget_exact": self.min_budget_exact,
            "min_budget_upper": self.min_budget_upper,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "solve_seconds": self.solve_seconds,
            "work_limit": self.work_limit,
            "work_used": self.work_used,
            "bound_provenance": (
                None if self.bound_provenance is None else self.bound_provenance.to_dict()
            ),
            "message": self.message,
        }
        if self.schedule is not None:
            out.update(self.schedule.to_dict())
        else:
            out.update({"time": None, "peak_bytes": None, "feasible": False, "overhead": None})
        return out
