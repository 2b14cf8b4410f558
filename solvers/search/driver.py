"""Run a method's phases in order, round after round, until nothing improves or limits stop it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from solvers.search.engine import Incumbent

# A phase: a name (for the report) and a function that improves the incumbent
# in place and says whether it did.
Phase = tuple[str, Callable[["Incumbent"], bool]]


@dataclass
class Report:
    """What `search` did, for the result message: rounds, improving phases, work per phase."""

    rounds: int = 0
    improved_by: dict[str, int] = field(default_factory=dict)
    work: dict[str, float] = field(default_factory=dict)
    converged: bool = False

    def note(self, what: str) -> None:
        self.improved_by[what] = self.improved_by.get(what, 0) + 1


def search(inc: Incumbent, phases: Sequence[Phase]) -> Report:
    """Run the phases in order; again until a whole round improves nothing
    (converged) or the limits stop it."""
    report = Report()
    meter = inc.problem.meter
    while not inc.out_of_work():
        report.rounds += 1
        improved = False
        for name, phase in phases:
            if inc.out_of_work():
                break
            began = meter.used
            if phase(inc):
                improved = True
                report.note(name)
            report.work[name] = report.work.get(name, 0.0) + meter.used - began
        if not improved:
            report.converged = not inc.out_of_work()
            break
    return report
