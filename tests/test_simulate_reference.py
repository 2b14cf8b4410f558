"""`planopt.simulate` agrees with the independent event-by-event reference simulator.

Exact (dyadic) profiles make every tie a real tie, so there both figures must
agree exactly; general float profiles are compared to 1e-9 relative.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_sim import reference_run, reference_simulate
from strategies import plans, profile_and_plan, profiles, random_plan, random_profile

from planopt import Plan, Scorer, bundled_profile, bundled_profile_names, simulate

REL = 1e-9


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _assert_agree(profile, plan, *, exact: bool) -> None:
    schedule = simulate(profile, plan)
    ref_time, ref_peak = reference_simulate(profile, plan)
    where = f"plan={plan.actions} prefetch={plan.prefetch_at} wait={plan.swap_wait}"
    assert _close(schedule.makespan, ref_time), (schedule.makespan, ref_time, where)
    if exact:
        assert schedule.makespan == ref_time, where
        assert schedule.peak_bytes == ref_peak, (schedule.peak_bytes, ref_peak, where)
    else:
        assert _close(schedule.peak_bytes, ref_peak), (schedule.peak_bytes, ref_peak, where)


@settings(max_examples=100, deadline=None)
@given(profile_and_plan())
def test_agrees_on_exact_profiles(pair):
    profile, plan = pair
    _assert_agree(profile, plan, exact=True)


@settings(max_examples=60, deadline=None)
@given(profile_and_plan(exact=False))
def test_agrees_on_float_profiles(pair):
    profile, plan = pair
    _assert_agree(profile, plan, exact=False)


@settings(max_examples=60, deadline=None)
@given(profile_and_plan())
def test_every_operation_agrees(pair):
    """Not just the headline: each operation starts and ends where the reference says."""
    profile, plan = pair
    ref = reference_run(profile, plan)
    got = {
        (op.kind.value, op.layer): (op.start, op.end) for op in simulate(profile, plan).operations()
    }
    want = {(op.kind, op.layer): (op.start, op.end) for op in ref.operations}
    assert got == want


@settings(max_examples=60, deadline=None)
@given(st.data(), profiles())
def test_scorer_with_free_copies_agrees(data, profile):
    plan = data.draw(plans(profile))
    n = len(profile.layers)
    free = data.draw(st.sets(st.integers(0, n - 1)))
    got = Scorer(profile).score(plan.actions, plan.prefetch_at, plan.swap_wait, free_copies=free)
    want = reference_simulate(profile, plan, free_copies=free)
    assert got[0] == want[0]
    assert got[1] == want[1]


@pytest.mark.parametrize("seed", range(300))
def test_agrees_on_seeded_larger_chains(seed):
    rng = random.Random(seed)
    exact = seed % 3 == 0
    profile = random_profile(rng, rng.randint(1, 40), exact=exact)
    plan = random_plan(rng, profile)
    _assert_agree(profile, plan, exact=exact)
    got = Scorer(profile).score(plan.actions, plan.prefetch_at, plan.swap_wait)
    assert got == (simulate(profile, plan).makespan, simulate(profile, plan).peak_bytes)


# NOTE: this reference reads version 1 only; the roofline zoo is version 2 now
# (its agreement is the version-2 reference's job, `tests/reference_v2.py`).
@pytest.mark.parametrize("name", [n for n in bundled_profile_names() if bundled_profile(n).is_v1])
def test_agrees_on_bundled_profiles(name):
    profile = bundled_profile(name)
    rng = random.Random(name)
    _assert_agree(profile, Plan.keep_all(profile), exact=False)
    for _ in range(20):
        _assert_agree(profile, random_plan(rng, profile), exact=False)
