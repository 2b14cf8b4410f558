"""Method "auto": which planner it picks, that it says so, and its contract."""

from __future__ import annotations

import pytest

import planopt
from planopt import Status, random_chain, repeated_chain
from planopt.errors import SolverOptionError
from planopt.problem import Problem
from solvers.auto import choose


def _repeated(seed: int, k: int):
    base = random_chain(5, seed=seed, family="uniform")
    layers = base.layers
    return base.replace_layers(repeated_chain(layers[1:4], k, layers[:1], layers[4:]))


def _problem(profile):
    return Problem(profile, planopt.keep_all_peak(profile), planopt.min_budget(profile))


def test_choose():
    assert choose(_problem(random_chain(10, seed=1)), 12, 0.05)[0] == "exact"
    assert choose(_problem(_repeated(1, 10)), 12, 0.05)[0] == "blocks"
    assert choose(_problem(random_chain(40, seed=1, family="uniform")), 12, 0.05)[0] == "lns"
    assert choose(_problem(random_chain(10, seed=1)), 0, 0.05)[0] in ("blocks", "lns")
    # repeats covering too little of the chain do not make it "blocks"
    base = random_chain(40, seed=2, family="uniform")
    mostly_random = base.replace_layers(repeated_chain(base.layers[:2], 2, (), base.layers[2:]))
    method, why, _ = choose(_problem(mostly_random), 12, 0.05)
    assert method == "lns" and "cover only" in why


def test_small_nets_are_solved_exactly():
    profile = random_chain(8, seed=3)
    low = planopt.min_budget(profile)
    budget = int(low + 0.3 * (planopt.keep_all_peak(profile) - low))  # whole bytes
    sol = planopt.solve(profile, budget, "auto", work_limit=30)
    exact = planopt.solve(profile, budget, "exact", work_limit=30)
    assert sol.message.startswith("auto: used exact")
    assert sol.status is Status.OPTIMAL
    assert sol.makespan == pytest.approx(exact.makespan, rel=1e-9)


@pytest.mark.parametrize(
    ("profile", "used"),
    [
        (_repeated(2, 10), "blocks"),
        (random_chain(40, seed=5, family="uniform"), "lns"),
        (random_chain(120, seed=6), None),
    ],
    ids=["repeated", "random", "mixed"],
)
@pytest.mark.parametrize("fraction", [0.6, 0.35])
def test_auto_reports_its_choice_and_a_bound(profile, used, fraction):
    budget = max(planopt.budget_from_fraction(profile, fraction), planopt.min_budget(profile))
    greedy = planopt.solve(profile, budget, "greedy")
    sol = planopt.solve(profile, budget, "auto", work_limit=1.0, window=4)
    if used is not None:
        assert sol.message.startswith(f"auto: used {used}")
    assert sol.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert planopt.simulate(profile, sol.plan, budget).feasible
    assert sol.makespan <= greedy.makespan
    assert sol.lower_bound is not None
    assert profile.t_ideal <= sol.lower_bound <= sol.makespan * (1 + 1e-9)


def test_auto_below_the_minimum_budget_is_infeasible():
    profile = random_chain(30, seed=1)
    sol = planopt.solve(profile, planopt.min_budget(profile) - 1, "auto")
    assert sol.status is Status.INFEASIBLE and sol.plan is None


def test_auto_options_are_checked():
    profile = random_chain(30, seed=1)
    with pytest.raises(SolverOptionError, match="exact_layers"):
        planopt.solve(profile, "50%", "auto", exact_layers=-1)
    with pytest.raises(SolverOptionError, match="must be one of"):
        planopt.solve(profile, "50%", "auto", nonsense=1)


def test_the_new_methods_are_registered():
    from planopt import registry

    for name in ("blocks", "lns", "auto"):
        assert name in registry.available()
        assert "window_work" in registry.get(name).options()
