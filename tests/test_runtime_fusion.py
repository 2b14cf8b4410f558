"""Layers with no output of their own (views, in-place results) are fused, never refused.

A tutorial's `nn.Sequential` (Conv, BatchNorm, ReLU(inplace=True), MaxPool,
Flatten, Linear) is a chain as written: it profiles, plans and trains under
any plan exactly like plain PyTorch (gradients, batch-norm statistics and
the RNG bitwise), and the live-storage tracker's peak is the simulator's
within the fidelity benchmark's tolerance, as for the reference models
(`test_runtime_memory.py`).
"""

from __future__ import annotations

import copy
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
from planopt.runtime import Chain, ChainError, Executor  # noqa: E402
from planopt.runtime.fusion import passes_through  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)
OVER, UNDER = 0.02, 0.005  # the fidelity benchmark's tolerance


def tutorial_cnn() -> nn.Sequential:
    """A CNN as PyTorch's tutorials write it, in-place ReLUs, Flatten and dropout included."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 32),
        nn.Dropout(0.3, inplace=True),
        nn.ReLU(inplace=True),
        nn.Linear(32, 10),
    )


def tutorial_mlp() -> nn.Sequential:
    """The MNIST tutorial's MLP: a Flatten first (fused into the layer after it)."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Identity(), nn.Linear(32, 10)
    )


BATCHES = {
    "cnn": lambda: (torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))),
    "mlp": lambda: (torch.randn(4, 8, 8), torch.randint(0, 10, (4,))),
}
MODELS = {"cnn": tutorial_cnn, "mlp": tutorial_mlp}


@functools.cache
def setup(name: str):
    torch.manual_seed(0)
    chain = Chain.from_sequential(MODELS[name]())
    batch = BATCHES[name]()
    prof = profile(chain, batch, F.cross_entropy, iterations=1, warmup=0, link=INSTANT)
    unit = prof.replace_layers(
        [dataclasses.replace(layer, fwd=1.0, bwd=1.0) for layer in prof.layers]
    )
    return chain, batch, unit


def test_pass_through_layers_join_the_layer_before_or_the_first_after():
    chain, _, _ = setup("cnn")
    assert chain.names == (
        "conv2d0",
        "batchnorm2d1+relu2",
        "maxpool2d3",
        "conv2d4",
        "batchnorm2d5+relu6",
        "maxpool2d7+flatten8",
        "linear9+dropout10+relu11",
        "linear12",
    )
    mlp, _, _ = setup("mlp")
    assert mlp.names == ("flatten0+linear1", "relu2+identity3", "linear4")
    # the modules are the model's own, so the optimizer trains the user's model
    model = tutorial_cnn()
    fused = Chain.from_sequential(model)
    assert fused.layers[0] is model[0]
    assert list(fused.layers[1]) == [model[1], model[2]]
    assert {id(p) for p in fused.parameters()} == {id(p) for p in model.parameters()}


def test_which_modules_pass_through():
    assert passes_through(nn.Flatten()) and passes_through(nn.Identity())
    assert passes_through(nn.Unflatten(1, (2, 2)))
    assert passes_through(nn.ReLU(inplace=True)) and passes_through(nn.Dropout(0.5, True))
    assert passes_through(nn.Dropout(0.0)) and passes_through(nn.Sequential(nn.Identity()))
    assert not passes_through(nn.ReLU()) and not passes_through(nn.Dropout(0.5))
    assert not passes_through(nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True)))


def test_given_names_and_signatures_are_joined():
    layers = [nn.Identity(), nn.Linear(2, 2), nn.ReLU(inplace=True), nn.Linear(2, 2)]
    chain = Chain(layers, ["a", "b", "c", "d"], ["s", None, "t", "u"])
    assert chain.names == ("a+b+c", "d")
    assert chain.signatures == ("s+t", "u")
    chain = Chain.from_blocks(
        [nn.Linear(2, 2), nn.Linear(2, 2)], prefix=nn.Flatten(), suffix=nn.Identity()
    )
    assert chain.names == ("prefix+block0", "block1+suffix")
    assert Chain([nn.Identity(), nn.Flatten()]).names == ("0+1",)


class Reshape(nn.Module):
    """A layer of the user's own that returns a view: not known by type, still refused."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], -1)


def test_unknown_module_returning_a_view_is_refused_with_what_to_do():
    chain = Chain.from_modules({"lin": nn.Linear(3, 4), "alias": Reshape(), "out": nn.Linear(4, 2)})
    batch = (torch.randn(2, 3), torch.randn(2, 2))
    with pytest.raises(ChainError, match=r"layer 1 \(alias\): .*merge this module"):
        profile(chain, batch, F.mse_loss, iterations=1, warmup=0, link=INSTANT)


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(MODELS)), seed=st.integers(0, 3))
def test_any_plan_trains_bitwise_like_plain_pytorch_and_peaks_as_predicted(data, name, seed):
    chain, batch, unit = setup(name)
    plan = data.draw(plans(unit))
    plain, mine = copy.deepcopy(chain), copy.deepcopy(chain)
    torch.manual_seed(seed)
    want = plain.loss(*batch, F.cross_entropy)
    want.backward()
    want_rng = torch.get_rng_state()
    executor = Executor(mine, plan, profile=unit, loss_fn=F.cross_entropy)
    torch.manual_seed(seed)
    with executor:
        got = executor(*batch)
        got.backward()
    assert torch.equal(got, want)
    assert torch.equal(torch.get_rng_state(), want_rng)
    for (key, p), q in zip(plain.named_parameters(), mine.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), key
    for (key, u), v in zip(plain.named_buffers(), mine.buffers(), strict=True):
        assert torch.equal(u, v), key
    measured = measure(chain, plan, batch, F.cross_entropy, profile=unit, iterations=0, warmup=0)
    predicted = planopt.simulate(unit, plan).peak_bytes
    assert predicted >= measured.peak_bytes * (1 - UNDER)
    assert predicted <= measured.peak_bytes * (1 + OVER)


def test_a_solved_plan_below_the_keep_all_peak_runs_within_its_budget():
    chain, batch, unit = setup("cnn")
    solution = planopt.solve(unit, "80%")  # the parameters and batch are most of this model
    assert solution.plan is not None and set(solution.plan.actions) != {planopt.plan.KEEP}
    measured = measure(
        chain, solution.plan, batch, F.cross_entropy, profile=unit, iterations=0, warmup=0
    )
    assert measured.peak_bytes <= solution.schedule.peak_bytes * (1 + UNDER)
