"""CBC on chains where it answered "optimal" above the optimum.

Found by a hypothesis search like `tests/test_inplace_rule.py`'s, brute
force as the judge. CBC 2.10.3 answered "optimal" at 44.25 s on the first
chain and 12.875 s on the second, where brute force proves 28.25 s and
12.625 s: its search restarted on a smaller model after fixing variables at
the root, stopped there at the node limit ("Partial search"), and the outer
search still logged "Optimal solution found"; the decoded plans are real, so
`exact` passed the claims on. The back-end now reads such a stop as
unproven (`solvers.backends.cbc.stopped_inside`). Any CBC tolerance gave
such claims (docs/solvers.md).
"""

import math

import pytest

import planopt
from planopt import Device, Layer, Profile
from solvers.backends.cbc import stopped_inside


def _layer(name, fwd, bwd, out, saved, saves_in, saves_out, in_grad, p_grad, work, mod=False):
    fwd_work, bwd_work = work
    return Layer(
        name=name, fwd=fwd, bwd=bwd, out_bytes=out, saved_bytes=saved, saves_input=saves_in,
        saves_output=saves_out, input_grad_bytes=in_grad, param_grad_bytes=p_grad,
        fwd_work_bytes=fwd_work, bwd_work_bytes=bwd_work, signature=name[:-1],
        modifies_input=mod,
    )  # fmt: skip


def three_layers() -> Profile:
    """Two in-place layers under a softmax; CBC said 44.25 s at 94 bytes."""
    return Profile(
        name="cbc-three",
        device=Device(name="dev", h2d_bandwidth=math.inf, d2h_bandwidth=0.5, transfer_latency=0.0),
        static_bytes=58,
        layers=(
            _layer("add0", 2.625, 0.0, 11, 0, False, False, 0, 0, (0, 0), mod=True),
            _layer("norm1", 0.0, 0.0, 6, 19, True, False, 11, 14, (0, 0), mod=True),
            _layer("softmax2", 1.0, 2.625, 4, 0, False, True, 6, 0, (12, 8)),
        ),
    )


def four_layers() -> Profile:
    """A linear, an in-place convolution, a norm and an in-place softmax (101 bytes)."""
    return Profile(
        name="cbc-four",
        device=Device(
            name="dev", h2d_bandwidth=math.inf, d2h_bandwidth=math.inf, transfer_latency=0.25
        ),
        static_bytes=6,
        layers=(
            _layer("linear0", 5.25, 0.0, 10, 0, True, False, 0, 9, (4, 0)),
            _layer("conv1", 1.25, 0.0, 40, 0, True, False, 10, 13, (0, 0), mod=True),
            _layer("norm2", 0.0, 0.0, 31, 19, True, False, 40, 9, (1, 0)),
            _layer("softmax3", 0.125, 5.75, 35, 0, False, True, 0, 0, (0, 0), mod=True),
        ),
    )  # fmt: skip


CHAINS = {"three": (three_layers, 94, 28.25), "four": (four_layers, 101, 12.625)}


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_cbc_claims_no_optimum_its_search_did_not_prove(chain):
    """Before: "optimal" at 44.25 s and 12.875 s (CBC stopped inside at its node limit)."""
    make, budget, optimum = CHAINS[chain]
    profile = make()
    best = planopt.solve(profile, budget, "brute-force")
    assert best.status is planopt.Status.OPTIMAL
    assert best.makespan == pytest.approx(optimum)
    got = planopt.solve(profile, budget, "exact", backend="cbc", work_limit=20)
    assert got.status in (planopt.Status.OPTIMAL, planopt.Status.FEASIBLE), got.message
    assert got.makespan >= best.makespan * (1 - 1e-6)
    if got.status is planopt.Status.OPTIMAL:
        assert got.makespan == pytest.approx(best.makespan, rel=1e-6), got.message
    assert got.lower_bound <= best.makespan * (1 + 1e-6), got.message


def test_a_search_stopped_or_dropped_inside_is_read_as_unproven():
    """The two shapes of CBC 2.10.3's log seen on those chains, and a clean one."""
    completed = "Cbc0001I Search completed - best objective {}, took 9 iterations and 2 nodes\n"
    partial = "Cbc0005I Partial search - best objective 4923.5 (best possible 806.6), took 9\n"
    assert stopped_inside(partial + completed.format(4923.5))
    assert stopped_inside(completed.format(6011.9046) + completed.format(6130.9522))
    assert not stopped_inside(completed.format(6130.9522) + completed.format(6130.9522))
    assert not stopped_inside(completed.format(6482.98))
