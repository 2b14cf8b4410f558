"""The relaxation's bound over menus (cost model v3): `lower-bound` plans over them.

Each option is one more action of the relaxation (kept or swapped with it),
as in the exact MIP. Evidence from outside the code under test: on random
`/3` chains (`tests/reference_v3.py`'s generator: menus, signed scratch down
to its floor) every plan is enumerated (`enumerate_raw_v3`, options and
swap waits included) and scored by the independent v3 reference simulator;
the bound (LP and MIP, work-limited) lies between `T_ideal` and that
optimum. On longer chains, where enumeration is out of reach, it lies below
every method's plan. The relaxation that ignored menus gave a bound above
the enumerated optimum on 66 of 425 such cases.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from reference_v3 import plan_v3, random_v3_chain, reference_v3

import planopt
from planopt import Status
from planopt.budget import keep_all_peak
from planopt.io import profile_from_dict
from solvers.brute_force import enumerate_raw_v3
from solvers.model.relaxation import pulp_relaxation_bound
from solvers.model.relaxation_highs import highs_bound

MIP_GAP = 1e-4  # HiGHS's default relative gap: two MIP solves may stop this far apart
WORK = 30.0


def _scored(raw: dict) -> list[tuple[float, int]]:
    """(makespan, peak) of every plan of the chain, by the independent reference."""
    layers = raw["layers"]
    flags = tuple(x["saves_input"] for x in layers)
    menus = tuple(tuple(o["name"] for o in x.get("options", ())) for x in layers)
    plans = enumerate_raw_v3(len(layers), with_swap_wait=True, saves_input=flags, menus=menus)
    out = []
    for plan in plans:
        ref = reference_v3(raw, plan_v3(*plan))
        out.append((ref.makespan, ref.peak_bytes))
    return out


def _cases(count: int, seed: int, high: int = 3):
    rng = random.Random(seed)
    for _ in range(count):
        raw = random_v3_chain(rng, rng.randint(1, high))
        profile = profile_from_dict(raw)
        low = planopt.min_budget(profile)
        budgets = [int(low + rng.random() * 1.1 * (keep_all_peak(profile) - low)) for _ in range(3)]
        yield raw, profile, budgets


def _bound(profile, budget, *, relax: bool) -> float | None:
    return planopt.solve(profile, budget, "lower-bound", relax=relax, work_limit=WORK).lower_bound


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_over_menus_never_exceeds_the_enumerated_optimum(seed):
    for raw, profile, budgets in _cases(12, 7100 + seed):
        scored = _scored(raw)
        for budget in budgets:
            fitting = [t for t, peak in scored if peak <= budget]
            if not fitting:
                continue
            optimum = min(fitting)
            lp = _bound(profile, budget, relax=True)
            mip = _bound(profile, budget, relax=False)
            assert lp is not None and mip is not None
            assert profile.t_ideal <= lp <= mip * (1 + 1e-9)
            assert mip <= optimum * (1 + 1e-9), (raw, budget)


def test_menus_raise_the_bound_above_t_ideal_somewhere():
    """Not a bound that is T_ideal everywhere (a test that cannot fail otherwise)."""
    above = 0
    for _, profile, budgets in _cases(30, 7200):
        for budget in budgets:
            if budget >= planopt.min_budget(profile) and profile.has_options:
                bound = _bound(profile, budget, relax=True)
                above += bound is not None and bound > profile.t_ideal * (1 + 1e-6)
    assert above >= 5


@pytest.mark.parametrize("seed", range(4))
def test_the_highs_rows_are_the_pulp_reference_over_menus(seed):
    """The two builders of the same program: equal LP optima, MIPs within HiGHS's gap."""
    for _, profile, budgets in _cases(10, 7300 + seed, high=8):
        for budget in budgets[:2]:
            for relax in (True, False):
                reference = pulp_relaxation_bound(profile, budget, relax=relax)
                bound, _ = highs_bound(profile, budget, mip=not relax)
                if reference is None:
                    assert bound is None
                    continue
                rel = 1e-7 if relax else 2 * MIP_GAP
                assert bound == pytest.approx(reference, rel=rel)


def _menu_chain(n: int, seed: int) -> planopt.Profile:
    """A random /2 chain whose layers with internals carry a menu of 1-2 options."""
    base = planopt.random_chain(n, seed=seed, family="transformer", version=2)
    layers = []
    for i, x in enumerate(base.layers):
        x = dataclasses.replace(x, saved_bytes=x.saved_bytes or x.out_bytes)
        menu = [planopt.LayerOption("half", x.saved_bytes // 2, x.fwd * 0.3, (0,))]
        if (i + seed) % 2:
            menu.append(planopt.LayerOption("drop", 0, x.fwd * 0.8, ()))
        layers.append(dataclasses.replace(x, options=tuple(menu)))
    return base.replace_layers(layers, name=f"menus-{n}-{seed}")


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("share", [0.6, 0.2])
def test_the_bound_over_menus_is_below_every_methods_plan(seed, share):
    """`share` of the way from the minimum budget to keep-all."""
    profile = _menu_chain(10, seed)
    low = planopt.min_budget(profile)
    budget = int(low + share * (keep_all_peak(profile) - low))
    bound = _bound(profile, budget, relax=False)
    assert bound is not None and bound >= profile.t_ideal
    for method in ("pooch", "remat-dp", "exact", "lns", "blocks", "auto"):
        solution = planopt.solve(profile, budget, method, work_limit=5)
        if solution.status in (Status.FEASIBLE, Status.OPTIMAL):
            assert bound <= solution.makespan * (1 + 1e-9), method
            own = solution.lower_bound
            assert own is None or own <= solution.makespan * (1 + 1e-9), method


def test_lower_bound_plans_over_menus_and_a_negative_scratch():
    """`planopt.lower_bound` and the registered method accept /3 profiles (they refused)."""
    layers = (
        planopt.Layer("a", 0.001, 0.002, 20 << 20, saves_input=True),
        planopt.Layer(
            "b", 0.001, 0.002, 20 << 20, saved_bytes=100 << 20, saves_input=True,
            input_grad_bytes=20 << 20, bwd_work_bytes=-(10 << 20),
            options=(planopt.LayerOption("half", 50 << 20, 0.0005, (0,)),),
        ),
        planopt.Layer("c", 0.001, 0.002, 5 << 20, saves_input=True, input_grad_bytes=20 << 20),
    )  # fmt: skip
    profile = planopt.Profile("v3", planopt.Device("d", 1e10, 1e10), 0, layers)
    bound = planopt.lower_bound(profile, "95%")
    assert bound is not None and profile.t_ideal <= bound
    assert bound <= planopt.solve(profile, "95%", "brute-force").makespan
    solution = planopt.solve(profile, "95%", "lower-bound", work_limit=5)
    assert solution.status is Status.BOUND and solution.lower_bound == pytest.approx(bound)
