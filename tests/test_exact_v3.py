"""The exact model under cost model v3 (menus of partial options): against the
simulator and against brute force, on every back-end.

The formulation evaluated on any plan (options included) gives the
simulator's makespan and peak; each back-end's optimum over menus is the
enumerated one (`solvers.brute_force`, which plans over every option).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import v3_plans, v3_profiles

import planopt
from planopt import Status
from planopt.budget import keep_all_peak, min_budget
from planopt.profile import LayerOption
from solvers.model import build, evaluate
from solvers.model.units import exact_memory

REL = 1e-6


def _model_peak(form, values) -> int:
    events = []
    for iv in form.model.intervals:
        present = iv.present is None or bool(values[iv.present[0]]) == iv.present[1]
        start, end = values[iv.start], values[iv.end]
        if present and end > start:
            events += [(start, 0 if iv.demand < 0 else 1, iv.demand), (end, 0, -iv.demand)]
    level = peak = 0
    for _, _, delta in sorted(events):
        level += delta
        peak = max(peak, level)
    return peak


def _unsigned(profile):
    """The profile with a negative backward scratch raised to 0."""
    return profile.replace_layers(
        [dataclasses.replace(x, bwd_work_bytes=max(0, x.bwd_work_bytes)) for x in profile.layers]
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_model_reproduces_the_simulator_on_v3_chains(data):
    profile = _unsigned(data.draw(v3_profiles(1, 6)))
    plan = data.draw(v3_plans(profile))
    form = build(profile, budget=keep_all_peak(profile) * 2 + 1)
    assert form.allows(plan)
    values = evaluate(form, form.decisions(plan))
    assert form.decode(lambda v: values[v]).options == plan.options
    schedule = planopt.simulate(profile, plan)
    makespan = form.seconds(values[form.model.objective])
    assert abs(makespan - schedule.makespan) <= form.time_error_bound() + 1e-12
    peak = _model_peak(form, values)
    assert profile.static_bytes + peak * exact_memory(profile).unit == schedule.peak_bytes


def _menu_chain(n: int, seed: int) -> planopt.Profile:
    """A random /2 chain whose layers with internals get a menu of 1-2 options."""
    base = planopt.random_chain(n, seed=seed, family="mixed", version=2)
    layers = []
    for i, x in enumerate(base.layers):
        if (i + seed) % 3 == 2:
            layers.append(x)
            continue
        x = dataclasses.replace(x, saved_bytes=x.saved_bytes or x.out_bytes)
        menu = [LayerOption("half", x.saved_bytes // 2, x.fwd * 0.4, (0,))]
        if (i + seed) % 2:
            menu.append(LayerOption("drop-all", 0, x.fwd * 0.9, (), x.fwd_work_bytes // 2))
        layers.append(dataclasses.replace(x, options=tuple(menu)))
    return base.replace_layers(layers, name=f"menus-{n}-{seed}")


def _budgets(profile):
    """Budgets from below the minimum budget (nothing fits) to near keep-all."""
    low, full = min_budget(profile), keep_all_peak(profile)
    return [low - 1, *(low + int(f * (full - low)) for f in (0.0, 0.15, 0.3, 0.6))]


def _check(profile, budget, sol, oracle, used: list):
    if oracle.status is Status.INFEASIBLE:
        assert sol.plan is None and sol.status is not Status.OPTIMAL, sol.message
        return
    assert sol.status is Status.OPTIMAL, (budget, sol.message)
    assert sol.schedule.feasible
    assert sol.makespan == pytest.approx(oracle.makespan, rel=REL, abs=1e-12), (budget, sol.plan)
    assert sol.lower_bound <= sol.makespan * (1 + 1e-12)
    used.append(oracle.plan.has_options)


@pytest.mark.parametrize("backend", ["cpsat", "cbc", "highs"])
@pytest.mark.parametrize("seed", range(3))
def test_exact_matches_brute_force_over_menus(backend, seed):
    n = 3 + seed if backend == "cpsat" else 3
    profile = _menu_chain(n, seed)
    assert profile.has_options
    used: list[bool] = []
    for budget in _budgets(profile):
        oracle = planopt.solve(profile, budget, "brute-force")
        sol = planopt.solve(profile, budget, "exact", backend=backend, work_limit=60)
        _check(profile, budget, sol, oracle, used)
    assert any(used), "no optimum took an option: the test would not see one modelled wrong"
