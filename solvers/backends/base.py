"""What every back-end promises: one solve function shape, one result, one capability record.

A back-end solves a `solvers.model.Formulation` and reads the values of all
its variables back; it knows nothing of plans, budgets or the exact
method's short cuts (`solvers.exact`). Its `Backend` record says what it
can do, so callers ask the record instead of comparing names.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from planopt.errors import SolverUnavailableError

if TYPE_CHECKING:
    from planopt.work import WorkMeter
    from solvers.model import Formulation


class Status(StrEnum):
    """What a back-end's solve ended with."""

    OPTIMAL = "optimal"  # proven optimal (within the relative gap asked for)
    FEASIBLE = "feasible"  # a solution, no proof (a limit stopped it)
    INFEASIBLE = "infeasible"  # proven: no solution
    UNKNOWN = "unknown"  # a limit stopped it before any solution

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class BackendResult:
    """What a back-end found: status, every variable's value, objective and bound (ticks),
    the work it spent (`planopt.work` units), and a note for the user (how it
    stopped, why its answer may vary between runs)."""

    status: Status
    values: list[int] | None = None
    objective: float | None = None
    bound: float | None = None
    work_used: float = 0.0
    note: str = ""

    @property
    def has_solution(self) -> bool:
        return self.values is not None


class SolveFn(Protocol):
    """A back-end's solve. `time_limit` (seconds) and `work_limit` (work units,
    `planopt.work`) are both optional; `objective_at_most` caps the objective
    (ticks) where the back-end's record says it can; `relative_gap` stops at a
    solution proven within it (1.0: at the first solution). `meter`, when
    given, is charged the work used."""

    def __call__(
        self,
        form: Formulation,
        *,
        time_limit: float | None,
        work_limit: float | None,
        threads: int,
        seed: int,
        hint: Sequence[int] | None,
        objective_at_most: int | None = None,
        relative_gap: float = 0.0,
        meter: WorkMeter | None = None,
    ) -> BackendResult: ...


@dataclass(frozen=True)
class Backend:
    """A back-end's capabilities (plain data: nothing heavy is imported to read it).

    `deterministic_threads`: up to how many threads the back-end promises the
    same solution for the same model, hint, seed and work limit on any
    machine under any load, as long as no time limit binds (0: never; None:
    any thread count); `deterministic_when` says it in words. `max_threads`:
    the most threads it will use (None: as asked). `objective_cap`: it takes
    `objective_at_most`. `seed_restarts`: the exact method restarts it in work
    slices with the next seed (its time to proof is heavy-tailed in the seed).
    `work`: what it counts as work, and the rate. `translate_units`: work
    units per model variable and constraint to translate a model for it
    (charged by the caller: the solver's own count starts after it).
    """

    name: str
    target: str
    requires: tuple[str, ...]
    summary: str
    deterministic_threads: int | None
    deterministic_when: str
    work: str
    translate_units: float
    max_threads: int | None = None
    objective_cap: bool = False
    seed_restarts: bool = False

    def is_available(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.requires)

    def load(self) -> SolveFn:
        """The solve function; a missing package is named in the error."""
        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        if missing:
            raise SolverUnavailableError(
                f"backend {self.name!r} needs the package {missing[0]!r}, which is not installed"
            )
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def threads_used(self, threads: int) -> int:
        return threads if self.max_threads is None else min(threads, self.max_threads)

    def deterministic(self, threads: int) -> bool:
        """Whether a work-limited solve on `threads` threads is the same on any machine."""
        if self.deterministic_threads is None:
            return True
        return self.threads_used(threads) <= self.deterministic_threads

    def caveat(self, threads: int) -> str:
        """What the result message says when the solve is not deterministic ('' if it is)."""
        if self.deterministic(threads):
            return ""
        used = self.threads_used(threads)
        return f"{self.name} races {used} threads: the plan may vary between runs"
