"""The certificate of `blocks`, `lns` and `auto` over menus (cost model v3).

They used to certify plans over menus against `T_ideal` only (the relaxation
modelled whole layers); they now report the relaxation over menus (one
relaxed action per option, `tests/test_bound_menus.py` checks it against
enumeration), the same LP certificate as on whole layers. Work-limited runs
give the same plan and bound from a cold or a warm relaxation cache.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_search_menus import _blocks_chain

import planopt
from planopt.certificate import LP, Certificate
from planopt.random_chain import repeated_chain
from solvers.model import relaxation_highs


def _gpt_like(copies: int) -> planopt.Profile:
    """A transformer-like block with a 4-option menu, repeated `copies` times."""
    mib = 2**20
    block = planopt.Layer(
        "block", fwd=0.0013, bwd=0.0023, out_bytes=24 * mib, saved_bytes=360 * mib,
        saves_input=True, input_grad_bytes=24 * mib,
        options=tuple(
            planopt.LayerOption(f"sac{k}", 90 * k * mib, 0.0013 * (0.95 - 0.2 * k), (k,))
            for k in range(4)
        ),
    )  # fmt: skip
    head = planopt.Layer("head", 0.0005, 0.001, 4 * mib, saved_bytes=8 * mib, saves_input=True)
    embed = dataclasses.replace(head, name="embed", saves_input=False)
    layers = repeated_chain([block], copies, [embed], [head])
    return planopt.Profile("gpt-like-menus", planopt.Device("pcie", 5e10, 5e10), 0, layers)


@pytest.mark.parametrize("method", ["blocks", "lns", "auto"])
@pytest.mark.parametrize("fraction", [0.7, 0.4])
def test_the_search_certifies_menus_with_the_relaxation_over_them(method, fraction):
    profile = _gpt_like(16)
    whole = profile.replace_layers([dataclasses.replace(x, options=()) for x in profile.layers])
    budget = planopt.budget_from_fraction(whole, fraction)
    sol = planopt.solve(profile, budget, method, work_limit=2)
    assert sol.schedule is not None and sol.schedule.feasible, sol.message
    cert = sol.bound_provenance
    assert cert == Certificate(LP, True, cert.seconds, cert.work, "the LP relaxation's optimum")
    lp = planopt.solve(profile, budget, "lower-bound", relax=True, work_limit=5).lower_bound
    assert sol.lower_bound == pytest.approx(lp, rel=1e-9)
    assert profile.t_ideal < sol.lower_bound <= sol.makespan


def test_blocks_over_menus_is_the_same_from_a_cold_or_warm_cache():
    profile = _blocks_chain()
    budget = planopt.budget_from_fraction(profile, 0.4)
    relaxation_highs.clear_cache()
    cold = planopt.solve(profile, budget, "blocks", work_limit=2)
    warm = planopt.solve(profile, budget, "blocks", work_limit=2)
    assert cold.plan == warm.plan and cold.plan.has_options
    assert cold.lower_bound == warm.lower_bound and cold.work_used == warm.work_used
    assert cold.bound_provenance.source == LP
