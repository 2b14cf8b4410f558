"""The profiler measures what the cost model needs, counted exactly, and says how.

Saved bytes are checked against sizes worked out by hand from what each
PyTorch operator saves; static bytes against parameter, gradient and batch
sizes; the profile must be a valid planopt profile that the planner can solve
and whose plans the executor runs.
"""

from __future__ import annotations

import copy
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402

import planopt  # noqa: E402
from planopt.runtime import Chain, Executor, reference_model  # noqa: E402
from planopt.runtime.link import measure_cuda_link  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.memory import static_bytes  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402

LINK = planopt.Device("pcie-given", 2.5e10, 2.0e10, 1e-5)


class Square(nn.Module):
    def forward(self, x):
        return x * x  # mul saves both operands: one storage, counted once


class ViewSin(nn.Module):
    def forward(self, x):
        return torch.sin(x.view(-1))  # sin saves a view of the input's storage


def product_loss(out, target):
    # The gradient of `out` needs only the (static) target; sum saves nothing.
    return (out * target).sum()


def small_chain():
    torch.manual_seed(0)
    chain = Chain.from_modules(
        {
            "proj": nn.Linear(3, 5, bias=False),
            "square": Square(),
            "viewsin": ViewSin(),
            "drop": nn.Dropout(0.5),
            "id": nn.Identity(),
        }
    )
    return chain, (torch.randn(2, 3), torch.randn(10))


def test_saved_bytes_match_hand_computed_sizes():
    chain, batch = small_chain()
    with torch.no_grad():
        ls = product_loss(chain(batch[0]), batch[1]).untyped_storage().nbytes()
    prof = profile(chain, batch, product_loss, iterations=2, warmup=1, link=LINK)
    # proj: saves the batch (static) and its weight (static): only its output, 2*5 floats.
    # square: its input twice (one storage, 40) + its output (40).
    # viewsin: a view of its input (the input's whole storage, 40) + its output (40).
    # drop: on CPU, dropout multiplies by a float noise tensor, which mul saves
    #   (40; a CUDA kernel would save a bool mask), + its output (40).
    # id + loss: the loss's storage only (its input is not saved, see product_loss).
    assert [layer.product_bytes for layer in prof.layers] == [40, 80, 80, 80, ls]
    assert prof.names == ("proj", "square", "viewsin", "drop", "id")
    assert all(layer.fwd_work_bytes == layer.bwd_work_bytes == 0 for layer in prof.layers)


def test_profile_is_valid_states_its_source_and_round_trips(tmp_path):
    ref = reference_model("gpt", "tiny")
    batch = ref.batch()
    prof = profile(ref.chain, batch, ref.loss_fn, iterations=3, warmup=1, link=LINK, name="gpt")
    assert isinstance(prof, planopt.Profile) and prof.name == "gpt"
    assert len(prof) == len(ref.chain) and prof.device == LINK
    assert all(layer.fwd > 0 and layer.bwd > 0 for layer in prof.layers)
    for phrase in ("MEASURED", "on CPU", "median of 3", "saved_tensors_hooks", "given as 0"):
        assert phrase in prof.source
    path = tmp_path / "gpt.profile.json"
    planopt.save_profile(prof, path)
    assert planopt.load_profile(path).fingerprint == prof.fingerprint


def test_identical_blocks_share_a_signature_and_others_do_not():
    ref = reference_model("gpt", "tiny")
    prof = profile(ref.chain, ref.batch(), ref.loss_fn, iterations=1, warmup=0, link=LINK)
    embed, block0, block1, head = (layer.signature for layer in prof.layers)
    assert block0 == block1
    assert len({embed, block0, head}) == 3
    vgg = reference_model("vgg", "tiny")
    prof = profile(vgg.chain, vgg.batch(), vgg.loss_fn, iterations=1, warmup=0, link=LINK)
    sigs = {layer.name: layer.signature for layer in prof.layers}
    assert sigs["conv1_2"] != sigs["conv2_2"]  # other channels and input shape


def test_static_bytes_are_parameters_gradients_buffers_optimizer_and_batch():
    ref = reference_model("resnet", "tiny")
    x, y = ref.batch()
    params = sum(p.numel() * 4 for p in ref.chain.parameters())
    buffers = sum(b.numel() * b.element_size() for b in ref.chain.buffers())
    batch = x.numel() * 4 + y.numel() * 8
    prof = profile(ref.chain, (x, y), ref.loss_fn, iterations=1, warmup=0, link=LINK)
    assert prof.static_bytes == 2 * params + buffers + batch
    adam = torch.optim.Adam(ref.chain.parameters())
    assert static_bytes(ref.chain, (x, y), adam).optimizer == 2 * params  # before its first step
    sgd = torch.optim.SGD(ref.chain.parameters(), lr=0.1, momentum=0.9)
    assert static_bytes(ref.chain, (x, y), sgd).optimizer == params
    assert static_bytes(ref.chain, (x, y), torch.optim.SGD(ref.chain.parameters())).optimizer == 0


def test_profiling_leaves_rng_buffers_and_gradients_as_they_were():
    ref = reference_model("resnet", "tiny")
    chain = ref.chain
    before = copy.deepcopy(chain.state_dict())
    torch.manual_seed(123)
    rng = torch.get_rng_state()
    profile(chain, ref.batch(), ref.loss_fn, iterations=2, warmup=1, link=LINK)
    assert torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(before[k], v) for k, v in chain.state_dict().items())
    assert all(p.grad is None for p in chain.parameters())


def test_cpu_needs_the_link_from_the_caller_and_cuda_link_is_guarded():
    chain, batch = small_chain()
    with pytest.raises(ValueError, match="link: the host link of a CPU device"):
        profile(chain, batch, product_loss)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="measure_cuda_link: needs a CUDA device"):
            measure_cuda_link("cuda")


def test_bad_arguments_are_refused():
    chain, batch = small_chain()
    with pytest.raises(ValueError, match="iterations must be an integer >= 1, got 0"):
        profile(chain, batch, product_loss, iterations=0, link=LINK)
    with pytest.raises(ValueError, match="warmup must be an integer >= 0, got -1"):
        profile(chain, batch, product_loss, warmup=-1, link=LINK)
    with pytest.raises(TypeError, match=r"planopt\.runtime\.Chain"):
        profile(nn.Sequential(nn.Linear(3, 3)), batch, product_loss, link=LINK)


def test_progress_bar_goes_to_stderr(capsys):
    chain, batch = small_chain()
    profile(chain, batch, product_loss, iterations=1, warmup=0, link=LINK, progress=True)
    captured = capsys.readouterr()
    assert "profiling chain" in captured.err and captured.out == ""


def test_measured_profile_solves_and_its_plan_runs():
    ref = reference_model("mlp", "tiny")
    batch = ref.batch()
    prof = profile(ref.chain, batch, ref.loss_fn, iterations=2, warmup=1, link=LINK)
    budget = (planopt.min_budget(prof) + planopt.keep_all_peak(prof)) // 2
    solution = planopt.solve(prof, budget, "greedy")
    assert solution.plan is not None
    measured = measure(ref.chain, solution.plan, batch, ref.loss_fn, profile=prof, iterations=2)
    assert measured.step_seconds > 0 and math.isfinite(measured.loss)
    assert measured.peak_bytes <= solution.schedule.peak_bytes  # CPU: copies end at once
    ex = Executor(ref.chain, solution.plan, profile=prof, loss_fn=ref.loss_fn)
    ex(*batch).backward()
    assert ex.last_step.complete
