"""remat-dp's first answer: the O(L) floor under the recompute-only space's minimum budget.

`budget_floor` lets remat-dp say "infeasible" before building any model;
it must never exceed the space's true minimum (enumerated on small v2
chains, the exact search on longer ones), or a budget where a plan fits
would be called infeasible.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from remat_chains import random_v2_chain
from test_remat_dp import SMALL, _recompute_only, v2_chains

import planopt
from planopt import Status
from planopt.budget import space_min_budget
from planopt.problem import Problem
from solvers.remat.floor import budget_floor, live_layers
from solvers.remat_dp import remat_dp


def _timed(profile):
    """The same chain with every backward taking time (the floor's own case)."""
    layers = tuple(replace(x, bwd=x.bwd or 0.5) for x in profile.layers)
    return replace(profile, layers=layers)


@SMALL
@given(v2_chains(max_layers=7))
def test_the_floor_is_never_above_the_enumerated_minimum(profile):
    for chain in (profile, _timed(profile)):
        smallest = min(peak for _, peak, _ in _recompute_only(chain))
        floor = budget_floor(chain)
        assert floor <= smallest
        # below the floor remat-dp says infeasible at once; at the minimum it finds the plan
        below = remat_dp(Problem(chain, floor - 1, 0))
        assert below.status is Status.INFEASIBLE
        assert remat_dp(Problem(chain, smallest, 0)).status is Status.OPTIMAL


def test_the_floor_is_never_above_the_exact_minimum_on_longer_chains():
    for seed in range(30):
        chain = _timed(random_v2_chain(300 + seed, 1, 60))
        assert budget_floor(chain) <= space_min_budget(chain, "recompute-only").value


def test_the_live_count_is_the_least_that_covers_the_chain():
    for n in range(1, 200):
        x = live_layers(n)
        assert (x + 1) * (x + 2) // 2 + x + 1 >= n
        assert x == 0 or x * (x + 1) // 2 + x < n  # one less does not cover it


def test_the_floor_answers_far_below_the_minimum():
    """The 16-layer comparison chain at 20%: infeasible from the floor, which says so."""
    from experiments.remat_dp import synthetic_chain

    profile = synthetic_chain(16)
    budget = planopt.budget_from_fraction(profile, 0.2)
    floor = budget_floor(profile)
    assert budget < floor <= space_min_budget(profile, "recompute-only").value
    out = remat_dp(Problem(profile, budget, 0))
    assert out.status is Status.INFEASIBLE and f"at least {floor} bytes" in out.message
