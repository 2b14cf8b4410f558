"""`apply`'s whole-layer swaps over an emulated slow link hold the predicted peak.

Before: a copy back's device buffers were allocated when it was enqueued (the
issue of its `prefetch_at` step). The cost model allocates them at the copy
back's *start*: the latest of its enqueue, the end of the previous copy back
and the end of its own copy out. Over a link whose copies outlast the
forward, every copy back of the first backward steps was enqueued while the
swapped internals still waited for their copies out, so the tracker saw
them together: tiny GPT-2 measured 17% to 30% above `planopt.simulate`. Now
the emulated engine allocates the buffers on the compute thread at the copy's
start (`planopt.runtime.threadcopies`).

Evidence from outside the runtime: the live-storage tracker and torch's
`MemTracker`, against the simulator on the same profile, within the fidelity
tolerance (+2% over, -0.5% under).
"""

from __future__ import annotations

import copy
import functools
import math

import pytest

torch = pytest.importorskip("torch")

import planopt  # noqa: E402
from planopt import Plan  # noqa: E402
from planopt.plan import KEEP, SWAP  # noqa: E402
from planopt.runtime import apply, measure_step, profile_in_place  # noqa: E402
from planopt.runtime.hf import hf_available  # noqa: E402
from tests.late_workers import start_apply_copies_late  # noqa: E402

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(not hf_available(), reason="needs transformers"),
]

# 20 MB/s: a block's 2.7 MB copy lasts ~135 ms, longer than the whole forward
# (~7 ms), so every copy out is still running when the backward starts
# and each copy back waits for its copy out (the case the old allocation got
# wrong), whatever the load of the machine.
SLOW = planopt.Device("slow", 2e7, 2e7, 1e-4)
OVER, UNDER = 0.02, 0.005  # the fidelity tolerance
PLANS = {  # blocks 1..4; prefix and suffix kept
    "alternate 1,3": (SWAP, KEEP, SWAP, KEEP),
    "first three": (SWAP, SWAP, SWAP, KEEP),
}


@functools.cache
def setup(family: str = "gpt2", link: planopt.Device = SLOW):
    from tests.tiny_models import tiny

    model, batch, loss_fn = tiny(family, size="act")
    prof = profile_in_place(
        model, batch, loss_fn, link=link, iterations=1, warmup=0, signed_scratch=True
    )
    return model, batch, loss_fn, prof


@pytest.mark.parametrize("tracker", ["planopt", "torch"])
def test_apply_whole_layer_swaps_over_a_slow_link_hold_the_predicted_peak(tracker):
    model, batch, loss_fn, prof = setup()
    assert len(prof.profile) == 6
    for name, blocks in PLANS.items():
        plan = Plan.build([KEEP, *blocks, KEEP], profile=prof.profile)
        m = copy.deepcopy(model)
        with apply(m, plan, prof, link=SLOW) as handle:
            # A first step warms the plan up (its first backward after another plan's
            # ran slower, which moved a copy back's start against B_4 on the wall clock).
            measure_step(m, batch, loss_fn, handle=handle, tracker=tracker)
            measured = measure_step(m, batch, loss_fn, handle=handle, tracker=tracker)
        assert measured.predicted_bytes == planopt.simulate(prof.profile, plan).peak_bytes
        assert -UNDER <= measured.error <= OVER, (
            name,
            measured.predicted_bytes,
            measured.peak_bytes,
        )


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_apply_frees_the_copies_out_a_starved_worker_has_not_made(family, monkeypatch):
    """Over an instant link a copy out ends with its block's forward. Workers that start
    each copy 20 ms late (a CPU-starved machine) made these plans measure 9.7% to 23.6%
    over the prediction (swapped storages held into the next forwards). Each block's
    forward and the suffix's now poll the engine, which makes the copies out the spec
    has ended that no worker started, and frees them."""
    instant = planopt.Device("instant", math.inf, math.inf, 0.0)
    start_apply_copies_late(monkeypatch, 0.02)
    model, batch, loss_fn, prof = setup(family, instant)
    n = len(prof.profile)
    for blocks in ([SWAP] * (n - 2), [(SWAP, KEEP)[i % 2] for i in range(n - 2)]):
        plan = Plan.build([KEEP, *blocks, KEEP], profile=prof.profile)
        m = copy.deepcopy(model)
        with apply(m, plan, prof, link=instant) as handle:
            measured = measure_step(m, batch, loss_fn, handle=handle)
        assert -UNDER <= measured.error <= OVER, (
            blocks,
            measured.predicted_bytes,
            measured.peak_bytes,
        )
