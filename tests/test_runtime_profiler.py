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
from torch.nn import functional as F  # noqa: E402

import planopt  # noqa: E402
from planopt.io import profile_to_dict  # noqa: E402
from planopt.runtime import Chain, ChainError, Executor, reference_model  # noqa: E402
from planopt.runtime.link import measure_cuda_link  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.memory import static_bytes  # noqa: E402
from planopt.runtime.profiler import profile, profile_with_release  # noqa: E402

LINK = planopt.Device("pcie-given", 2.5e10, 2.0e10, 1e-5)


class Square(nn.Module):
    def forward(self, x):
        return x * x  # mul saves both operands: the input's storage, once


class ViewSin(nn.Module):
    def forward(self, x):
        return torch.sin(x.view(-1))  # sin saves a view of the input: still the input


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        return x + self.fc(torch.relu(x))  # relu saves r, fc saves r too: one internal


def product_loss(out, target):
    # The gradient of `out` needs only the (static) target; sum saves nothing.
    return (out * target).sum()


def small_chain():
    torch.manual_seed(0)
    chain = Chain.from_modules(
        {
            "proj": nn.Linear(3, 5, bias=False),
            "lin": nn.Linear(5, 5),
            "relu": nn.ReLU(),
            "drop": nn.Dropout(0.5),
            "norm": nn.LayerNorm(5),
            "res": Residual(),
            "inplace": nn.Sequential(nn.Linear(5, 5), nn.ReLU(inplace=True)),
            "square": Square(),
            "viewsin": ViewSin(),
        }
    )
    return chain, (torch.randn(2, 3), torch.randn(10))


def test_products_are_classified_by_storage():
    """Every activation is 2 x 5 float32 = 40 bytes; hand-derived from what each op saves."""
    chain, batch = small_chain()
    prof = profile(chain, batch, product_loss, iterations=1, warmup=0, link=LINK)
    got = {
        layer.name: (layer.out_bytes, layer.saved_bytes, layer.saves_input, layer.saves_output)
        for layer in prof.layers
    }
    assert got == {
        # the batch and the weight only: both static
        "proj": (40, 0, False, False),
        # Linear: its input
        "lin": (40, 0, True, False),
        # ReLU: its output
        "relu": (40, 0, False, True),
        # Dropout: the mask (on CPU a float noise tensor, 40 bytes), an internal
        "drop": (40, 40, False, False),
        # LayerNorm: its input, plus mean and rstd (2 x 1 float32 each)
        "norm": (40, 16, True, False),
        # x + fc(relu(x)): relu's output, saved by relu and by fc, counted once
        "res": (40, 40, False, False),
        # Linear then an in-place ReLU: the ReLU's saved result is the output's storage
        "inplace": (40, 0, True, True),
        # x * x: the input, saved twice, one storage
        "square": (40, 0, True, False),
        # sin(x.view(-1)) and the loss: a view of the input is the input; the loss is 4 B
        "viewsin": (4, 0, True, False),
    }
    assert prof.layers[0].input_grad_bytes == 0  # the batch needs no gradient
    assert all(layer.input_grad_bytes == 40 for layer in prof.layers[1:])


def test_parameter_gradients_per_layer_or_in_static():
    chain, batch = small_chain()
    to_none = profile(
        chain, batch, product_loss, iterations=1, warmup=0, link=LINK, grads_to_none=True
    )
    kept = profile(chain, batch, product_loss, iterations=1, warmup=0, link=LINK)
    per_layer = [layer.param_grad_bytes for layer in to_none.layers]
    # proj 3x5; lin, res, inplace 5x5 + 5; norm 5 + 5
    assert per_layer == [60, 120, 0, 0, 40, 120, 120, 0, 0]
    assert all(layer.param_grad_bytes == 0 for layer in kept.layers)
    assert kept.static_bytes - to_none.static_bytes == sum(per_layer)
    assert "set to None" in to_none.source and "zeroed in place" in kept.source


def test_backward_release_is_what_a_multi_node_layer_frees_before_its_gradients():
    """Linear-ReLU-Dropout, gradients set to None: the dropout node frees its
    mask (40 B) and the relu node the relu output (40 B) before the linear node
    allocates the input's and the parameters' gradients; the incoming gradient
    is freed as the next one of its size is made. The model, holding all of it
    to the end, is 80 B above PyTorch: the release. With gradients kept the
    parameter gradient is a temporary added in place: scratch, no release."""
    torch.manual_seed(0)
    chain = Chain.from_modules(
        {
            "proj": nn.Linear(3, 5, bias=False),
            "block": nn.Sequential(nn.Linear(5, 5), nn.ReLU(), nn.Dropout(0.5)),
            "head": nn.Linear(5, 5),
        }
    )
    batch = (torch.randn(2, 3), torch.randn(2, 5))
    options = dict(iterations=1, warmup=0, link=LINK)
    prof, release = profile_with_release(chain, batch, product_loss, grads_to_none=True, **options)
    assert release == (0, 80, 0)
    assert prof.layers[1].bwd_work_bytes == 0
    plain = profile(chain, batch, product_loss, grads_to_none=True, signed_scratch=False, **options)
    sizes = [
        (lay.out_bytes, lay.saved_bytes, lay.param_grad_bytes, lay.bwd_work_bytes)
        for lay in prof.layers
    ]
    assert sizes == [
        (lay.out_bytes, lay.saved_bytes, lay.param_grad_bytes, lay.bwd_work_bytes)
        for lay in plain.layers
    ]
    _, kept = profile_with_release(chain, batch, product_loss, **options)
    assert kept == (0, 0, 0)
    # profile()'s default (cost model v3, 12.6): the release as a negative scratch, a /3 file
    signed = profile(chain, batch, product_loss, grads_to_none=True, **options)
    expected = [lay.bwd_work_bytes - r for lay, r in zip(plain.layers, release, strict=True)]
    assert [lay.bwd_work_bytes for lay in signed.layers] == expected == [0, -80, 40]
    assert profile_to_dict(signed)["format"] == "planopt.profile/3"
    assert "Backward scratch signed" in signed.source


class FlattenOwn(nn.Module):
    def forward(self, x):
        return x.flatten(1)  # a view, from a module Chain cannot know by its type


class ReluOwn(nn.Module):
    def forward(self, x):
        return x.relu_()  # in place


class IdentityOwn(nn.Module):
    def forward(self, x):
        return x


@pytest.mark.parametrize(
    "layer",
    [FlattenOwn(), ReluOwn(), IdentityOwn()],
    ids=["view", "in-place", "identity"],
)
def test_layer_returning_its_input_storage_is_refused(layer):
    """(torch's own Flatten, in-place ReLU and Identity are fused: `test_runtime_fusion.py`.)"""
    torch.manual_seed(0)
    chain = Chain.from_modules({"lin": nn.Linear(3, 5), "alias": layer, "out": nn.Linear(5, 2)})
    batch = (torch.randn(2, 3), torch.randn(2, 2))
    with pytest.raises(ChainError, match=r"layer 1 \(alias\): a layer's output must be a new"):
        profile(chain, batch, F.mse_loss, iterations=1, warmup=0, link=LINK)


def test_profile_is_valid_states_its_source_and_round_trips(tmp_path):
    ref = reference_model("gpt", "tiny")
    batch = ref.batch()
    prof = profile(ref.chain, batch, ref.loss_fn, iterations=3, warmup=1, link=LINK, name="gpt")
    assert isinstance(prof, planopt.Profile) and prof.name == "gpt"
    assert len(prof) == len(ref.chain) and prof.device == LINK
    assert all(layer.fwd > 0 and layer.bwd > 0 for layer in prof.layers)
    for phrase in ("MEASURED", "on CPU", "median of 3", "saved_tensors_hooks", "tracker"):
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


def test_static_bytes_are_parameters_gradients_buffers_optimizer_batch_and_loss():
    ref = reference_model("resnet", "tiny")
    x, y = ref.batch()
    params = sum(p.numel() * 4 for p in ref.chain.parameters())
    buffers = sum(b.numel() * b.element_size() for b in ref.chain.buffers())
    batch = x.numel() * 4 + y.numel() * 8
    loss = 4 + 4  # the scalar loss and the gradient backward() seeds it with
    prof = profile(ref.chain, (x, y), ref.loss_fn, iterations=1, warmup=0, link=LINK)
    assert prof.static_bytes == 2 * params + buffers + batch + loss
    adam = torch.optim.Adam(ref.chain.parameters())
    # Before its first step: two moments and a float32 step counter per parameter (on CPU).
    tensors = len(list(ref.chain.parameters()))
    assert static_bytes(ref.chain, (x, y), adam).optimizer == 2 * params + 4 * tensors
    ref.chain.loss(x, y, ref.loss_fn).backward()
    adam.step()
    assert static_bytes(ref.chain, (x, y), adam).optimizer == 2 * params + 4 * tensors
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
    with pytest.raises(ValueError, match="profile: link is required on a cpu device"):
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
    with pytest.raises(ValueError, match=r"planopt\.runtime\.Chain"):
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
    # CPU copies end at once, as the link's latency and bandwidth say they may
    assert measured.peak_bytes <= solution.schedule.peak_bytes
    ex = Executor(ref.chain, solution.plan, profile=prof, loss_fn=ref.loss_fn)
    ex(*batch).backward()
    assert ex.last_step.complete
