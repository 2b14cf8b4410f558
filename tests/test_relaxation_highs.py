"""The relaxation built in HiGHS directly (`solvers.model.relaxation_highs`) is the PuLP
reference's program: the same LP optimum on many small chains, a MIP bound within HiGHS's
gap of it, never above brute force; warm re-solves and work limits do not change it."""

from __future__ import annotations

import random

import pytest
from strategies import random_profile

import planopt
from planopt.budget import keep_all_peak
from planopt.certificate import LP, MIP, T_IDEAL
from planopt.work import WorkMeter
from solvers.brute_force import enumerate_raw
from solvers.model import relaxation_highs, relaxation_mip
from solvers.model.relaxation import pulp_relaxation_bound
from solvers.model.relaxation_highs import highs_bound

# HiGHS's default relative MIP gap: two MIP solves may stop this far apart.
MIP_GAP = 1e-4


def _optimum(profile, budget):
    flags = tuple(x.saves_input for x in profile.layers)
    score = planopt.Scorer(profile).score
    scored = [score(*raw) for raw in enumerate_raw(len(profile.layers), saves_input=flags)]
    fitting = [t for t, peak in scored if peak <= budget]
    return min(fitting) if fitting else None


def _cases(count, low, high, seed):
    rng = random.Random(seed)
    for _ in range(count):
        profile = random_profile(rng, rng.randint(low, high))
        if rng.random() < 0.5:
            profile = planopt.random_chain(
                rng.randint(low, high),
                seed=rng.randrange(1000),
                family=rng.choice(["uniform", "cnn", "transformer", "mixed"]),
                version=2,
            )
        low_budget = planopt.min_budget(profile)
        budget = low_budget + rng.random() * 1.1 * (keep_all_peak(profile) - low_budget)
        yield profile, budget


@pytest.mark.parametrize("seed", range(6))
def test_the_lp_equals_the_pulp_reference(seed):
    for profile, budget in _cases(10, 1, 40, seed):
        reference = pulp_relaxation_bound(profile, budget, relax=True)
        bound, cert = highs_bound(profile, budget)
        if reference is None:
            assert bound is None
            continue
        assert bound == pytest.approx(reference, rel=1e-7)
        assert cert.source in (LP, T_IDEAL) and cert.complete


@pytest.mark.parametrize("seed", range(3))
def test_the_mip_matches_the_pulp_reference_within_the_gap(seed):
    for profile, budget in _cases(6, 1, 16, 100 + seed):
        reference = pulp_relaxation_bound(profile, budget)
        bound, _ = highs_bound(profile, budget, mip=True)
        if reference is None:
            assert bound is None
            continue
        assert bound == pytest.approx(reference, rel=2 * MIP_GAP)


@pytest.mark.parametrize("seed", range(4))
def test_the_bounds_never_exceed_the_brute_force_optimum(seed):
    for profile, budget in _cases(8, 1, 5, 200 + seed):
        optimum = _optimum(profile, budget)
        if optimum is None:
            continue
        for mip in (False, True):
            bound, _ = highs_bound(profile, budget, mip=mip)
            assert bound is not None and profile.t_ideal <= bound <= optimum * (1 + 1e-9)


def test_warm_re_solves_across_budgets_give_the_cold_bounds():
    profile = planopt.random_chain(120, seed=3, family="transformer", version=2)
    fractions = (0.7, 0.3, 0.5, 0.9, 0.3)
    warm = [highs_bound(profile, planopt.budget_from_fraction(profile, f))[0] for f in fractions]
    cold = []
    for f in fractions:
        relaxation_highs.clear_cache()
        cold.append(highs_bound(profile, planopt.budget_from_fraction(profile, f))[0])
    assert warm == cold
    assert warm[1] == warm[4] and warm[1] >= warm[2] >= warm[0] >= profile.t_ideal
    assert warm[1] > profile.t_ideal


def test_the_work_charged_does_not_depend_on_the_cache():
    profile = planopt.random_chain(80, seed=5, family="mixed", version=2)
    budget = planopt.budget_from_fraction(profile, 0.4)
    charged = []
    for _ in range(2):
        meter = WorkMeter()
        highs_bound(profile, budget, mip=True, work_limit=1.0, meter=meter)
        charged.append(meter.used)
    relaxation_highs.clear_cache()
    meter = WorkMeter()
    highs_bound(profile, budget, mip=True, work_limit=1.0, meter=meter)
    # (a MIP stops at the first interrupt callback past its limit: over it by one
    # step at most, which is no more than its root LP's: `relaxation_mip.root_units`)
    model, _ = relaxation_highs._CACHE.get(profile)
    assert charged == [meter.used, meter.used]
    assert 0 < meter.used <= 1.0 + relaxation_mip.root_units(model)


def test_a_work_share_below_the_lp_gives_t_ideal_and_says_so():
    profile = planopt.random_chain(300, seed=1, family="cnn", version=2)
    budget = planopt.budget_from_fraction(profile, 0.5)
    full, cert = highs_bound(profile, budget, mip=True, work_limit=50)
    assert full > profile.t_ideal and cert.source in (LP, MIP)
    bound, cert = highs_bound(profile, budget, work_limit=1e-3)
    assert bound == profile.t_ideal
    assert cert.source == T_IDEAL and not cert.complete and cert.work <= 1e-3


def test_prefix_sums_are_each_prefixs_fsum():
    import math

    from solvers.model.relaxation_coefficients import exact_prefix_sums

    rng = random.Random(3)
    values = [rng.choice([1e-9, 1.0, 3e5, 0.1]) * rng.random() for _ in range(400)]
    assert exact_prefix_sums(values) == tuple(
        math.fsum(values[: i + 1]) for i in range(len(values))
    )


@pytest.mark.parametrize("seed", range(3))
def test_every_model_has_the_rows_the_work_check_assumes(seed):
    from solvers.model.relaxation import coefficients

    for profile, _ in _cases(10, 1, 60, seed):
        model = relaxation_highs.build_model(coefficients(profile))
        assert model.rows >= relaxation_highs.MIN_ROWS_PER_LAYER * len(profile.layers)


def test_a_work_limit_below_the_least_model_is_refused_before_building(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("built a model the work limit cannot pay for")

    relaxation_highs.clear_cache()
    monkeypatch.setattr(relaxation_highs, "build_model", never)
    profile = planopt.random_chain(2000, seed=2, family="mixed", version=2)
    bound, cert = highs_bound(profile, planopt.budget_from_fraction(profile, 0.5), work_limit=0.1)
    assert bound == profile.t_ideal and cert.source == T_IDEAL and not cert.complete


def test_a_build_past_its_deadline_gives_t_ideal_and_says_so():
    relaxation_highs.clear_cache()
    profile = planopt.random_chain(3000, seed=4, family="mixed", version=2)
    budget = planopt.budget_from_fraction(profile, 0.5)
    bound, cert = highs_bound(profile, budget, time_limit=0.0)
    assert bound == profile.t_ideal and cert.source == T_IDEAL and not cert.complete
    assert "building" in cert.detail
