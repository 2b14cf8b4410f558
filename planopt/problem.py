"""The request a solver method receives: profile, budget, limits and a metered scorer."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from planopt.plan import Action, Plan
from planopt.profile import Profile
from planopt.runnable import runnable
from planopt.simulate import Scorer, Timing
from planopt.work import SIMULATION_UNITS_PER_LAYER, WorkMeter


class MeteredScorer:
    """`planopt.simulate.Scorer` that charges every simulation to a work meter.

    Methods score candidates through this, so "how much searching was done"
    is counted, not timed: a search stopped by its work limit stops at the
    same candidate on any machine. Everything but the scoring calls is the
    underlying scorer's (the profile's numbers as flat lists).

    A plan that breaks the in-place rule (`planopt.runnable`) is no plan of the
    profile: `score` gives it an infinite makespan and peak, so it fits no
    budget and no search keeps it (it is charged as a simulation all the same).
    """

    def __init__(self, base: Scorer, meter: WorkMeter) -> None:
        self.base = base
        self.meter = meter
        self.cost = base.n * SIMULATION_UNITS_PER_LAYER
        self.rule = base.profile.modifies_inputs  # the in-place rule applies

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def charge(self, simulations: float = 1.0) -> None:
        """Charge `simulations` whole-chain simulations (for scorers of our own)."""
        self.meter.charge(simulations * self.cost)

    def timing(
        self,
        actions: Sequence[Action],
        prefetch_at: Sequence[int | None],
        swap_wait: Sequence[int | None],
        free_copies: Collection[int] = (),
        *,
        stop: Callable[[], bool] | None = None,
    ) -> Timing:
        self.meter.charge(self.cost)
        return self.base.timing(actions, prefetch_at, swap_wait, free_copies, stop=stop)

    def score(
        self,
        actions,
        prefetch_at,
        swap_wait,
        free_copies: Collection[int] = (),
        *,
        stop: Callable[[], bool] | None = None,
        options: Sequence[str | None] | None = None,
    ) -> tuple[float, int]:
        """Charged in full before it runs, so a `stop` (a deadline) never changes the work."""
        self.meter.charge(self.cost)
        if self.rule and not runnable(self.base.profile, actions, options, swap_wait):
            return math.inf, math.inf  # type: ignore[return-value]
        return self.base.score(
            actions, prefetch_at, swap_wait, free_copies, stop=stop, options=options
        )

    def score_plan(self, plan: Plan) -> tuple[float, int]:
        return self.score(plan.actions, plan.prefetch_at, plan.swap_wait, options=plan.options)

    def makespan(
        self, actions, prefetch_at, swap_wait, free_copies: Collection[int] = (), options=None
    ) -> float:
        return self.score(actions, prefetch_at, swap_wait, free_copies, options=options)[0]

    def peak(self, actions, prefetch_at, swap_wait, options=None) -> int:
        return self.score(actions, prefetch_at, swap_wait, options=options)[1]


@dataclass(frozen=True)
class Problem:
    """One solve request.

    Two limits, either or both: `deadline` (a `time.monotonic()` instant,
    from the user's `time_limit`) and the work meter (from `work_limit`,
    see `planopt.work`). Methods score candidates with `scorer`, which
    charges the meter, and stop when `expired()`. With no binding time
    limit, a method's result depends only on its inputs, its seed and its
    work limit.
    """

    profile: Profile
    budget: float
    min_budget: int
    seed: int = 0
    time_limit: float | None = None
    deadline: float | None = field(default=None, compare=False)
    work_limit: float | None = None
    meter: WorkMeter = field(default=None, compare=False)  # type: ignore[assignment]
    base_scorer: Scorer = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.meter is None:
            object.__setattr__(self, "meter", WorkMeter(limit=self.work_limit))
        if self.base_scorer is None:
            object.__setattr__(self, "base_scorer", Scorer(self.profile))

    @property
    def scorer(self) -> MeteredScorer:
        return MeteredScorer(self.base_scorer, self.meter)

    @property
    def n(self) -> int:
        return len(self.profile.layers)

    def fits(self, peak: float) -> bool:
        return peak <= self.budget

    def time_left(self) -> float | None:
        """Seconds until the deadline (never negative), or None without a limit."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def work_left(self) -> float | None:
        """Work units left (never negative), or None without a limit."""
        return self.meter.left()

    def expired(self) -> bool:
        """Out of time or out of work."""
        if self.meter.exhausted():
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    def out_of_time(self) -> bool:
        """Past the deadline (the wall clock only: a check that must not depend on work,
        so a work-limited solve takes the same steps on any machine)."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def share(
        self,
        fraction: float = 1.0,
        *,
        work_cap: float | None = None,
        seconds: float | None = None,
        rate: float | None = None,
    ) -> Problem:
        """The same request limited to `fraction` of the work left (at most `work_cap`)
        and, where given, `seconds` more of wall time (never past the deadline).

        The share's meter charges this one, so the whole solve's work is the
        sum of its parts; `rate` gives the share a method's own rate (see
        `WorkMeter.share`).
        """
        deadline = self.deadline
        if seconds is not None:
            until = time.monotonic() + seconds
            deadline = until if deadline is None else min(deadline, until)
        return replace(self, deadline=deadline, meter=self.meter.share(fraction, work_cap, rate))
