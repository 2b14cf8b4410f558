"""The executor trains exactly like plain PyTorch under any plan, and refuses wrong plans.

Truth is plain PyTorch: the same chain, seed and batch, `loss_fn(chain(x),
y).backward()`. On CPU every operator used here is deterministic and the
executor only moves or regenerates the tensors autograd saves, so loss,
gradients, buffers (batch-norm statistics) and the RNG state after the step
must be bitwise equal, dropout under recomputation included.
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

import planopt  # noqa: E402
from planopt import InvalidPlanError, Plan, ProfileMismatchError  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE, SWAP, need_indices  # noqa: E402
from planopt.runtime import Chain, Executor, RecomputeError, reference_model  # noqa: E402
from planopt.runtime.engines import copy_engine  # noqa: E402
from planopt.runtime.layers import ReleasedError  # noqa: E402
from planopt.runtime.models import REFERENCE_MODELS  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402
from planopt.runtime.swap import CudaCopies, SyncCopies  # noqa: E402
from planopt.simulate import Scorer  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


@functools.cache
def setup(name: str):
    """(reference model, batch, profile with unit times) for a tiny model."""
    ref = reference_model(name, "tiny", seed=1)
    batch = ref.batch(seed=2)
    prof = profile(ref.chain, batch, ref.loss_fn, iterations=1, warmup=0, link=INSTANT, name=name)
    unit = prof.replace_layers(
        [dataclasses.replace(layer, fwd=1.0, bwd=1.0) for layer in prof.layers]
    )
    return ref, batch, unit


def plain_step(chain, batch, loss_fn, seed):
    torch.manual_seed(seed)
    loss = chain.loss(*batch, loss_fn)
    loss.backward()
    return loss, torch.get_rng_state()


def executor_step(chain, plan, batch, loss_fn, seed, **kw):
    ex = Executor(chain, plan, loss_fn=loss_fn, **kw)
    torch.manual_seed(seed)
    with ex:
        loss = ex(*batch)
        loss.backward()
    return loss, torch.get_rng_state(), ex


def assert_same_training(a: Chain, b: Chain) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None, name
        assert torch.equal(p.grad, q.grad), name
    for (name, u), v in zip(a.named_buffers(), b.buffers(), strict=True):
        assert torch.equal(u, v), name


@settings(max_examples=32, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(REFERENCE_MODELS), seed=st.integers(0, 3))
def test_any_plan_trains_exactly_like_plain_pytorch(data, name, seed):
    ref, batch, unit = setup(name)
    plan = data.draw(plans(unit))
    plain, mine = copy.deepcopy(ref.chain), copy.deepcopy(ref.chain)
    loss_a, rng_a = plain_step(plain, batch, ref.loss_fn, seed)
    loss_b, rng_b, ex = executor_step(mine, plan, batch, ref.loss_fn, seed, profile=unit)
    assert torch.equal(loss_a, loss_b)
    assert torch.equal(rng_a, rng_b)
    assert_same_training(plain, mine)
    stats = ex.last_step
    assert stats.complete and stats.held_at_end == 0
    assert stats.copies_out == plan.count(SWAP) == stats.copies_back
    assert stats.recomputed_layers == plan.count(RECOMPUTE)


@pytest.mark.parametrize("name", ["gpt", "mlp"])
def test_dropout_is_active_and_reproduced_under_recompute(name):
    ref, batch, unit = setup(name)
    plan = Plan.build([RECOMPUTE] * len(unit), profile=unit)
    chain = copy.deepcopy(ref.chain)
    losses = set()
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad():
            losses.add(float(chain.loss(*batch, ref.loss_fn)))
    assert len(losses) == 2  # dropout changes the loss with the seed: it is really on
    plain, mine = copy.deepcopy(ref.chain), copy.deepcopy(ref.chain)
    loss_a, _ = plain_step(plain, batch, ref.loss_fn, 7)
    loss_b, _, _ = executor_step(mine, plan, batch, ref.loss_fn, 7, profile=unit)
    assert torch.equal(loss_a, loss_b)
    assert_same_training(plain, mine)


def test_batch_norm_statistics_are_updated_once_under_recompute():
    ref, batch, unit = setup("resnet")
    plan = Plan.build([RECOMPUTE] * len(unit), profile=unit)
    plain, mine = copy.deepcopy(ref.chain), copy.deepcopy(ref.chain)
    plain_step(plain, batch, ref.loss_fn, 0)
    executor_step(mine, plan, batch, ref.loss_fn, 0, profile=unit)
    tracked = [b for n, b in mine.named_buffers() if n.endswith("num_batches_tracked")]
    assert tracked and all(int(b) == 1 for b in tracked)
    assert_same_training(plain, mine)


def test_wrapper_module_without_loss_fn_matches_plain():
    """The loss outside the executor: the chain's output is the last layer's."""
    ref, batch, unit = setup("vgg")
    n = len(ref.chain)
    acts = [SWAP, RECOMPUTE, KEEP] * (n // 3) + [RECOMPUTE] * (n % 3)
    plan = Plan.build(acts, need_indices(acts, unit))
    plain, mine = copy.deepcopy(ref.chain), copy.deepcopy(ref.chain)
    loss_a, _ = plain_step(plain, batch, ref.loss_fn, 3)
    # The profile was measured with the loss fused into the last layer: its
    # readers are the same, its sizes are not (verify=False).
    ex = Executor(mine, plan, profile=unit, verify=False)
    torch.manual_seed(3)
    loss_b = ref.loss_fn(ex(batch[0]), batch[1])
    loss_b.backward()
    assert torch.equal(loss_a, loss_b)
    assert_same_training(plain, mine)
    assert ex.last_step.complete
    assert list(ex.parameters()) == list(mine.parameters())


def test_no_grad_forward_is_plain_inference():
    ref, batch, unit = setup("gpt")
    n = len(ref.chain)
    plan = Plan.build([SWAP] * n, [n - 1] * n, profile=unit)
    ex = Executor(ref.chain, plan, profile=unit, loss_fn=ref.loss_fn)
    ref.chain.eval()
    try:
        with torch.no_grad():
            assert torch.equal(ex(*batch), ref.chain.loss(*batch, ref.loss_fn))
    finally:
        ref.chain.train()
    assert ex.last_step is None  # no step was run under the plan


def test_swap_on_a_machine_without_cuda_runs_with_no_streams(monkeypatch):
    """CPU swap: synchronous host copies; the CUDA-only path is never entered."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the test is about machines without it")

    def forbidden(*args, **kwargs):
        raise AssertionError("a CUDA stream or event was created on a machine without CUDA")

    monkeypatch.setattr(torch.cuda, "Stream", forbidden)
    monkeypatch.setattr(torch.cuda, "Event", forbidden)
    ref, batch, unit = setup("gpt")
    n = len(unit)
    waits = [i + 1 if i + 1 < n else None for i in range(n)]
    plan = Plan.build([SWAP] * n, [n - 1] * n, waits, profile=unit)
    plain, mine = copy.deepcopy(ref.chain), copy.deepcopy(ref.chain)
    plain_step(plain, batch, ref.loss_fn, 0)
    _, _, ex = executor_step(mine, plan, batch, ref.loss_fn, 0, profile=unit)
    assert_same_training(plain, mine)
    scorer = Scorer(unit)
    runs = scorer.runs(plan.actions)
    assert ex.last_step.copies_out == n and ex.last_step.bytes_out == sum(
        scorer.copy_bytes(i, runs) for i in range(n)
    )
    assert isinstance(copy_engine(torch.device("cpu")), SyncCopies)


def test_cuda_only_paths_are_named_and_guarded():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match=r"CudaCopies: swapping on cuda needs CUDA"):
        CudaCopies(torch.device("cuda"))
    with pytest.raises(RuntimeError, match="CudaCopies"):
        copy_engine(torch.device("cuda"))


# -- refusing plans that do not belong to the chain ---------------------------------


def test_plan_made_for_another_profile_is_refused():
    ref, _, unit = setup("mlp")
    first = dataclasses.replace(unit.layers[0], out_bytes=unit.layers[0].out_bytes + 1)
    other = unit.replace_layers([first, *unit.layers[1:]])
    plan = Plan.keep_all(other)
    with pytest.raises(ProfileMismatchError, match="was made for profile"):
        Executor(ref.chain, plan, profile=unit)


def test_fingerprinted_plan_without_its_profile_is_refused():
    ref, _, unit = setup("mlp")
    with pytest.raises(ProfileMismatchError, match="pass profile="):
        Executor(ref.chain, Plan.keep_all(unit))


def test_plan_of_another_length_is_refused():
    ref, _, _ = setup("mlp")
    n = len(ref.chain)
    with pytest.raises(InvalidPlanError, match=rf"one entry per chain layer \({n}\), got {n + 1}"):
        Executor(ref.chain, Plan.build([KEEP] * (n + 1)))


def test_profile_of_another_chain_is_refused():
    mlp, _, _ = setup("mlp")
    _, _, gpt_profile = setup("gpt")
    assert len(mlp.chain) == len(gpt_profile)
    with pytest.raises(ProfileMismatchError, match=r"layer 0 \(fc0\): profile layer name"):
        Executor(mlp.chain, Plan.keep_all(gpt_profile), profile=gpt_profile)


def test_plan_with_other_layer_names_is_refused():
    ref, _, _ = setup("mlp")
    n = len(ref.chain)
    plan = Plan(tuple([KEEP] * n), (None,) * n, (None,) * n, names=("a",) * n)
    with pytest.raises(InvalidPlanError, match=r"layer 0 \(fc0\): name must match the chain"):
        Executor(ref.chain, plan)


def test_profile_measured_on_another_batch_shape_is_refused_at_the_first_step():
    ref, _, unit = setup("mlp")
    ex = Executor(ref.chain, Plan.keep_all(unit), profile=unit, loss_fn=ref.loss_fn)
    x, y = ref.batch(seed=0, batch_size=ref.batch_size * 2)
    for _ in range(2):  # refused again: a failed check is not a passed one
        with pytest.raises(ProfileMismatchError, match=r"layer 0 \(fc0\): products must"):
            ex(x, y)
        assert ex.last_step is not None and not ex.last_step.complete  # the step was released
    ex(*ref.batch(seed=0)).backward()  # the profiled shape passes
    ref.chain.zero_grad(set_to_none=True)


def test_second_backward_through_released_tensors_is_an_error():
    ref, batch, unit = setup("mlp")
    plan = Plan.build([SWAP, RECOMPUTE, RECOMPUTE, KEEP], [3, None, None, None], profile=unit)
    ex = Executor(ref.chain, plan, profile=unit, loss_fn=ref.loss_fn)
    loss = ex(*batch)
    loss.backward(retain_graph=True)
    with pytest.raises(ReleasedError, match="one backward per forward"):
        loss.backward()
    ref.chain.zero_grad(set_to_none=True)


def test_forward_without_backward_releases_everything_at_context_exit():
    ref, batch, unit = setup("gpt")
    plan = Plan.build([SWAP, RECOMPUTE, KEEP, SWAP], [3, None, None, 3], profile=unit)
    ex = Executor(ref.chain, plan, profile=unit, loss_fn=ref.loss_fn)
    with ex:
        ex(*batch)
    assert not ex.last_step.complete
    assert ex.last_step.held_at_end == 0


def test_plan_that_swaps_without_a_profile_is_refused():
    ref, _, _ = setup("mlp")
    n = len(ref.chain)
    plan = Plan.build([RECOMPUTE] + [KEEP] * (n - 1))
    with pytest.raises(InvalidPlanError, match="needs profile="):
        Executor(ref.chain, plan, loss_fn=ref.loss_fn)


def test_input_changed_in_place_after_its_owner_was_swapped_is_an_error():
    """Layer 1 applies an in-place ReLU to its input, then saves it (its Linear).

    Swapped, layer 0's output was copied at the end of F_0, before the
    change: the copy back would give B_1 the wrong value, so the step stops
    (with the profiler's profile, which flags layer 1's `modifies_input`, the
    plan is refused as the executor is built: the in-place rule).
    Kept, autograd holds the changed tensor itself, as in plain PyTorch.
    """
    torch.manual_seed(0)
    chain = Chain.from_modules(
        {
            "lin": torch.nn.Linear(3, 5),
            "act": torch.nn.Sequential(torch.nn.ReLU(inplace=True), torch.nn.Linear(5, 2)),
        }
    )
    batch = (torch.randn(2, 3), torch.randn(2, 2))
    loss_fn = torch.nn.functional.mse_loss
    prof = profile(chain, batch, loss_fn, iterations=1, warmup=0, link=INSTANT)
    assert prof.layers[1].saves_input
    assert [layer.modifies_input for layer in prof.layers] == [False, True]
    with pytest.raises(InvalidPlanError, match="in-place rule"):
        Executor(chain, Plan.build([SWAP, KEEP], [1, None], profile=prof), profile=prof)
    prof = prof.replace_layers(
        [dataclasses.replace(layer, modifies_input=False) for layer in prof.layers]
    )
    swap = Plan.build([SWAP, KEEP], [1, None], profile=prof)
    ex = Executor(chain, swap, profile=prof, loss_fn=loss_fn)
    with pytest.raises(RecomputeError, match=r"layer 1 \(act\): a layer that modifies its input"):
        ex(*batch)
    plain, mine = copy.deepcopy(chain), copy.deepcopy(chain)
    plain_step(plain, batch, loss_fn, 0)
    executor_step(mine, Plan.keep_all(prof), batch, loss_fn, 0, profile=prof)
    assert_same_training(plain, mine)
