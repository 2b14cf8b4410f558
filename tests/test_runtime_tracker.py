"""The live-storage tracker measures what PyTorch holds: checked against torch's MemTracker.

`torch.distributed._tools.mem_tracker.MemTracker` is torch's own dispatch-mode
memory tracker; on a plain training step (no planopt code between the model
and autograd) both must see the same peak. Where a GPU exists, the peak is
also compared with the caching allocator's.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402

from planopt.runtime import reference_model  # noqa: E402
from planopt.runtime.models import REFERENCE_MODELS  # noqa: E402
from planopt.runtime.tracker import Category, LiveMemory, host_memory  # noqa: E402
from planopt.runtime.training import prepare_grads  # noqa: E402


def mem_tracker_peak(chain, batch, loss_fn, optimizer=None) -> int:
    mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    tracker = mem_tracker.MemTracker()
    tracker.track_external(chain, *batch, *([optimizer] if optimizer else []))
    with tracker:
        torch.manual_seed(0)
        loss = chain.loss(*batch, loss_fn)
        loss.backward()
        del loss
    return tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]


def live_memory(chain, batch, loss_fn, optimizer=None) -> LiveMemory:
    tracker = LiveMemory()
    tracker.track_model(chain, batch, optimizer)
    with tracker:
        torch.manual_seed(0)
        loss = chain.loss(*batch, loss_fn)
        loss.backward()
        del loss
    return tracker


@pytest.mark.parametrize("name", REFERENCE_MODELS)
@pytest.mark.parametrize("to_none", [True, False])
def test_peak_equals_torch_mem_tracker_on_a_plain_step(name, to_none):
    ref = reference_model(name, "tiny")
    batch = ref.batch()
    a, b = copy.deepcopy(ref.chain), copy.deepcopy(ref.chain)
    prepare_grads(a, to_none)
    prepare_grads(b, to_none)
    theirs = mem_tracker_peak(a, batch, ref.loss_fn)
    mine = live_memory(b, batch, ref.loss_fn)
    assert mine.peak == theirs
    # After the step only what lives across steps is left: no activation, no temporary.
    assert mine.by_category[Category.ACTIVATION] == mine.by_category[Category.TEMPORARY] == 0
    static = sum(p.numel() * 4 for p in b.parameters())
    assert mine.peak_categories[Category.PARAMETER] == static


def test_peak_equals_mem_tracker_with_adam_state():
    ref = reference_model("mlp", "tiny")
    batch = ref.batch()
    chains = [copy.deepcopy(ref.chain) for _ in range(2)]
    peaks = []
    for chain, measure in zip(chains, (mem_tracker_peak, None), strict=True):
        opt = torch.optim.Adam(chain.parameters())
        chain.loss(*batch, ref.loss_fn).backward()
        opt.step()  # the state exists now
        prepare_grads(chain, False)
        if measure is None:
            tracker = live_memory(chain, batch, ref.loss_fn, opt)
            peaks.append(tracker.peak)
            params = sum(p.numel() * 4 for p in chain.parameters())
            assert tracker.peak_categories[Category.OPTIMIZER] == 2 * params + 4 * len(
                list(chain.parameters())
            )  # two moments per parameter and a float32 step counter each
        else:
            peaks.append(measure(chain, batch, ref.loss_fn, opt))
    assert peaks[0] == peaks[1]


def test_storages_are_counted_once_until_released():
    tracker = LiveMemory()
    with tracker:
        x = torch.empty(10)  # 40 bytes
        view = x.view(2, 5)  # the same storage: nothing new
        y = x.add_(1)  # in place: nothing new
        assert tracker.current == 40
        z = torch.empty(5)
        assert tracker.current == 60
        del x, view, y
        assert tracker.current == 20  # x's storage went with its last tensor
        del z
    assert tracker.current == 0 and tracker.peak == 60


def test_host_memory_is_filed_apart_and_not_counted():
    tracker = LiveMemory()
    with tracker:
        with host_memory():
            host = torch.empty(100)
        device = torch.empty(10)
        assert tracker.current == 40
        assert tracker.by_category[Category.HOST] == 400
        del host, device
    assert tracker.peak == 40


def test_categories_of_a_step_with_gradients_set_to_none():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x, y = torch.randn(3, 4), torch.randn(3, 2)
    tracker = LiveMemory()
    tracker.track_model(model, (x, y))
    params = sum(p.numel() * 4 for p in model.parameters())
    assert tracker.current == params + (12 + 6) * 4  # parameters and the batch
    with tracker:
        loss = nn.functional.mse_loss(model(x), y)
        assert tracker.by_category[Category.ACTIVATION] > 0
        loss.backward()
    # Every gradient was accumulated into .grad: filed as a gradient, kept.
    assert tracker.by_category[Category.GRADIENT] == params
    del loss
    assert tracker.by_category[Category.ACTIVATION] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_peak_matches_the_caching_allocator_on_cuda():
    ref = reference_model("mlp", "small")
    chain = ref.chain.cuda()
    batch = ref.batch(device="cuda")
    prepare_grads(chain, False)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    tracker = LiveMemory("cuda")
    tracker.track_model(chain, batch)
    assert tracker.current == base  # every block rounded as the allocator rounds it
    with tracker:
        loss = chain.loss(*batch, ref.loss_fn)
        loss.backward()
        del loss
    torch.cuda.synchronize()
    assert tracker.peak == torch.cuda.max_memory_allocated()
