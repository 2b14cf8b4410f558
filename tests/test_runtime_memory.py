"""On CPU the executor holds and frees exactly what the spec says: its peak is the simulator's.

The comparison: the profile measured by the profiler on the same chain and
batch (saved bytes exact, scratch 0 on CPU), with every `fwd` and `bwd` set
to 1 s and an instantaneous link (`Device(name, inf, inf, 0)`). Then every
copy takes no time and ends when it starts, like the executor's synchronous
CPU copies, and every compute operation has positive duration, so the
simulator's events come in the executor's order: compute operations back to
back, copies at their boundaries, frees before allocations at each boundary.
The peak then depends only on that order, not on measured times (which would
be noise, and a zero-duration operation would make the simulator drop
tensors the executor holds for an instant). The measured peak is static
bytes plus the peak of the saved-tensor bytes the executor held.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from strategies import plans  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import planopt  # noqa: E402
from planopt import Plan  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE, SWAP  # noqa: E402
from planopt.runtime import Chain, reference_model  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.models import REFERENCE_MODELS  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


def unit_times(prof: planopt.Profile) -> planopt.Profile:
    return prof.replace_layers(
        [dataclasses.replace(layer, fwd=1.0, bwd=1.0) for layer in prof.layers]
    )


@functools.cache
def setup(name: str):
    ref = reference_model(name, "tiny", seed=4)
    batch = ref.batch(seed=5)
    prof = profile(ref.chain, batch, ref.loss_fn, iterations=1, warmup=0, link=INSTANT, name=name)
    assert all(layer.fwd_work_bytes == layer.bwd_work_bytes == 0 for layer in prof.layers)
    return ref, batch, unit_times(prof)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(REFERENCE_MODELS))
def test_measured_cpu_peak_equals_the_simulated_peak(data, name):
    ref, batch, unit = setup(name)
    plan = data.draw(plans(unit))
    measured = measure(ref.chain, plan, batch, ref.loss_fn, profile=unit, iterations=1, warmup=0)
    assert measured.static_bytes == unit.static_bytes
    assert measured.peak_bytes == planopt.simulate(unit, plan).peak_bytes
    assert measured.stats.held_at_end == 0


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_keep_all_peak_is_static_plus_every_saved_tensor(name):
    ref, batch, unit = setup(name)
    measured = measure(
        ref.chain, Plan.keep_all(unit), batch, ref.loss_fn, profile=unit, iterations=1, warmup=0
    )
    assert measured.peak_bytes == unit.static_bytes + sum(x.product_bytes for x in unit.layers)
    assert measured.peak_bytes == planopt.keep_all_peak(unit)


def test_hand_worked_swap_and_recompute_peak():
    """Linear(4,8) -> ReLU -> Linear(8,2) + MSE on a batch of 2, float32.

    s_0 = a_0 = 2*8*4 = 64; s_1 = the ReLU output = 64; s_2 = its input (the
    ReLU output again, 64) + a_2 (2*2*4 = 16) + the loss's storage (`ls`:
    the mean reduction's output buffer, 16 bytes in torch 2.13) = 80 + ls.
    Plan: swap 0 (back at step 2), recompute 1, keep 2. Held bytes:
    F_0 64; F_1 128, s_0 leaves at its end -> 64; F_2 64 + s_2, s_1 dropped
    -> s_2; step 2 issued: s_0 copied back -> 64 + s_2; end of B_2 -> 64;
    step 1: s_1 regenerated -> 128; then frees. Peak 64 + s_2 = 144 + ls.
    """
    torch.manual_seed(0)
    chain = Chain.from_modules([nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)])
    batch = (torch.randn(2, 4), torch.randn(2, 2))
    with torch.no_grad():
        ls = F.mse_loss(chain(batch[0]), batch[1]).untyped_storage().nbytes()
    prof = unit_times(profile(chain, batch, F.mse_loss, iterations=1, warmup=0, link=INSTANT))
    assert [layer.product_bytes for layer in prof.layers] == [64, 64, 80 + ls]
    plan = Plan.build([SWAP, RECOMPUTE, KEEP], prefetch_at=[2, None, None], profile=prof)
    measured = measure(chain, plan, batch, F.mse_loss, profile=prof, iterations=1, warmup=0)
    static = (4 * 8 + 8 + 8 * 2 + 2) * 4 * 2 + (2 * 4 + 2 * 2) * 4  # params + grads, batch
    assert prof.static_bytes == static
    assert measured.peak_bytes == static + 144 + ls
    assert planopt.simulate(prof, plan).peak_bytes == static + 144 + ls
