"""Recompute runs of every shape: what torch's MemTracker sees is what the model predicts.

Issue 25: a run of two or more recomputed layers was under-predicted by up
to 10.1%, because the executor held the run's base (the output of the layer
below) through the whole recompute block, where cost model v2 (section 5)
frees it once the block's first forward has used it. Measured here by
torch's own `MemTracker` (`torch.distributed._tools.mem_tracker`) around a
step under the executor, after a warm-up step, in the gradient regime the
profile was made for; and, for every run shape, by `measure()` (the
live-storage tracker, checked against MemTracker in `test_runtime_tracker.py`).
Never by the executor's own bookkeeping.

Tolerance: the fidelity benchmark's (at most 2% over, 0.5% under). With
gradients set to None the model over-predicts by design (README): only the
under-prediction bound is checked there.
"""

from __future__ import annotations

import functools
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.nn import functional as F  # noqa: E402

import planopt  # noqa: E402
from experiments.bench_fidelity import conv_bn_model, run_shape_plans  # noqa: E402
from planopt import Plan  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE, SWAP  # noqa: E402
from planopt.runtime import Executor, reference_model  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402
from planopt.runtime.training import prepare_grads, restored  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)
OVER, UNDER = 0.02, 0.005
ACTIONS = {"k": KEEP, "r": RECOMPUTE, "s": SWAP}


@functools.cache
def setup(name: str, to_none: bool, batch_size: int | None = None):
    torch.set_num_threads(1)
    ref = conv_bn_model() if name == "conv-bn" else reference_model(name, "tiny", seed=3)
    batch = ref.batch(seed=1, batch_size=batch_size)
    prof = profile(
        ref.chain, batch, ref.loss_fn, iterations=1, warmup=1, link=INSTANT, grads_to_none=to_none
    )
    return ref, batch, prof


def mem_tracker_peak(ref, batch, prof, plan: Plan, to_none: bool) -> int:
    """torch's MemTracker peak over one executor step, after a warm-up step."""
    mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    executor = Executor(ref.chain, plan, profile=prof, loss_fn=ref.loss_fn)
    x, y = batch

    def step() -> None:
        prepare_grads(ref.chain, to_none)
        with executor:
            loss = executor(x, y)
            loss.backward()
            del loss

    with restored(ref.chain, x.device):
        step()
        prepare_grads(ref.chain, to_none)
        tracker = mem_tracker.MemTracker()
        tracker.track_external(ref.chain, x, y)
        with tracker, executor:
            loss = executor(x, y)
            loss.backward()
            del loss
    return tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


def check(predicted: int, measured: int, to_none: bool) -> None:
    error = predicted / measured - 1
    assert error >= -UNDER, f"under-predicted by {-error:.2%}: {predicted} < {measured}"
    if not to_none:
        assert error <= OVER, f"over-predicted by {error:.2%}: {predicted} > {measured}"


@pytest.mark.parametrize("to_none", [False, True], ids=["grads-kept", "grads-to-none"])
@pytest.mark.parametrize("actions", ["kkrrrkkkkk", "kkkrkrrrkk", "kkrrrrkkkk"])
def test_issue_25_runs_are_predicted_against_mem_tracker(actions, to_none):
    """Were -10.07%, -5.3% and -4.4% (kept), -10.10%, -4.60%, -4.39% (to None)."""
    ref, batch, prof = setup("conv-bn", to_none)
    plan = Plan.build([ACTIONS[c] for c in actions], profile=prof)
    predicted = planopt.simulate(prof, plan).peak_bytes
    check(predicted, mem_tracker_peak(ref, batch, prof, plan, to_none), to_none)


@pytest.mark.parametrize("to_none", [False, True], ids=["grads-kept", "grads-to-none"])
@pytest.mark.parametrize("name", ["conv-bn", "vgg", "mlp"])
def test_every_run_shape_is_predicted(name, to_none):
    ref, batch, prof = setup(name, to_none, batch_size=4 if name == "conv-bn" else None)
    plans = run_shape_plans(prof)
    runs = {"".join(a.value[0] for a in p.actions) for p in plans}
    assert any("rrrr" in r for r in runs) or len(prof) < 4
    for plan in plans:
        m = measure(ref.chain, plan, batch, ref.loss_fn, profile=prof, iterations=0, warmup=1)
        assert m.stats.held_at_end == 0
        check(planopt.simulate(prof, plan).peak_bytes, m.peak_bytes, to_none)


def test_run_shapes_cover_every_length_and_place_with_swaps_beside():
    prof = planopt.random_chain(10, seed=1, version=2)
    shapes = {"".join(a.value[0] for a in p.actions) for p in run_shape_plans(prof)}
    for length in range(1, 5):
        run = "r" * length
        assert run + "k" * (10 - length) in shapes  # bottom
        assert "k" * (10 - length) + run in shapes  # top
        middle = (10 - length) // 2
        assert "k" * middle + run + "k" * (10 - length - middle) in shapes
        assert "k" * (middle - 1) + "s" + run + "s" + "k" * (9 - length - middle) in shapes


def test_the_block_input_holds_no_reference_to_the_base():
    """The block's input is a non-leaf over the base's storage: after the first
    forward nothing holds the base (a leaf's AccumulateGrad did)."""
    import weakref

    from planopt.runtime.recompute import block_input

    base = torch.randn(2, 3, 8, 8)
    conv = torch.nn.Conv2d(3, 4, 3)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(lambda t: None, lambda p: p):
        h = block_input(base, requires_grad=True)
        assert h.requires_grad and not h.is_leaf
        gone = weakref.ref(h)
        out = F.relu(conv(torch.relu_(h)))  # in place on the block's input is allowed
        del h
    assert gone() is None and out.requires_grad
    assert base._version == 0  # the alias has its own version counter


@pytest.mark.parametrize("actions", ["kkrrrkkkkk", "rrrrrrkkkk", "krrrrkkkkk"])
def test_batch_norm_in_a_block_holds_nothing_the_model_leaves_out(actions):
    """Issue 25: a block's snapshot of batch-norm statistics was filed as host
    memory, which on CPU is the device's RAM: `measure()` read up to 520 B
    less than torch's MemTracker here. A batch norm now runs its block on the
    batch's statistics alone (no snapshot), and the tracker, MemTracker and
    the model agree to the byte."""
    ref, batch, prof = setup("conv-bn", False, batch_size=4)
    plan = Plan.build([ACTIONS[c] for c in actions], profile=prof)
    measured = measure(ref.chain, plan, batch, ref.loss_fn, profile=prof, iterations=0, warmup=1)
    theirs = mem_tracker_peak(ref, batch, prof, plan, False)
    assert measured.peak_bytes == theirs == planopt.simulate(prof, plan).peak_bytes


def test_a_buffer_snapshot_is_counted_on_cpu():
    """Any other buffer a block updates is restored from a snapshot, which on
    CPU is device RAM: the tracker counts it as torch's MemTracker does."""
    from planopt.runtime.recompute import buffers_unchanged
    from planopt.runtime.tracker import LiveMemory

    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("seen", torch.zeros(256))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.add_(1)
            return x

    counter, bn = Counter(), torch.nn.BatchNorm1d(64)
    x = torch.randn(4, 64)
    tracker = LiveMemory()
    tracker.track_model(torch.nn.ModuleList([counter, bn]), [x])
    with tracker:
        before = tracker.current
        with buffers_unchanged([counter, bn]):
            held = tracker.current - before
            counter(bn(x))
    assert held == 256 * 4  # the counter's snapshot; batch norm's statistics need none
    assert torch.equal(counter.seen, torch.zeros(256))
    assert torch.equal(bn.running_mean, torch.zeros(64)) and int(bn.num_batches_tracked) == 0
