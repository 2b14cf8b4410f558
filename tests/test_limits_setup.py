"""Limits reach the preparation, not only the search loop (issue 16: "every method
stops within its limit at any size").

On 10^4-10^5 layers the time went before any search looked at its deadline:
the recompute-only seed's completion bound (several seconds, no check), the
relaxation's model building. Each test gives a limit that has already passed
and checks, from the work charged, that the step stopped at once rather than
running to the end; no clock is read.
"""

from __future__ import annotations

from planopt.random_chain import random_chain
from solvers.remat.bounds import WORK_PER_SWEPT_NODE
from solvers.remat.chain import ChainModel
from solvers.remat.optimum import solve_room


def test_the_recompute_only_bound_stops_when_the_limit_has_passed():
    profile = random_chain(3000, seed=0)
    model = ChainModel(profile)
    room = int(0.4 * (model.peak(list(range(model.n))) - profile.static_bytes))
    charged: list[float] = []
    result = solve_room(model, room, charge=charged.append, expired=lambda: True)
    assert result.found is None and not result.proven
    # At most the one sweep under way when the limit was seen (the bound alone sweeps
    # at least three times, then the search charges its own).
    assert sum(charged) <= model.n * WORK_PER_SWEPT_NODE
