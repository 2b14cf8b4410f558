"""The exact model under cost model v3 (menus of partial options): against the
simulator and against brute force, on every back-end.

The formulation evaluated on any plan (options included) gives the
simulator's makespan and peak; each back-end's optimum over menus is the
enumerated one (`solvers.brute_force`, which plans over every option).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import v3_plans, v3_profiles

import planopt
from planopt import Status
from planopt.budget import keep_all_peak
from planopt.profile import LayerOption
from solvers.brute_force import enumerate_raw_v3
from solvers.model import build, evaluate
from solvers.model.units import exact_memory

REL = 1e-6


def _model_peak(form, values) -> int:
    """The true level's peak in the model's units (the resource counts it plus
    `memory_offset`, where a negative scratch is stated as its complement)."""
    assert all(iv.demand >= 0 for iv in form.model.intervals)
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
    return peak - form.model.memory_offset


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_model_reproduces_the_simulator_on_v3_chains(data):
    """Menus and a negative backward scratch (12.6) included: the model's level, less
    its offset, peaks where the simulator's does."""
    profile = data.draw(v3_profiles(1, 6))
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


def _scores(profile):
    """(makespan, peak, has an option) of every plan over the menus (the oracle's list)."""
    score = planopt.Scorer(profile).score
    flags = tuple(x.saves_input for x in profile.layers)
    menus = tuple(tuple(o.name for o in x.options) for x in profile.layers)
    out = []
    for acts, pf, wait, opts in enumerate_raw_v3(len(flags), saves_input=flags, menus=menus):
        makespan, peak = score(acts, pf, wait, options=opts)
        out.append((makespan, peak, any(o is not None for o in opts)))
    return out


def _front(scores, count: int):
    """Budgets: below the least peak, and up to `count` points of the (peak, makespan)
    Pareto front, those whose fastest plan takes an option first."""
    front, best = [], math.inf
    for makespan, peak, partial in sorted(scores, key=lambda s: (s[1], s[0], not s[2])):
        if makespan < best:
            front.append((peak, partial))
            best = makespan
    chosen = sorted(front, key=lambda x: not x[1])[:count]
    return [front[0][0] - 1, *sorted(p for p, _ in chosen)]


def _check(scores, budget, sol) -> bool:
    """Whether the optimum at `budget` takes an option (after checking `sol` against it)."""
    fitting = [(t, partial) for t, p, partial in scores if p <= budget]
    if not fitting:
        assert sol.plan is None and sol.status is not Status.OPTIMAL, sol.message
        return False
    assert sol.status is Status.OPTIMAL, (budget, sol.message)
    assert sol.schedule.feasible
    best = min(t for t, _ in fitting)
    assert sol.makespan == pytest.approx(best, rel=REL, abs=1e-12), (budget, sol.plan)
    assert sol.lower_bound <= sol.makespan * (1 + 1e-12)
    return all(partial for t, partial in fitting if t <= best * (1 + REL))


# (back-end, layers, budgets, seed). CBC and HiGHS take seconds per proof on
# these models (no relaxation bound over menus), so they get smaller chains;
# 5 layers and more: enumerating every plan over the menus takes minutes.
CASES = [
    ("cpsat", 3, 4, 0),
    ("cpsat", 3, 4, 1),
    ("cpsat", 4, 4, 0),
    ("cpsat", 4, 4, 1),
    ("highs", 3, 2, 0),
    ("highs", 3, 2, 1),
    ("cbc", 2, 2, 0),
    ("cbc", 2, 2, 3),
]


@pytest.mark.parametrize(("backend", "n", "count", "seed"), CASES)
def test_exact_matches_brute_force_over_menus(backend, n, count, seed):
    profile = _menu_chain(n, seed)
    assert profile.has_options
    scores = _scores(profile)
    partial = False
    for budget in _front(scores, count):
        sol = planopt.solve(profile, budget, "exact", backend=backend, work_limit=30)
        partial |= _check(scores, budget, sol)
    assert partial, "no optimum needs an option: the test would not see one modelled wrong"


@pytest.mark.parametrize("memory", ["reservoir", "both"])
def test_the_reservoir_statement_of_memory_proves_the_same_optimum(memory):
    """experiments/exact_formulations.py's alternatives state the same model: on a small
    /3 chain each proves the enumerated optimum (and nothing below the least peak)."""
    from solvers.backends.cpsat import run_isolated, translate

    profile = _menu_chain(3, 0)
    scores = _scores(profile)
    params = {
        "max_time_in_seconds": None,
        "max_deterministic_time": 30.0,
        "num_workers": 1,
        "random_seed": 0,
        "relative_gap_limit": 0.0,
        "interleave_search": False,
    }
    for budget in _front(scores, 2):
        form = build(profile, budget)
        model, xs = translate(form, None, None, memory=memory)
        code, values, _, _, _ = run_isolated(model, xs, params)
        fitting = [t for t, p, _ in scores if p <= budget]
        if not fitting:
            assert values is None and code == 3  # INFEASIBLE
            continue
        assert code == 4  # OPTIMAL
        plan = form.decode(values.__getitem__)
        assert planopt.simulate(profile, plan).makespan == pytest.approx(min(fitting), rel=REL)
