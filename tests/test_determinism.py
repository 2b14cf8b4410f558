"""Same inputs, seed and work limit: the same plan, on a quiet machine and on a loaded one.

Every method that returns plans runs twice on the same net with a work
limit and no time limit, the second time while two other processes keep
both cores busy; the plans (and the work counted) must be identical.
Nothing here reads a clock.
"""

from __future__ import annotations

import pytest

import planopt
from planopt import registry
from planopt.testing.load import busy_cores

# Work per solve: enough for every search to run several phases on this net.
WORK = 1.5


@pytest.fixture(scope="module")
def net():
    return planopt.random_chain(36, seed=11, family="mixed")


@pytest.mark.parametrize("method", registry.by_role("baseline", "heuristic", "exact", "bound"))
def test_a_work_limited_solve_gives_the_same_plan_under_load(net, method):
    quiet = planopt.solve(net, "45%", method, work_limit=WORK, seed=3)
    with busy_cores():
        loaded = planopt.solve(net, "45%", method, work_limit=WORK, seed=3)
    assert loaded.status == quiet.status
    assert loaded.plan == quiet.plan
    assert loaded.lower_bound == quiet.lower_bound
    assert loaded.work_used == quiet.work_used
    assert quiet.work_used <= WORK * 1.5 + 1  # a limit, not a suggestion
