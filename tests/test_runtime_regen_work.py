"""Partial layers of a chain whose backward reads their own output (ResNet blocks).

Under checkpoint, PyTorch frees the forward's output after its readers (all
done before the layer's regeneration) and the replay makes the one the
layer's backward reads; cost model v3 holds the forward's output to the end
of `B_i`. The menu's `regen_work_bytes` counts the replayed output against
that (`planopt.sacmenu`, NOTE on memory): the prediction is the live-storage
tracker's peak (it was up to 6.9% over, each entry's scratch counting the
output twice).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import planopt  # noqa: E402
from planopt.plan import KEEP, Plan  # noqa: E402
from planopt.runtime import reference_model  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


@pytest.mark.parametrize("pick", [0, 1, -1])
def test_a_partial_layer_that_reads_its_output_peaks_as_predicted(pick):
    torch.set_num_threads(1)
    ref = reference_model("resnet", "tiny")
    batch = ref.batch(seed=1)
    prof = profile(ref.chain, batch, ref.loss_fn, iterations=1, warmup=0, link=INSTANT)
    layers = prof.layers
    assert any(layer.saves_output and layer.options for layer in layers)
    names = [layer.options[pick].name if layer.options else None for layer in layers]
    plan = Plan.build([KEEP] * len(layers), options=names, profile=prof)
    predicted = planopt.simulate(prof, plan).peak_bytes
    measured = measure(ref.chain, plan, batch, ref.loss_fn, profile=prof, iterations=0, warmup=0)
    assert -0.005 <= predicted / measured.peak_bytes - 1 <= 0.02, (predicted, measured.peak_bytes)
