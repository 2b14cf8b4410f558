"""The starting plans every search and exact method shares: the warm-start portfolio.

The portfolio is the caller's plan (if any), the plan of every registered
*starter* (cheap methods: the baselines and the greedy, see
`MethodSpec.starter`) whose actions lie in the method's space, and the
minimum-memory plan (it fits every budget >= min_budget when every time is
positive). A search starts from the fastest that fits; an exact method
hints its back-end with it and never returns anything slower. Adding a
starter to the registry adds it here with no other edit.

The starters follow one rule in every method (`solvers.starters`): they run
to the end, outside the work limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from planopt import registry
from planopt.budget import min_memory_plan
from planopt.plan import KEEP, RECOMPUTE, Plan
from planopt.problem import Problem
from planopt.registry import Space, in_space
from planopt.result import SolverOutput, Status
from solvers.starters import charge_starters, may_start, starters_problem

# The source of the recompute-only optimum's start (remat-dp's plan).
RECOMPUTE_OPTIMUM = "recompute-only optimum (remat-dp)"


@dataclass(frozen=True)
class Start:
    """A starting plan, where it came from, and its simulated makespan (it fits)."""

    plan: Plan
    source: str
    makespan: float


@dataclass(frozen=True)
class Portfolio:
    """Every fitting start, fastest first (ties: portfolio order), and what the
    greedy said (its message explains a budget nothing fits)."""

    starts: tuple[Start, ...]
    greedy: SolverOutput | None

    @property
    def greedy_stopped(self) -> bool:
        """The greedy ran but a limit stopped it before it finished."""
        return self.greedy is not None and self.greedy.stopped

    @property
    def best(self) -> Start | None:
        return self.starts[0] if self.starts else None

    def plans(self) -> list[Plan]:
        return [s.plan for s in self.starts]

    def no_start(self, method: str) -> SolverOutput:
        """The output of a method that found no start that fits: `no plan found` (a
        heuristic proves nothing; `planopt.solve` adds what the minimum budget is
        known to be), or `timeout` when a limit stopped the greedy first."""
        stopped = self.greedy_stopped
        why = "" if self.greedy is None else f" ({self.greedy.message})"
        return SolverOutput(
            None,
            Status.TIMEOUT if stopped else Status.NO_PLAN,
            message=f"{method}: no starting plan fits the budget{why}",
            stopped=stopped,
        )


def portfolio(
    problem: Problem,
    space: Space | str = Space.JOINT,
    *,
    given: Plan | None = None,
    share: float = 0.5,
    recompute_share: float = 0.0,
) -> Portfolio:
    """The fitting starts of `space` (see the module doc), the starters given `share`
    of the time left between them (their work: `solvers.starters`' rule); with
    `recompute_share` > 0 also the recompute-only optimum (`remat-dp`, on that share
    of what is left after them).

    NOTE: on the biggest nets the greedy alone would take a whole limit
    (GPT-96 at 30%: 5.9 s); a partly-improved greedy plan still fits (the
    greedy keeps it fitting at every step), and the search improves it faster
    than the greedy finishes. The cheap baselines run first, so a starved
    greedy still leaves sqrt-n's plan: on 1,252 layers under load the
    greedy's partial plan was 267% over T_ideal, sqrt-n's far better.
    """
    left = problem.time_left()
    limited = starters_problem(problem, None if left is None else share * left)
    candidates: list[tuple[Plan, str]] = []
    if given is not None:
        candidates.append((given.for_profile(problem.profile), "caller's plan"))
    greedy_out: SolverOutput | None = None
    for name in registry.starters():
        if not may_start(registry.get(name).space, space):
            continue
        if limited.out_of_time():
            # The share's time ran out (10^5 layers: a second or more per starter); the
            # minimum-memory plan below still gives a start when it fits.
            break
        spec = registry.get(name)
        out: SolverOutput = spec.load()(limited)
        if spec.role is registry.Role.HEURISTIC:
            greedy_out = out
        if out.plan is not None:
            label = f"{name} plan" + (" (stopped by its limit)" if out.stopped else "")
            candidates.append((out.plan, label))
    charge_starters(problem, limited)
    starts: list[tuple[float, int, Start]] = []
    pending = list(candidates)

    def score() -> None:
        """Score the pending plans. Under a time limit each batch is scored at once, so
        the steps below can see that a start fits; without one, all at the end (the
        work charged in the same order whatever the machine)."""
        for plan, source in pending:
            if not in_space(plan.actions, space):
                continue
            if starts and problem.out_of_time():
                break  # a start that fits is enough once the time is out (10^5 layers)
            makespan, peak = problem.scorer.score_plan(plan)
            if problem.fits(peak):
                starts.append((makespan, len(starts), Start(plan, source, makespan)))
        pending.clear()

    timed = problem.deadline is not None
    if timed:
        score()
    # NOTE: the minimum-memory plan is the start of last resort and the
    # recompute-only optimum an improvement: past the deadline, with a start
    # that fits already, neither is built (each costs seconds at 10^5 layers).
    if not (starts and problem.out_of_time()):
        pending.append((min_memory_plan(problem.profile), "minimum-memory plan"))
        if timed:
            score()
    if recompute_share > 0 and in_space((KEEP, RECOMPUTE), space) and not problem.out_of_time():
        from solvers.remat_dp import seed_joint

        seeded = seed_joint(problem, share=recompute_share)
        if seeded is not None:
            pending.append((seeded[0], RECOMPUTE_OPTIMUM))
    score()
    starts.sort(key=lambda t: (t[0], t[1]))
    return Portfolio(tuple(s for _, _, s in starts), greedy_out)
