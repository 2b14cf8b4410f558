"""The relaxation's hanging-run rows (`solvers.model.relaxation`): a recompute run hanging
below `B_t` is the only regeneration from below t that can run before `B_t`, and inside
`B_t` it holds its regenerated internals.

Evidence from outside the code under test: on short decoder-like chains (an embedding,
identical blocks with a menu, a head; the shape of GPT-2's traced block, where the LP
without these rows hid the whole recomputation before the head's backward) the exact
solver proves the optimum, and the bound (the PuLP reference as LP and MIP, and the
registered `lower-bound` on HiGHS) never exceeds it. The rows must also act: on some of
these chains the bound with them is strictly above the bound without them.
"""

from __future__ import annotations

import dataclasses

import pytest

import planopt
from planopt import Status
from planopt.budget import keep_all_peak
from planopt.io import profile_from_dict
from solvers.model import relaxation
from solvers.model.relaxation_coefficients import coefficients, hang_slopes

MB = 1 << 20


def _layer(name, fwd, bwd, saved, *, out=24, si=True, grad=24, pgrad=0, fw=48, bw=62, menu=()):
    return {
        "name": name, "fwd": fwd, "bwd": bwd, "out_bytes": out * MB, "saved_bytes": saved * MB,
        "saves_input": si, "saves_output": False, "input_grad_bytes": grad * MB,
        "param_grad_bytes": pgrad * MB, "fwd_work_bytes": fw * MB, "bwd_work_bytes": bw * MB,
        "options": [
            {"name": f"o{k}", "saved_bytes": s * MB, "recompute": r, "regen_work_bytes": 60 * MB}
            for k, (s, r) in enumerate(menu)
        ],
    }  # fmt: skip


def decoder(blocks: int, bandwidth: float, menus: bool) -> planopt.Profile:
    """GPT-2's traced block (ms, MiB, rounded) repeated `blocks` times between its
    embedding and its head; `bandwidth` in GB/s each way."""
    block_menu = ((0, 1.234), (104, 0.904), (206, 0.684)) if menus else ()
    head_menu = ((0, 6.26), (785, 4.86)) if menus else ()
    layers = [_layer("embed", 0.21, 0.79, 6, si=False, grad=0, fw=24, bw=264)]
    layers += [_layer(f"block{k}", 1.278, 2.329, 362, menu=block_menu) for k in range(blocks)]
    layers.append(
        _layer("head", 6.266, 9.744, 1656, out=0, pgrad=147, fw=2356, bw=2970, menu=head_menu)
    )
    for layer in layers:
        layer["fwd"] /= 1000
        layer["bwd"] /= 1000
        if not layer["options"]:
            del layer["options"]
    device = {
        "name": "d", "h2d_bandwidth": bandwidth * 1e9, "d2h_bandwidth": bandwidth * 1e9,
        "transfer_latency": 1e-5,
    }  # fmt: skip
    raw = {"format": "planopt.profile/3", "name": "decoder", "device": device,
           "static_bytes": 950 * MB, "layers": layers}  # fmt: skip
    return profile_from_dict(raw)


CASES = [
    (blocks, bandwidth, menus)
    for blocks in (4, 6)
    for bandwidth in (25.0, 50.0, 100.0)
    for menus in (True, False)
]
SHARES = (0.1, 0.3, 0.5)


def _budgets(profile):
    low, high = planopt.min_budget(profile), keep_all_peak(profile)
    return [int(low + r * (high - low)) for r in SHARES]


def _without_rows(monkeypatch):
    monkeypatch.setattr(
        relaxation,
        "coefficients",
        lambda p: dataclasses.replace(coefficients(p), hang_slope=()),
    )


@pytest.mark.parametrize(("blocks", "bandwidth", "menus"), CASES)
def test_the_bound_never_exceeds_the_exact_optimum_on_decoders(blocks, bandwidth, menus):
    profile = decoder(blocks, bandwidth, menus)
    proven = 0
    for budget in _budgets(profile):
        exact = planopt.solve(profile, budget, "exact", work_limit=20)
        if exact.status is not Status.OPTIMAL:  # infeasible, or unproven (CP-SAT's numerics)
            continue
        proven += 1
        top = exact.makespan * (1 + 1e-9)
        for relax in (True, False):
            assert relaxation.pulp_relaxation_bound(profile, budget, relax=relax) <= top
            registered = planopt.solve(profile, budget, "lower-bound", relax=relax, work_limit=10)
            assert registered.lower_bound <= top
    assert proven


def test_the_rows_raise_the_bound_on_decoders(monkeypatch):
    raised = 0
    for blocks, bandwidth, menus in CASES[:6]:
        profile = decoder(blocks, bandwidth, menus)
        for budget in _budgets(profile):
            with_rows = relaxation.pulp_relaxation_bound(profile, budget, relax=True)
            with monkeypatch.context() as m:
                _without_rows(m)
                without = relaxation.pulp_relaxation_bound(profile, budget, relax=True)
            assert without <= with_rows * (1 + 1e-9)
            raised += with_rows > without * (1 + 1e-6)
    assert raised >= 3


def test_hang_slopes_are_the_least_ratio_over_the_runs_below():
    f = [2.0, 1.0, 0.0, 4.0]
    internals = [1.0, 3.0, 5.0, 2.0]
    slopes = hang_slopes(f, internals)
    # t=1: run {0}: 1/2; t=2: {1}: 3, {0,1}: 4/3; t=3: {2} (no time), {1,2}: 8, {0,1,2}: 9/3
    assert slopes[0] == 0.0
    assert slopes[1] == pytest.approx(0.5, rel=1e-5) and slopes[1] <= 0.5
    assert slopes[2] == pytest.approx(4 / 3, rel=1e-5) and slopes[2] <= 4 / 3
    assert slopes[3] == pytest.approx(3.0, rel=1e-5) and slopes[3] <= 3.0
    assert hang_slopes([1.0] * 3000, [1.0] * 3000) == ()  # long nets: rows left out
