"""HiGHS's answer on a chain where an objective floor row made it claim a wrong optimum.

Found by `tests/test_inplace_rule.py`'s hypothesis search: with the floor row in
the model and the feasibility tolerance at 1e-9, HiGHS 1.14 answered "optimal" at
68.58 s where brute force, CP-SAT and CBC find 37.14 s. The exact method now gives
that row to CP-SAT only (`solvers/exact.py`).
"""

import pytest

import planopt
from planopt import Device, Layer, Profile


def _chain() -> Profile:
    def layer(name, fwd, bwd, out, saves_output, fwd_work, bwd_work, modifies, grad=0):
        return Layer(
            name=name, fwd=fwd, bwd=bwd, out_bytes=out, saved_bytes=0, saves_input=False,
            saves_output=saves_output, input_grad_bytes=grad, param_grad_bytes=0,
            fwd_work_bytes=fwd_work, bwd_work_bytes=bwd_work, signature=name[:-1],
            modifies_input=modifies,
        )  # fmt: skip

    return Profile(
        name="highs-floor",
        device=Device(name="dev", h2d_bandwidth=1.0, d2h_bandwidth=64.0, transfer_latency=0.0),
        static_bytes=0,
        layers=(
            layer("relu0", 0.0, 0.125, 33, True, 0, 0, True),
            layer("add1", 0.0, 0.5, 32, False, 11, 1, True),
            layer("relu2", 0.0, 0.0, 28, True, 15, 0, False, grad=32),
            layer("relu3", 3.0, 0.0, 35, True, 5, 0, True),
        ),
    )


@pytest.mark.parametrize("backend", ["cpsat", "highs", "cbc"])
def test_every_backend_proves_the_brute_force_optimum(backend):
    profile = _chain()
    best = planopt.solve(profile, 68, "brute-force")
    assert best.status is planopt.Status.OPTIMAL
    assert best.makespan == pytest.approx(37.140625)
    got = planopt.solve(profile, 68, "exact", backend=backend, work_limit=60)
    assert got.status is planopt.Status.OPTIMAL
    assert got.makespan == pytest.approx(best.makespan, rel=1e-6)
    assert got.lower_bound <= best.makespan * (1 + 1e-6)
