"""The request a solver method receives: profile, budget, limits and a shared scorer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

from planopt.profile import Profile
from planopt.simulate import Scorer


@dataclass(frozen=True)
class Problem:
    """One solve request. `deadline` is a `time.monotonic()` instant or None.

    Methods read the budget and limits from here, score candidates with
    `scorer` (the one cost model) and stop when `expired()`.
    """

    profile: Profile
    budget: float
    min_budget: int
    seed: int = 0
    time_limit: float | None = None
    deadline: float | None = field(default=None, compare=False)

    @cached_property
    def scorer(self) -> Scorer:
        return Scorer(self.profile)

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

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline
