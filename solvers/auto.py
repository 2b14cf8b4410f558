"""Method "auto": pick the planner that fits the net, say which, and give a bound.

* `exact` when the net has at most `exact_layers` layers (default 12: such
  chains are proven in well under a unit of work; at 16 layers some random
  v2 chains stay unproven after 30 units, experiments/results/exact_time.md);
* `blocks` when `planopt.find_blocks` finds repeated blocks covering at
  least half of the layers;
* `lns` otherwise (the greedy improved by layer moves, kicks and exact
  windows).

Every path starts from (or warm-starts with) the greedy's plan, so the
result is never worse than the greedy. The lower bound is the exact
solver's where it ran, else the LP relaxation's (`planopt.lower_bound`).
"""

from __future__ import annotations

from dataclasses import replace

from planopt.blocks import BlockStructure, find_blocks
from planopt.errors import SolverOptionError
from planopt.problem import Problem
from planopt.result import SolverOutput
from planopt.work import method_rate
from solvers.blocks import plan_blocks, structure_stop
from solvers.lns import WINDOW_WORK, check_options, lns

DEFAULT_EXACT_LAYERS = 12
BLOCK_COVERAGE = 0.5  # repeats must cover this share of the layers for "blocks"


def choose(
    problem: Problem, exact_layers: int, rtol: float
) -> tuple[str, str, BlockStructure | None]:
    """The method auto uses for `problem`, why (one line), and the repeats it found."""
    n = problem.n
    if n <= exact_layers:
        return "exact", f"{n} layers <= exact_layers={exact_layers}", None
    structure = find_blocks(problem.profile, rtol=rtol, stop=structure_stop(problem))
    if structure.covered >= BLOCK_COVERAGE * n:
        why = f"repeated blocks {structure.summary()} cover {structure.covered}/{n}"
        return "blocks", why, structure
    if structure.found:
        why = f"repeats {structure.summary()} cover only {structure.covered}/{n} layers"
    else:
        why = "no repeated blocks"
    return "lns", f"{n} layers, {why}", structure


def auto(
    problem: Problem,
    *,
    exact_layers: int = DEFAULT_EXACT_LAYERS,
    threads: int = 2,
    rtol: float = 0.05,
    window: int = 8,
    window_work: float = WINDOW_WORK,
) -> SolverOutput:
    """Exact for small nets, blocks for repeated ones, lns otherwise (see the module doc)."""
    if isinstance(exact_layers, bool) or not isinstance(exact_layers, int) or exact_layers < 0:
        raise SolverOptionError(f"exact_layers must be an integer >= 0, got {exact_layers!r}")
    method, why, structure = choose(problem, exact_layers, rtol)
    # The work is counted at the rate of the method that does it (planopt.work).
    problem.meter.rebase(method_rate(method, problem.n))
    if method == "exact":
        from solvers.exact import solve_exact

        out = solve_exact(problem, threads=threads, max_layers=max(exact_layers, 1))
    elif method == "blocks":
        assert structure is not None
        # the structure `choose` found, not a second search for it (seconds at 10^5 layers)
        window, window_work = check_options(window, window_work)
        out = plan_blocks(problem, structure, window, window_work)
    else:
        out = lns(problem, window=window, window_work=window_work)
    return replace(out, message=f"auto: used {method} ({why}); {out.message}")
