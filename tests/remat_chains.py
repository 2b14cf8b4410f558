"""Random version-2 chains with every flag drawn, and the checks the recompute-only
tests share: a method's answers against enumeration, a search's against the untargeted one."""

from __future__ import annotations

import math
import random

import pytest

import planopt
from planopt import Status
from planopt.budget import keep_all_peak
from planopt.problem import Problem
from planopt.profile import Device, Layer, Profile
from solvers.remat import minpeak, optimum
from solvers.remat.certify import certify
from solvers.remat.chain import ChainModel
from solvers.remat.labels import LabelSearch
from solvers.remat_dp import solve_certified

DEVICE = Device("dev", 1024.0, 1024.0, 0.0)


def random_v2_chain(seed: int, low: int, high: int) -> Profile:
    """A v2 chain of `low`..`high` layers with every flag drawn, zero times included."""
    rng = random.Random(seed)
    layers = []
    for i in range(rng.randint(low, high)):
        layers.append(
            Layer(
                f"l{i}",
                rng.choice([0.0, 0.5, 1.0, 1.5, 3.0]),
                rng.choice([0.0, 1.0, 2.0]),
                out_bytes=rng.randint(1, 60),
                saved_bytes=rng.choice([0, 0, rng.randint(1, 40)]),
                saves_input=rng.random() < 0.5,
                saves_output=rng.random() < 0.5,
                input_grad_bytes=layers[-1].out_bytes if i else 0,
                param_grad_bytes=rng.choice([0, 0, rng.randint(1, 20)]),
                fwd_work_bytes=rng.choice([0, 0, rng.randint(1, 50)]),
                bwd_work_bytes=rng.choice([0, 0, rng.randint(1, 50)]),
            )
        )
    return Profile(f"random{seed}", DEVICE, rng.randint(0, 100), tuple(layers))


def check_against_enumeration(profile: Profile, scores, budgets) -> None:
    """remat-dp at each budget: infeasible exactly where no enumerated plan fits (the
    message naming the space's exact minimum), else optimal with the fastest one's makespan.
    `scores`: (makespan, peak, actions) of every keep/recompute plan."""
    minimum = min(peak for _, peak, _ in scores)
    for budget in budgets:
        fitting = [m for m, peak, _ in scores if peak <= budget]
        out, _ = solve_certified(Problem(profile, budget, 0))
        if not fitting:
            assert out.status is Status.INFEASIBLE, budget
            assert str(minimum) in out.message, out.message
        else:
            assert out.status is Status.OPTIMAL, budget
            makespan = planopt.simulate(profile, out.plan, budget).makespan
            assert makespan == pytest.approx(min(fitting), rel=1e-9)


def check_against_untargeted(profile: Profile) -> int:
    """`solve_room` from one byte below the space's minimum to keep-all: proven, and the
    optimum of the label search without a target (none below the minimum). Returns how
    many rooms took more than one search (so a test can say its path was taken)."""
    model = ChainModel(profile)
    low = minpeak.min_peak(model).peak - model.static
    keep_all = keep_all_peak(profile) - profile.static_bytes
    more = 0
    for room in [low - 1, low, *(low + (keep_all - low) * k // 6 for k in range(1, 6))]:
        result = optimum.solve_room(model, room)
        assert result.proven, room
        untargeted, _ = LabelSearch(model, room).run(-math.inf, tol=0.0)
        if untargeted is None:
            assert result.found is None and room < low
            continue
        assert result.found is not None
        assert result.found.saved == pytest.approx(untargeted.saved, rel=1e-12, abs=1e-15)
        more += result.searches > 1
    return more


def completions(model: ChainModel, scores, budget: int):
    """What a bound on the layers above a kept layer must cover, by enumeration: for
    every keep/recompute plan within `budget`, its kept layers, the forward time they
    save, and per segment (kept layer, bytes held below it) what the layers above save.
    Yields `(kept, saved, segment, above)`; `scores` as in `check_against_enumeration`."""
    for _, peak, actions in scores:
        if peak > budget:
            continue
        kept = tuple(i for i, a in enumerate(actions) if str(a) == "keep")
        saved = math.fsum(float(model.fwd[i]) for i in kept)
        for segment in certify(model, kept, proven=False, upper_saved=0.0).segments:
            above = math.fsum(float(model.fwd[i]) for i in kept if i > segment.kept)
            yield kept, saved, segment, above
