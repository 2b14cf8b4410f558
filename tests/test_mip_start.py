"""The linear back-ends' warm start is a complete solution, and CBC proves what it is given.

Issue 25, item 3: on the 4-layer v1 chain below, at exactly its minimum
budget, CBC ended `feasible` after 16 work units (2,000 nodes) while CP-SAT
and HiGHS proved the optimum at once. CBC had rejected the warm start: only
the plan model's variables had values, not the linear translation's own
selectors and cover binaries, and CBC then searched without an incumbent.
The optimum is checked against brute force (every plan simulated).
"""

from __future__ import annotations

import pytest

import planopt
from planopt import Status
from planopt.profile import Device, Layer, Profile
from solvers.brute_force import enumerate_raw
from solvers.exact_search import add_objective_floor
from solvers.model import build, evaluate

pulp = pytest.importorskip("pulp")
from solvers.backends.linear import build_lp  # noqa: E402

# (fwd, bwd, saved, fwd_work, bwd_work) of the issue's chain.
ROWS = (
    (0.002012, 0.002675, 291504128, 32505856, 10485760),
    (0.001798, 0.00103, 312475648, 0, 74448896),
    (0.002889, 0.003471, 75497472, 0, 77594624),
    (0.00137, 0.001738, 220200960, 37748736, 76546048),
)
MIN_BUDGET = 1140850688
OPTIMUM = 0.01845052064
# With the complete start CBC proves it in 182 nodes; without, it had not after 2,000
# (16 of its counts). 12 units leave CBC ~300 nodes (`cbc.node_limit`).
WORK = 12.0


def issue_chain() -> Profile:
    return Profile(
        name="issue25-cbc",
        device=Device("link", 2e11, 2e11, 1e-5),
        static_bytes=536870912,
        layers=tuple(Layer.v1(f"l{i}", *row) for i, row in enumerate(ROWS)),
    )


def test_the_chain_is_at_its_minimum_budget_and_brute_force_gives_the_optimum():
    profile = issue_chain()
    assert planopt.min_budget(profile) == MIN_BUDGET
    score = planopt.Scorer(profile).score
    fitting = [m for m, peak in (score(*raw) for raw in enumerate_raw(4)) if peak <= MIN_BUDGET]
    assert min(fitting) == pytest.approx(OPTIMUM, rel=1e-9)


@pytest.mark.parametrize("backend", ["cbc", "highs", "cpsat"])
def test_every_backend_proves_the_optimum_at_the_minimum_budget(backend):
    sol = planopt.solve(issue_chain(), MIN_BUDGET, "exact", backend=backend, work_limit=WORK)
    assert sol.status is Status.OPTIMAL, sol.message
    assert sol.schedule.makespan == pytest.approx(OPTIMUM, rel=1e-9)
    assert sol.lower_bound == pytest.approx(OPTIMUM, rel=1e-6)


def _fitting_plans(profile, budget):
    scorer = planopt.Scorer(profile)
    plans = [planopt.solve(profile, budget, m).plan for m in ("greedy", "exact", "sqrt-n")]
    return [p for p in plans if p is not None and scorer.score_plan(p)[1] <= budget]


@pytest.mark.parametrize("budget_share", [0.0, 0.3, 1.0])
def test_the_linear_start_sets_every_variable_and_meets_every_row(budget_share):
    profile = issue_chain()
    budget = MIN_BUDGET + budget_share * (planopt.keep_all_peak(profile) - MIN_BUDGET)
    plans = _fitting_plans(profile, budget)
    assert plans
    for plan in plans:
        form = build(profile, budget)
        add_objective_floor(form, profile.t_ideal)
        prob, xs = build_lp(form, evaluate(form, form.decisions(plan)))
        unset = [v.name for v in prob.variables() if v.varValue is None]
        assert not unset, f"variables without a start value: {unset[:5]}"
        broken = [name for name, c in prob.constraints.items() if not c.valid(1e-6)]
        assert not broken, f"rows the start violates: {broken[:5]}"
        objective = xs[form.model.objective].varValue * form.times.ticks_per_linear_unit
        assert form.seconds(objective) == pytest.approx(
            planopt.Scorer(profile).score_plan(plan)[0], rel=1e-6
        )
