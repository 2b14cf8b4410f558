"""The starters' rule, one for every method: the cheap starts run to the end, outside the limit.

The starters are the registry's cheap methods (the baselines and the
greedy, `MethodSpec.starter`); every search and exact method starts from
them (`solvers.search.starts`' portfolio, `solvers.exact`, `solvers.remat_dp`).

NOTE (why). The starters run to the
end on a work cap of their own (`STARTS_WORK` units, or the work left
where that is more; none without a work limit), even past a smaller work
limit; their work counts in the solve's work but not against its limit,
which bounds what the method does after them: a greedy cut short is not
the greedy, and a method must never return a plan worse
than the starts its description names (lns, "the greedy improved", once
returned 20.5% over T_ideal on gpt-48 at 70% from sqrt-n's plan, because
its half of a 0.5-unit limit stopped the greedy, whose own plan is 6.5%).
So a solve's `work_used` can exceed its work limit by what its starters
used. (Charged against the limit instead, the greedy's 2 units on gpt-48 at
50% left a 0.5-unit blocks no search: 27.4% over T_ideal where the search
from sqrt-n's plan reaches 12.6%.) A time limit
still stops them (the wall-clock guard): then the message says so.
"""

from __future__ import annotations

import time
from dataclasses import replace

from planopt.problem import Problem
from planopt.registry import Space
from planopt.work import WorkMeter

# The starters' own work cap (see the module NOTE); under a time limit they may
# run STARTS_GRACE seconds past it, so that even a tiny limit returns the best
# start (the greedy takes 0.15 s at 162 layers).
STARTS_WORK = 5.0
STARTS_GRACE = 0.5


def starters_problem(problem: Problem, seconds: float | None = None) -> Problem:
    """The starters' request: a work meter of their own (`STARTS_WORK` units, or the
    work left where that is more, unlimited without a work limit; charged to `problem`
    by `charge_starters`) and, under a time limit, `seconds` more (default: until the
    deadline), never less than `STARTS_GRACE` from now."""
    deadline = problem.deadline
    if deadline is not None:
        until = deadline if seconds is None else min(deadline, time.monotonic() + seconds)
        deadline = max(until, time.monotonic() + STARTS_GRACE)
    left = problem.work_left()
    cap = None if left is None else max(STARTS_WORK, left)
    return replace(problem, deadline=deadline, meter=WorkMeter(limit=cap))


def charge_starters(problem: Problem, starters: Problem) -> None:
    """Count what the starters used in the solve's work, outside its limit (see the
    module NOTE): every meter up the chain is charged and its limit moved up alike, so
    the work left for the method is what it was before them."""
    used = starters.meter.used
    meter = problem.meter
    while meter is not None:
        meter.used += used
        if meter.limit is not None:
            meter.limit += used
        meter = meter.parent


def may_start(starter_space: Space, space: Space | str) -> bool:
    """Whether a starter of `starter_space` can give a plan of `space`: a fixed rule may
    happen to; a joint one (the greedy) is run only for the joint space."""
    return Space(space) is Space.JOINT or starter_space in (Space.FIXED, Space(space))
