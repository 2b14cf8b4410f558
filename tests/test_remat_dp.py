"""remat-dp (the recompute-only DP) against the simulator, brute force and the MIP.

The truths are outside the code under test: `planopt.simulate` scores every
plan, `solvers.brute_force.enumerate_raw` lists every plan of a small chain
(the plans without a swap are the recompute-only space), and the MIP's
`recompute-only` method proves optima on version-1 chains (the exact model
does not read version 2 yet).
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from remat_chains import random_v2_chain

import planopt
from planopt import Status
from planopt.budget import keep_all_peak, min_budget, space_min_budget
from planopt.limits import MAX_TOTAL_BYTES
from planopt.plan import SWAP, Plan
from planopt.problem import Problem
from planopt.profile import Device, Layer, Profile
from solvers.brute_force import enumerate_raw
from solvers.remat.certify import certify
from solvers.remat.chain import ChainModel
from solvers.remat.minpeak import min_peak
from solvers.remat_dp import seed_joint, solve_certified

REL = 1e-9
DEVICE = Device("dev", 1024.0, 1024.0, 0.0)

# -- a small strategy for realistic v2 chains ------------------------------------------

# (saves_input, saves_output, internals, parameter gradients) by kind of layer
KINDS = {
    "conv": (True, False, False, True),
    "linear": (True, False, False, True),
    "norm": (True, False, True, True),
    "relu": (False, True, False, False),
    "softmax": (False, True, False, False),
    "dropout": (False, False, True, False),
    "add": (False, False, False, False),
}
_TIME = st.one_of(st.just(0.0), st.integers(1, 16).map(lambda k: k / 8))


@st.composite
def v2_chains(draw, min_layers: int = 1, max_layers: int = 6) -> Profile:
    """A chain with the flag mix of real nets; times dyadic (exact sums), some zero."""
    n = draw(st.integers(min_layers, max_layers))
    layers: list[Layer] = []
    for i in range(n):
        kind = draw(st.sampled_from(sorted(KINDS)))
        saves_in, saves_out, internals, params = KINDS[kind]
        out = draw(st.integers(0, 40))
        layers.append(
            Layer(
                name=f"{kind}{i}",
                fwd=draw(_TIME),
                bwd=draw(_TIME),
                out_bytes=out,
                saved_bytes=draw(st.integers(1, 30)) if internals else 0,
                saves_input=saves_in,
                saves_output=saves_out,
                input_grad_bytes=layers[-1].out_bytes if i > 0 else 0,
                param_grad_bytes=draw(st.integers(0, 12)) if params else 0,
                fwd_work_bytes=draw(st.sampled_from([0, 0, 5, 17])),
                bwd_work_bytes=draw(st.sampled_from([0, 0, 7, 23])),
            )
        )
    return Profile("v2-chain", DEVICE, draw(st.integers(0, 50)), tuple(layers))


def _recompute_only(profile: Profile) -> list[tuple[float, int, tuple]]:
    """(makespan, peak, actions) of every keep/recompute plan, by enumeration."""
    flags = tuple(layer.saves_input for layer in profile.layers)
    score = planopt.Scorer(profile).score
    out = []
    for actions, prefetch, wait in enumerate_raw(
        len(profile.layers), with_swap_wait=False, saves_input=flags
    ):
        if SWAP not in actions:
            makespan, peak = score(actions, prefetch, wait)
            out.append((makespan, peak, actions))
    return out


def _solve(profile: Profile, budget: float, work_limit: float | None = None):
    problem = Problem(profile, budget, 0, work_limit=work_limit)
    return solve_certified(problem)


SMALL = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- the theorem: the decomposition is the simulator's peak ---------------------------


@SMALL
@given(v2_chains(max_layers=7))
def test_the_segment_decomposition_is_the_simulators_peak_for_every_plan(profile):
    model = ChainModel(profile)
    for makespan, peak, actions in _recompute_only(profile):
        kept = tuple(i for i, a in enumerate(actions) if str(a) == "keep")
        cert = certify(model, kept, proven=False, upper_saved=0.0)
        assert cert.peak == peak, actions
        assert cert.makespan == pytest.approx(makespan, rel=REL)


def test_zero_duration_ops_are_never_a_peak_but_what_they_keep_counts():
    """A zero-time forward's scratch never counts; the output it leaves does."""
    layers = (
        Layer("a", 1.0, 1.0, out_bytes=10, saves_output=True),
        Layer("b", 0.0, 1.0, out_bytes=20, saves_output=True, fwd_work_bytes=1000),
        Layer("c", 1.0, 1.0, out_bytes=5, saves_output=True),
    )
    profile = Profile("zero", DEVICE, 0, layers)
    model = ChainModel(profile)
    for kept in [(0, 1, 2), (0, 2), (2,), ()]:
        plan = Plan.build(model.actions(kept), profile=profile)
        assert model.peak(list(kept)) == planopt.simulate(profile, plan).peak_bytes
    assert model.peak([0, 1, 2]) == 35  # not 1000: b's scratch lives for no time


# -- the optimum: brute force at every budget -------------------------------------------


def _budgets(scores) -> list[int]:
    peaks = sorted({peak for _, peak, _ in scores})
    out = set(peaks) | {peaks[0] - 1} | {p + 1 for p in peaks}
    out |= {(a + b) // 2 for a, b in itertools.pairwise(peaks)}
    return sorted(b for b in out if b >= 0)


@SMALL
@given(v2_chains(max_layers=6))
def test_the_dp_is_the_enumerated_optimum_at_every_budget(profile):
    scores = _recompute_only(profile)
    for budget in _budgets(scores):
        fitting = [m for m, peak, _ in scores if peak <= budget]
        out, cert = _solve(profile, budget)
        if not fitting:
            assert out.status is Status.INFEASIBLE, (budget, out.message)
            assert out.plan is None
            continue
        assert out.status is Status.OPTIMAL, (budget, out.message)
        schedule = planopt.simulate(profile, out.plan, budget)
        assert schedule.feasible
        assert schedule.makespan == pytest.approx(min(fitting), rel=REL)
        assert cert.peak == schedule.peak_bytes
        assert cert.makespan == pytest.approx(schedule.makespan, rel=REL)
        assert out.lower_bound == pytest.approx(schedule.makespan, rel=REL)


@SMALL
@given(v2_chains(max_layers=7))
def test_the_minimum_budget_is_the_smallest_enumerated_peak(profile):
    scores = _recompute_only(profile)
    smallest = min(peak for _, peak, _ in scores)
    found = min_peak(ChainModel(profile))
    assert found.proven and found.peak == smallest
    plan = Plan.build(ChainModel(profile).actions(found.kept), profile=profile)
    assert planopt.simulate(profile, plan).peak_bytes == smallest
    # infeasible exactly below it
    below, _ = _solve(profile, smallest - 1)
    at, _ = _solve(profile, smallest)
    assert below.status is Status.INFEASIBLE and str(smallest) in below.message
    assert at.status is Status.OPTIMAL


@pytest.mark.parametrize("seed", range(6))
def test_longer_random_chains_agree_with_enumeration(seed):
    """Eight to ten layers with every flag drawn: beyond what the strategy explores."""
    profile = random_v2_chain(seed, 8, 10)
    rng = random.Random(seed)
    scores = _recompute_only(profile)
    peaks = sorted({p for _, p, _ in scores})
    for budget in [peaks[0] - 1, *rng.sample(peaks, min(8, len(peaks))), peaks[-1]]:
        fitting = [m for m, p, _ in scores if p <= budget]
        out, _ = _solve(profile, budget)
        if not fitting:
            assert out.status is Status.INFEASIBLE
        else:
            assert out.status is Status.OPTIMAL
            makespan = planopt.simulate(profile, out.plan).makespan
            assert makespan == pytest.approx(min(fitting), rel=REL)


# -- against the MIP where it proves (version-1 chains) ----------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_the_dp_matches_the_mip_where_the_mip_proves(seed):
    rng = random.Random(100 + seed)
    n = rng.randint(6, 9)
    layers = tuple(
        Layer.v1(f"l{i}", rng.randint(1, 8) / 4, rng.randint(1, 8) / 4, rng.randint(10, 80))
        for i in range(n)
    )
    profile = Profile(f"v1-{seed}", DEVICE, rng.randint(0, 50), layers)
    for fraction in (0.3, 0.5, 0.8):
        budget = planopt.budget_from_fraction(profile, fraction)
        mip = planopt.solve(profile, budget, "recompute-only", work_limit=30.0)
        dp = planopt.solve(profile, budget, "remat-dp")
        if mip.status is Status.OPTIMAL:
            assert dp.status is Status.OPTIMAL
            assert dp.makespan == pytest.approx(mip.makespan, rel=1e-6)
        elif mip.status is Status.INFEASIBLE:
            assert dp.status is Status.INFEASIBLE


# -- the method's contract ----------------------------------------------------------------


def _synthetic(n: int) -> Profile:
    """The chain published planners are compared on (see experiments/remat_dp.py)."""
    mib = 2**20
    return Profile(
        f"chain{n}",
        Device("d", 1e10, 1e10, 0.0),
        0,
        tuple(
            Layer.v1(f"l{i}", (1 + i % 3) * 1e-3, 2 * (1 + i % 3) * 1e-3, (64 + 16 * (i % 4)) * mib)
            for i in range(n)
        ),
    )


def test_a_long_chain_is_proven_and_its_certificate_is_the_simulators():
    profile = _synthetic(300)
    budget = planopt.budget_from_fraction(profile, 0.5)
    out, cert = _solve(profile, budget)
    assert out.status is Status.OPTIMAL
    schedule = planopt.simulate(profile, out.plan, budget)
    assert schedule.feasible and cert.peak == schedule.peak_bytes
    assert cert.makespan == pytest.approx(schedule.makespan, rel=REL)
    # no plan of the space is faster: the proven bound is the plan's own makespan
    assert cert.lower_makespan == pytest.approx(cert.makespan, rel=REL)


def test_keep_all_is_returned_at_once_when_it_fits():
    profile = _synthetic(20)
    sol = planopt.solve(profile, keep_all_peak(profile), "remat-dp")
    assert sol.status is Status.OPTIMAL and sol.plan.count(planopt.Action.RECOMPUTE) == 0
    assert sol.makespan == pytest.approx(profile.t_ideal)


def test_a_work_limit_stops_the_search_at_the_same_point_every_time():
    profile = _synthetic(400)
    budget = planopt.budget_from_fraction(profile, 0.3)
    first = planopt.solve(profile, budget, "remat-dp", work_limit=0.005)
    again = planopt.solve(profile, budget, "remat-dp", work_limit=0.005)
    assert first.status in (Status.TIMEOUT, Status.FEASIBLE)
    assert first.status is again.status and first.work_used == again.work_used
    full = planopt.solve(profile, budget, "remat-dp")
    assert full.status is Status.OPTIMAL and full.work_used > first.work_used


def test_the_plan_is_never_slower_than_any_recompute_only_baseline():
    profile = _synthetic(120)
    for fraction in (0.2, 0.35, 0.6):
        budget = planopt.budget_from_fraction(profile, fraction)
        dp = planopt.solve(profile, budget, "remat-dp")
        chen = planopt.solve(profile, budget, "sqrt-n")
        if chen.status in (Status.FEASIBLE, Status.OPTIMAL):
            assert dp.status is Status.OPTIMAL
            assert dp.makespan <= chen.makespan * (1 + 1e-12)


def test_profiles_too_large_for_exact_integers_are_refused_clearly():
    """The DP's int64 sums are exact because no profile holds more than 2^53 bytes."""
    with pytest.raises(planopt.PlanoptError, match="2\\^40"):
        Profile("huge", DEVICE, 0, (Layer.v1("huge", 1.0, 1.0, 2**60),))
    layers = tuple(Layer.v1(f"l{i}", 1.0, 1.0, 2**40) for i in range(2**13 + 1))
    with pytest.raises(planopt.PlanoptError, match="2\\^53"):
        Profile("huge", DEVICE, 0, layers)
    top = 2**40  # planopt.limits.MAX_BYTES: six such fields of 1,365 layers are near 2^53
    big = tuple(
        Layer(f"l{i}", 1.0 + i % 3, 2.0, top - i, top, i % 2 == 0, i % 3 == 0, top * (i > 0), top)
        for i in range(1365)
    )
    largest = Profile("large", Device("link", 1e12, 1e12), 0, big)
    assert MAX_TOTAL_BYTES - 12 * top < sum(x.out_bytes + 5 * top for x in big)
    budget = planopt.budget_from_fraction(largest, 0.9)
    solution = planopt.solve(largest, budget, "remat-dp")
    assert solution.status is Status.OPTIMAL and solution.schedule.peak_bytes <= budget
    assert solution.makespan > largest.t_ideal  # the budget binds


def test_times_make_no_difference_to_the_peak_only_zero_does():
    """Scaling every positive time leaves the peak and the choice unchanged."""
    base = _synthetic(30)
    scaled = Profile(
        "scaled",
        base.device,
        base.static_bytes,
        tuple(Layer.v1(x.name, x.fwd * 7.0, x.bwd * 7.0, x.out_bytes) for x in base.layers),
    )
    budget = planopt.budget_from_fraction(base, 0.4)
    a, _ = _solve(base, budget)
    b, _ = _solve(scaled, budget)
    assert a.plan.actions == b.plan.actions
    assert math.isclose(
        planopt.simulate(scaled, Plan.build(b.plan.actions, profile=scaled)).makespan,
        7.0 * planopt.simulate(base, a.plan).makespan,
        rel_tol=1e-12,
    )


# -- the spaces' minimum budgets -----------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v2_chains(max_layers=4))
def test_each_space_reports_its_own_minimum_budget(profile):
    flags = tuple(layer.saves_input for layer in profile.layers)
    score = planopt.Scorer(profile).score
    peaks = {"joint": [], "recompute-only": [], "swap-only": []}
    for raw in enumerate_raw(len(profile.layers), with_swap_wait=True, saves_input=flags):
        peak = score(*raw)[1]
        peaks["joint"].append(peak)
        if SWAP not in raw[0]:
            peaks["recompute-only"].append(peak)
        if "recompute" not in {str(a) for a in raw[0]}:
            peaks["swap-only"].append(peak)
    for space, found in peaks.items():
        smallest = min(found)
        got = space_min_budget(profile, space)
        assert got.value <= smallest <= got.upper, space
        if got.exact:
            assert got.value == smallest == got.upper, space
    assert space_min_budget(profile, "recompute-only").exact
    assert space_min_budget(profile, "joint").value == min_budget(profile)


def test_an_unknown_space_is_refused():
    with pytest.raises(planopt.PlanoptError, match="space must be one of"):
        space_min_budget(_synthetic(3), "fixed")


def test_the_joint_seed_is_the_recompute_only_optimum_and_bounds_the_joint_search():
    profile = _synthetic(40)
    budget = planopt.budget_from_fraction(profile, 0.5)
    plan, makespan = seed_joint(Problem(profile, budget, 0))
    assert makespan == pytest.approx(planopt.solve(profile, budget, "remat-dp").makespan)
    assert planopt.simulate(profile, plan, budget).feasible
    greedy = planopt.solve(profile, budget, "greedy")
    assert greedy.makespan >= makespan * (1 - 1e-12) or any(
        str(a) == "swap" for a in greedy.plan.actions
    )
    assert (
        seed_joint(Problem(profile, space_min_budget(profile, "recompute-only").value - 1, 0))
        is None
    )


@pytest.mark.parametrize("seed", range(3))
def test_the_cost_table_and_the_windows_agree(seed):
    """Short chains read every edge's cost from one table, long ones compute windows."""
    from solvers.remat.optimum import solve_room

    rng = random.Random(seed)
    layers = []
    for i in range(rng.randint(30, 60)):
        kind = rng.choice(sorted(KINDS))
        saves_in, saves_out, internals, params = KINDS[kind]
        layers.append(
            Layer(
                f"{kind}{i}",
                rng.choice([0.0, 0.25, 1.0, 2.0]),
                rng.choice([0.0, 0.5, 2.0]),
                out_bytes=rng.randint(0, 90),
                saved_bytes=rng.randint(1, 40) if internals else 0,
                saves_input=saves_in,
                saves_output=saves_out,
                input_grad_bytes=layers[-1].out_bytes if i else 0,
                param_grad_bytes=rng.randint(0, 20) if params else 0,
                fwd_work_bytes=rng.choice([0, 0, 30]),
                bwd_work_bytes=rng.choice([0, 0, 45]),
            )
        )
    profile = Profile(f"mid{seed}", DEVICE, 10, tuple(layers))
    table, windows = ChainModel(profile, table=True), ChainModel(profile, table=False)
    n = len(layers)
    for k in range(-1, n - 1):
        assert (table.far_costs(k, k + 1, n - 1) == windows.far_costs(k, k + 1, n - 1)).all()
    room = (keep_all_peak(profile) - profile.static_bytes) // 2
    a, b = solve_room(table, room), solve_room(windows, room)
    assert a.proven and b.proven
    assert (a.found is None) == (b.found is None)
    if a.found is not None:
        assert a.found.saved == pytest.approx(b.found.saved, rel=1e-12)
