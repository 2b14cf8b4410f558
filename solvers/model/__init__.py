"""The model tier: the formulation IR, the plan model built from it, and the relaxation.

* `ir`: variables, the constraint kinds every back-end translates, `Model`,
  `evaluate` (a plan's implied values, for hints and tests);
* `build`: the plan model of a profile and budget (`Formulation`), one
  module per section: `decisions`, `forward` (and copies out), `copies`
  (the copy-back queue), `backward` (and the recompute blocks), `memory`,
  `cuts` (implied rows);
* `relaxation`: a small MIP over the actions alone whose optimum is a
  proven lower bound (nets of any size); its rows' numbers come from
  `relaxation_coefficients`, read by both builders (`relaxation`, the PuLP
  reference, on top of `relaxation_highs`, which solves the same rows built
  as HiGHS arrays by `relaxation_rows`); over menus (v3) each option is one
  more action column, as in the plan model.

NOTE (units: the one policy, used by the plan model, its linear
translation and the relaxation; `units` is the only code that converts):

* **time** is never in seconds in a solver's rows. The plan model counts
  integer *ticks*, `TIME_RESOLUTION` (1e9) to the chain's horizon (every
  duration serialised). Every duration is rounded to the nearest tick and a
  positive one to at least one tick, so a tensor lives zero time in the
  model exactly when it does in the spec. Rounding moves a plan's makespan
  by at most half a tick per operation (`Formulation.time_error_bound`); the
  caller re-scores plans in floating point and widens bounds by that much.
  Linear rows (the MIP back-ends' translation of the plan model, and the
  relaxation) take time as continuous *linear units*, `LINEAR_HORIZON`
  (1e4) to the horizon: big-Ms of ~1e4 keep an integrality tolerance of
  1e-9 from opening holes (with M = 1e9 ticks a binary at 1e-9 "counts as
  0").
* **memory** is never in raw bytes. The plan model (and so its linear
  translation) counts bytes divided by the gcd of every tensor size: exact
  integers, so "fits" means what it means to the simulator, at the budget
  itself included. The relaxation counts in units of the largest saved
  tensor (coefficients <= 1, capacities O(L)): a bound, which a tolerance
  can only loosen, never make wrong; raw bytes (~1e9) beside times made
  HiGHS return "optima" above a feasible plan.
"""

from solvers.model.build import Formulation, build
from solvers.model.decisions import Choices
from solvers.model.ir import (
    AndEq,
    Clause,
    Define,
    ExactlyOne,
    Expr,
    GeqReify,
    Interval,
    Linear,
    Lit,
    MaxEq,
    Model,
    Var,
    const,
    evaluate,
    neg,
    pos,
    var,
)
from solvers.model.units import LINEAR_HORIZON, TIME_RESOLUTION, TimeScale, time_scale

__all__ = [
    "LINEAR_HORIZON",
    "TIME_RESOLUTION",
    "AndEq",
    "Choices",
    "Clause",
    "Define",
    "ExactlyOne",
    "Expr",
    "Formulation",
    "GeqReify",
    "Interval",
    "Linear",
    "Lit",
    "MaxEq",
    "Model",
    "TimeScale",
    "Var",
    "build",
    "const",
    "evaluate",
    "neg",
    "pos",
    "time_scale",
    "var",
]
