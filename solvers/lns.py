"""Method "lns": the best starting plan improved by layer moves, exact windows and kicks.

The exact model does not scale to hundreds of layers and the greedy has no
quality guarantee, so big nets are planned by improving a starting plan
(the fastest of the warm-start portfolio, `solvers.search.starts`) with the
search tier's neighbourhoods: single-layer and pair moves
(`solvers.search.moves`), exact windows (`solvers.search.windows`) and
kicks. Every candidate is a whole-chain plan scored by the simulator and
taken only when it fits the budget and is faster, so the result is never
worse than the start.

The starters run to the end first (their own work cap, outside the work
limit: `solvers.starters`), so a work limit bounds the search after them.
The search stops when a round improves nothing, or at the work or time
limit; with neither it stops after `DEFAULT_WORK` units. Its path is
deterministic (fixed move order, single-threaded CP-SAT windows with
deterministic time, seeded with the problem's seed), so with a work limit
and no binding time limit the plan is the same on any machine.
"""

from __future__ import annotations

from planopt.certificate import Certificate
from planopt.errors import SolverOptionError
from planopt.problem import Problem
from planopt.result import SolverOutput, Status
from solvers.search.bounds import relaxation_lower_bound
from solvers.search.driver import Phase, Report, search
from solvers.search.engine import Incumbent
from solvers.search.moves import kick_phase, layer_level, level_phases
from solvers.search.starts import Portfolio, Start, portfolio
from solvers.search.windows import sliding_windows, window_phase
from solvers.starters import STARTS_WORK

# The search's work when the problem has neither a work nor a time limit (it
# stops earlier when converged): about a minute on the reference machine.
DEFAULT_WORK = 60.0
# The work one exact window may use by default (CP-SAT deterministic time).
WINDOW_WORK = 2.0
# The recompute-only optimum (remat-dp) joins the starts on this share of what
# the starters leave: an upper bound on the joint optimum, often a good one
# (resnet50-ops at 30%: blocks 16.8% over T_ideal from sqrt-n's plan, 14.9%
# from it, at 3 work units). On transformer chains the DP takes longer than
# the share (GPT-48 at 30%: 54 units) and gives no start.
RECOMPUTE_SHARE = 0.15


def check_options(window: int, window_work: float) -> tuple[int, float]:
    """Validate the options the search methods share."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise SolverOptionError(
            f"window must be an integer >= 0 (layers; 0: no exact windows), got {window!r}"
        )
    if (
        isinstance(window_work, bool)
        or not isinstance(window_work, int | float)
        or not window_work > 0
    ):
        raise SolverOptionError(
            f"window_work must be a number of work units > 0, got {window_work!r}"
        )
    return window, float(window_work)


def bounded(problem: Problem) -> Problem:
    """`problem` itself when it has a limit, else limited to `DEFAULT_WORK` units
    (an anytime search needs some end, and a work end keeps it deterministic)."""
    if problem.work_limit is not None or problem.deadline is not None:
        return problem
    return problem.share(1.0, work_cap=problem.meter.raw(DEFAULT_WORK))


def layer_phases(n: int, window: int, window_work: float) -> list[Phase]:
    """The phases of the plain layer search (no repeated blocks)."""
    level = layer_level(n)
    phases = level_phases(level)
    if window:
        phases.append(window_phase(lambda size: sliding_windows(n, size), window, n, window_work))
    return [*phases, kick_phase(level)]


def finish(
    name: str,
    inc: Incumbent,
    starts: Portfolio,
    report: Report,
    bound: tuple[float | None, Certificate] | None,
    detail: str,
    *,
    start: Start | None = None,
) -> SolverOutput:
    """The method's output: the incumbent (it fits: it started from a plan that fits,
    the fastest start, so it is never slower than any of them). The message names
    the start, and says when the greedy did not finish (then the plan may be slower
    than the greedy's would have been) or no work was left for the search."""
    start = start or starts.best
    assert start is not None
    moves = ", ".join(f"{k} {v}" for k, v in report.improved_by.items()) or "none"
    if report.converged:
        state = "converged"
    elif report.rounds == 0:
        state = "no work left for a search"
    else:
        state = "stopped by the limit"
    message = (
        f"{name}: {detail}; from the {start.source}, {report.rounds} rounds ({state}), "
        f"{inc.evals} simulations, {inc.windows} exact windows; improving moves: {moves}"
    )
    if starts.greedy_stopped:
        message += (
            "; the greedy did not finish (stopped by the time limit or the starters' work "
            f"cap, {STARTS_WORK:g} units or the limit), so the plan may be slower than the "
            "greedy's"
        )
    lower, certificate = (None, None) if bound is None else bound
    return SolverOutput(
        inc.plan(),
        Status.FEASIBLE,
        lower,
        message,
        stopped=not report.converged,
        certificate=certificate,
    )


def lns(
    problem: Problem,
    *,
    window: int = 8,
    window_work: float = WINDOW_WORK,
    lower_bound: bool = True,
) -> SolverOutput:
    """The best start improved by layer moves, kicks and exact windows of `window` layers.

    `window=0` turns the exact windows off; `window_work` is the work one
    window may use; `lower_bound` reports the LP relaxation's bound.
    """
    window, window_work = check_options(window, window_work)
    problem = bounded(problem)
    window_work = problem.meter.raw(window_work)
    bound = relaxation_lower_bound(problem) if lower_bound else None
    starts = portfolio(problem, recompute_share=RECOMPUTE_SHARE)
    if starts.best is None:
        return starts.no_start("lns")
    inc = Incumbent(problem, starts.best.plan)
    report = search(inc, layer_phases(problem.n, window, window_work))
    return finish("lns", inc, starts, report, bound, f"{problem.n} layers")
