"""The back-end tier: solvers of the plan model (`solvers.model`), one record each.

* `base`: the solve function's shape (`SolveFn`), `BackendResult` with its
  `Status`, and the `Backend` capability record;
* `cpsat`: OR-Tools CP-SAT, natively, in a forked child;
* `linear`: the plan model as a linear MIP (PuLP), shared by `cbc`,
  `highs` (also PuLP-with-HiGHS helpers and work counting) and
  `commercial` (Gurobi, CPLEX);
* `watchdog`: stops solver binaries that overrun their time limit.

`BACKENDS` below is plain data, so listing back-ends imports none of them;
`get` checks a name and says which are valid. Every back-end takes a work
limit (`planopt.work` units) and reports the work it used; with no binding
time limit the ones whose record says `deterministic` return the same
solution on any machine under any load (docs/solvers.md, "Work limits and
determinism").
"""

from __future__ import annotations

from planopt.errors import SolverOptionError
from solvers.backends.base import Backend, BackendResult, SolveFn, Status

# Translating a model, per variable and constraint: CP-SAT 9e-6-2.8e-5 (10-160
# layers), PuLP's linear rows 7.4e-5-1.3e-4 (4-14 layers), on the reference machine.
LINEAR_TRANSLATE_UNITS = 1.2e-4

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            name="cpsat",
            target="solvers.backends.cpsat:solve",
            requires=("ortools",),
            summary="OR-Tools CP-SAT (the default)",
            deterministic_threads=1,
            deterministic_when=(
                "one worker is a sequential search; more workers race, and CP-SAT's "
                "deterministic interleaved mode was up to 650x slower on these models"
            ),
            work="CP-SAT's deterministic time (max_deterministic_time), 3.4 units a second",
            translate_units=2e-5,
            objective_cap=True,
            seed_restarts=True,
        ),
        Backend(
            name="cbc",
            target="solvers.backends.cbc:solve",
            requires=("pulp",),
            summary="COIN-OR CBC, bundled with PuLP",
            deterministic_threads=None,
            deterministic_when="always single-threaded",
            work="nodes (maxNodes) and simplex iterations from its log",
            translate_units=LINEAR_TRANSLATE_UNITS,
            max_threads=1,
        ),
        Backend(
            name="highs",
            target="solvers.backends.highs:solve",
            requires=("highspy", "pulp"),
            summary="HiGHS through PuLP",
            deterministic_threads=None,
            deterministic_when="its MIP search runs single-threaded here",
            work="MIP interrupt callbacks, by model size (interrupted there); LP iterations",
            translate_units=LINEAR_TRANSLATE_UNITS,
            max_threads=1,
        ),
        Backend(
            name="gurobi",
            target="solvers.backends.commercial:solve_gurobi",
            requires=("gurobipy", "pulp"),
            summary="Gurobi through PuLP (untested here)",
            deterministic_threads=None,
            deterministic_when="Gurobi's default deterministic parallel mode (untested here)",
            work="Gurobi work units (WorkLimit), 1:1",
            translate_units=LINEAR_TRANSLATE_UNITS,
        ),
        Backend(
            name="cplex",
            target="solvers.backends.commercial:solve_cplex",
            requires=("cplex", "pulp"),
            summary="CPLEX through PuLP (untested here)",
            deterministic_threads=None,
            deterministic_when="CPLEX's default deterministic parallel mode (untested here)",
            work="CPLEX deterministic ticks (dettimelimit), 1,000 a unit",
            translate_units=LINEAR_TRANSLATE_UNITS,
        ),
    )
}


def get(name: str) -> Backend:
    """The record of back-end `name`; an unknown name lists the valid ones."""
    if name not in BACKENDS:
        raise SolverOptionError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    return BACKENDS[name]


__all__ = ["BACKENDS", "Backend", "BackendResult", "SolveFn", "Status", "get"]
