"""A block's operator profile and menu, checked against torch's own SAC and the tracker.

Evidence from outside the code under test: the positions are compared with
the calls `create_selective_checkpoint_contexts` makes to its policy
function; each menu entry's bytes with what the live-storage tracker sees
held between the block's forward and backward under `checkpoint` with that
policy (a test fails on any difference, an under-prediction included); the
replay with the operators torch really re-runs; gradients with plain
autograd.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.checkpoint import (  # noqa: E402
    SAC_IGNORED_OPS,
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from planopt.runtime.models import reference_model  # noqa: E402
from planopt.runtime.opprofile import called_with, trace_block  # noqa: E402
from planopt.runtime.sac import held_under_policy, sac_context  # noqa: E402

BLOCKS = ("gpt", "hf-gpt2", "hf-llama")


def _block(name: str):
    """(block, input, kwargs): the reference GPT block, or a transformers block as called."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if name == "gpt":
            block = reference_model("gpt", "tiny").chain.layers[1]
            return block, torch.randn(2, 8, 16), {}
        transformers = pytest.importorskip("transformers")
        ids = torch.randint(97, (2, 16))
        if name == "hf-gpt2":
            config = transformers.GPT2Config(
                vocab_size=97,
                n_embd=32,
                n_head=4,
                n_layer=1,
                n_positions=16,
                bos_token_id=None,
                eos_token_id=None,
            )
            config._attn_implementation = "sdpa"
            model = transformers.GPT2Model(config).train()
            layer = model.h[0]
        else:
            config = transformers.LlamaConfig(
                vocab_size=97,
                hidden_size=32,
                intermediate_size=128,
                num_attention_heads=4,
                num_key_value_heads=2,
                num_hidden_layers=1,
                max_position_embeddings=16,
                bos_token_id=None,
                eos_token_id=None,
                pad_token_id=None,
            )
            config._attn_implementation = "sdpa"
            model = transformers.LlamaModel(config).train()
            layer = model.layers[0]
        args, kwargs = called_with(model, layer, input_ids=ids, use_cache=False)
        return layer, args[0].detach(), kwargs


def _static(kwargs):
    return [t for t in kwargs.values() if isinstance(t, torch.Tensor)] + [
        t for v in kwargs.values() if isinstance(v, tuple) for t in v if isinstance(t, torch.Tensor)
    ]


def _profile(name):
    block, x, kwargs = _block(name)
    ops = trace_block(block, (x.requires_grad_(True),), kwargs, static=_static(kwargs), repeats=1)
    return block, x, kwargs, ops


@pytest.mark.parametrize("name", BLOCKS)
def test_positions_are_the_calls_the_sac_policy_gets(name):
    block, x, kwargs, ops = _profile(name)
    seen = []

    def policy(ctx, op, *args, **kw):
        seen.append(str(op))
        return CheckpointPolicy.PREFER_RECOMPUTE

    def context():
        return create_selective_checkpoint_contexts(policy)

    checkpoint(block, x, use_reentrant=False, context_fn=context, **kwargs)
    assert seen == [op.op for op in ops.ops]
    assert [op.position for op in ops.ops] == list(range(len(seen)))


@pytest.mark.parametrize("name", BLOCKS)
def test_every_menu_entry_holds_what_the_tracker_sees(name):
    block, x, kwargs, ops = _profile(name)
    menu = ops.menu()
    assert len(menu) >= 10
    assert menu[0].saved_bytes == 0 and menu[-1].saved_bytes < ops.saved_bytes
    plain_x = x.detach().clone().requires_grad_(True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)  # the same dropout masks in every run
        out = block(plain_x, **kwargs)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(torch.ones_like(out))
    want = (plain_x.grad, *(p.grad for p in block.parameters()))
    block.zero_grad(set_to_none=True)
    for entry in menu:
        xx = x.detach().clone().requires_grad_(True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            run = held_under_policy(block, xx, entry.policy, kwargs)
        assert run.held == entry.saved_bytes, (entry.policy, run.held, entry.saved_bytes)
        torch.testing.assert_close(run.output, out.detach())
        for got, expected in zip(run.grads, want, strict=True):
            torch.testing.assert_close(got, expected)
        block.zero_grad(set_to_none=True)


class _Executed(TorchDispatchMode):
    """Below SAC's modes: the operators really run (a cached one never reaches it)."""

    def __init__(self) -> None:
        super().__init__()
        self.on = False
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.on and func not in SAC_IGNORED_OPS:
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", BLOCKS)
def test_the_replay_runs_exactly_the_unsaved_operators_before_the_cut(name):
    block, x, kwargs, ops = _profile(name)
    menu = ops.menu()
    for entry in (menu[0], menu[len(menu) // 2], menu[-1]):
        saved = set(entry.policy)
        replayed = _replayed(block, x.detach().clone().requires_grad_(True), kwargs, saved)
        assert replayed == [o.op for o in ops.ops[: ops.cut] if o.position not in saved]
    # without early stop the replay runs the whole forward, and the menu says so
    assert ops.cut < len(ops.ops)
    for entry in ops.menu(early_stop=False)[::5]:
        saved = set(entry.policy)
        xx = x.detach().clone().requires_grad_(True)
        replayed = _replayed(block, xx, kwargs, saved, early_stop=False)
        assert replayed == [o.op for o in ops.ops if o.position not in saved]


def _replayed(block, x, kwargs, saved, early_stop=True) -> list[str]:
    """The operators checkpoint's replay really runs under a policy saving `saved`."""
    executed = _Executed()
    calls = [0]

    def fn(h):
        calls[0] += 1
        executed.on = calls[0] == 2  # the replay
        try:
            return block(h, **kwargs)
        finally:
            executed.on = False

    with executed:
        out = checkpoint(
            fn, x, use_reentrant=False, context_fn=sac_context(sorted(saved)), early_stop=early_stop
        )
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
    return executed.ops


def test_the_whole_layer_internals_are_the_profilers_saved_bytes():
    from planopt.hardware import Device
    from planopt.runtime.profiler import profile

    ref = reference_model("gpt", "tiny")
    x, y = ref.batch()
    prof = profile(
        ref.chain,
        (x, y),
        ref.loss_fn,
        iterations=1,
        warmup=0,
        link=Device("pcie", 1e9, 1e9, 1e-5),
        menus=False,
    )
    h = ref.chain.layers[0](x)
    ops = trace_block(ref.chain.layers[1], (h.detach().requires_grad_(True),), repeats=1)
    assert ops.saved_bytes == prof.layers[1].saved_bytes


def test_the_fake_trace_on_a_named_gpu_counts_the_same_storages():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from planopt.hardware import gpu
    from planopt.runtime.fake import faked

    block, x, _, real = _profile("gpt")
    mode = FakeTensorMode()
    x = x.detach()
    with faked(block, mode), mode:
        fx = mode.from_tensor(x).requires_grad_(True)
        fake = trace_block(block, (fx,), gpu=gpu("h100-pcie"))
    assert [o.op for o in fake.ops] == [o.op for o in real.ops]
    assert fake.storage_bytes == real.storage_bytes
    assert (fake.saved, fake.cut) == (real.saved, real.cut)
    assert [o.storages for o in fake.ops] == [o.storages for o in real.ops]
    assert fake.lifetimes == real.lifetimes and real.lifetimes  # liveness on fake tensors too
    assert fake.overhead() == 0.0
    assert all(o.seconds > 0 for o in fake.ops if "addmm" in o.op or "bmm" in o.op)
    assert all(o.seconds == 0 for o in fake.ops if o.op in ("aten.view.default", "aten.t.default"))
    assert fake.menu()[0].saved_bytes == 0


class _Mutating(torch.nn.Module):
    """An output mutated later (in-place ReLU, `+=`): SAC cannot cache it."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        h = torch.relu_(h)
        out = self.b(h)
        out += h
        return torch.tanh(out) * 2


def test_an_output_mutated_later_is_never_saved_and_every_entry_runs():
    torch.manual_seed(0)
    block, x = _Mutating(), torch.randn(4, 8)
    ops = trace_block(block, (x.requires_grad_(True),), repeats=1)
    by_name = {o.op: o for o in ops.ops}
    assert not by_name["aten.relu_.default"].saveable
    assert not by_name["aten.add_.Tensor"].saveable
    assert not next(o for o in ops.ops if o.op == "aten.addmm.default").saveable  # relu_'d
    for entry in ops.menu():
        assert all(ops.ops[j].saveable for j in entry.policy)
        run = held_under_policy(block, x.detach().clone().requires_grad_(True), entry.policy)
        assert run.held == entry.saved_bytes


def test_bad_options_are_refused_with_the_rule():
    from planopt.errors import PlanoptError
    from planopt.hardware import Device
    from planopt.runtime.profiler import profile

    with pytest.raises(PlanoptError, match="timer must be one of wall, thread, got 'cpu'"):
        trace_block(torch.nn.Linear(2, 2), (torch.randn(1, 2),), timer="cpu")
    with pytest.raises(PlanoptError, match="repeats must be >= 1 and warmup >= 0, got 0, 1"):
        trace_block(torch.nn.Linear(2, 2), (torch.randn(1, 2),), repeats=0)
    ref = reference_model("mlp", "tiny")
    link = Device("pcie", 1e9, 1e9, 1e-5)
    with pytest.raises(PlanoptError, match="menu_size must be an integer >= 1 or None, got 0"):
        profile(ref.chain, ref.batch(), ref.loss_fn, iterations=1, warmup=0, link=link, menu_size=0)


def test_profile_attaches_each_block_class_menu_that_the_tracker_confirms():
    from planopt.hardware import Device
    from planopt.runtime.profiler import profile

    ref = reference_model("gpt", "tiny")
    x, y = ref.batch()
    link = Device("pcie", 1e9, 1e9, 1e-5)
    prof = profile(ref.chain, (x, y), ref.loss_fn, iterations=1, warmup=0, link=link)
    plain = profile(ref.chain, (x, y), ref.loss_fn, iterations=1, warmup=0, link=link, menus=False)
    assert not any(layer.options for layer in plain.layers)
    assert prof.layers[1].options == prof.layers[2].options  # one class, traced once
    assert all(1 <= len(layer.options) <= 8 for layer in prof.layers)
    with torch.no_grad():
        h = ref.chain.layers[0](x)
    block = ref.chain.layers[1]
    for option in prof.layers[1].options:
        run = held_under_policy(block, h.clone().requires_grad_(True), option.policy)
        assert run.held == option.saved_bytes < prof.layers[1].saved_bytes


def test_a_traced_blocks_roofline_forward_is_the_sum_of_its_operators():
    """No metadata operator (`prim.device`, which fake tensors dispatch) is costed as a kernel."""
    import functools

    from torch._subclasses.fake_tensor import FakeTensorMode

    from planopt.hardware import gpu
    from planopt.runtime.counting import TrainingStep
    from planopt.runtime.fake import faked, trace_profile

    ref = reference_model("gpt", "tiny")
    x, y = ref.batch()
    prof = trace_profile(ref.chain, (x, y), ref.loss_fn, gpu="h100-pcie", memory_as="cpu")
    mode = FakeTensorMode()
    with faked(ref.chain, mode), mode:
        fx, fy = mode.from_tensor(x), mode.from_tensor(y)
        run = TrainingStep(ref.chain, fx, fy, ref.loss_fn)
        with torch.no_grad():
            h = run.layer(0, fx)
        ops = trace_block(
            functools.partial(run.layer, 1),
            (h.detach().requires_grad_(True),),
            gpu=gpu("h100-pcie"),
        )
    assert prof.layers[1].fwd == pytest.approx(sum(o.seconds for o in ops.ops), rel=1e-9)


def test_a_gpu_trace_runs_dropout_as_cudas_fused_kernel():
    """CUDA's dropout is one `native_dropout` saving a bool mask; CPU's saves an fp32 noise."""
    from torch import nn

    from planopt.runtime.attention import gpu_kernels
    from planopt.runtime.chain import Chain
    from planopt.runtime.fake import trace_profile

    torch.manual_seed(0)
    chain = Chain.from_modules(
        [nn.Linear(8, 16), nn.Sequential(nn.Dropout(0.5), nn.Linear(16, 4)), nn.Linear(4, 4)]
    )
    x, y = torch.randn(64, 8), torch.randint(4, (64,))
    loss = torch.nn.functional.cross_entropy
    cpu = trace_profile(chain, (x, y), loss, gpu="h100-pcie", memory_as="cpu", menus=False)
    gpu = trace_profile(chain, (x, y), loss, gpu="h100-pcie", memory_as="gpu", menus=False)
    # the dropout's output (read by the Linear) plus its noise (fp32) or mask (bool)
    assert cpu.layers[1].saved_bytes == 64 * 16 * 4 + 64 * 16 * 4
    assert gpu.layers[1].saved_bytes == 64 * 16 * 4 + 64 * 16
    h = chain.layers[0](x).detach().requires_grad_(True)
    with gpu_kernels():
        ops = trace_block(chain.layers[1], (h,), repeats=1)
    names = [o.op for o in ops.ops]
    assert "aten.native_dropout.default" in names and "aten.bernoulli_.float" not in names
    dropout = ops.ops[names.index("aten.native_dropout.default")]
    assert dropout.random and dropout.saveable


def test_a_layer_that_changes_its_input_in_place_gets_its_menu():
    """The traced input is not a leaf, as in training (an in-place ReLU on a leaf is refused)."""
    from torch import nn

    from planopt.hardware import Device
    from planopt.runtime.chain import Chain
    from planopt.runtime.profiler import profile

    torch.manual_seed(0)
    chain = Chain.from_modules(
        [
            nn.Linear(8, 8),
            nn.Sequential(nn.ReLU(inplace=True), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8)),
            nn.Linear(8, 3),
        ]
    )
    x, y = torch.randn(4, 8), torch.randint(3, (4,))
    link = Device("pcie", 1e9, 1e9, 1e-5)
    loss = torch.nn.functional.cross_entropy
    prof = profile(chain, (x, y), loss, iterations=1, warmup=0, link=link)
    assert prof.layers[1].options and prof.layers[1].options[0].saved_bytes == 0


@pytest.mark.parametrize("model", ["mlp", "vgg", "resnet", "gpt", "hf-gpt2", "hf-llama"])
@pytest.mark.parametrize("how", ["measured", "traced-gpu"])
def test_each_traced_class_keeps_what_the_profilers_counting_step_counts(model, how, monkeypatch):
    """Two counts of a layer's internals agree: the operator trace's and the profile's."""
    import planopt.runtime.menus as menus
    from planopt.hardware import Device
    from planopt.runtime.fake import trace_profile
    from planopt.runtime.profiler import profile

    if model.startswith("hf-"):
        pytest.importorskip("transformers")
        from planopt.runtime.hf import hf_model

        ref = hf_model(model.removeprefix("hf-"), "tiny")
    else:
        ref = reference_model(model, "tiny")
    traced: list[int] = []
    original = menus.trace_block

    def trace(*args, **kwargs):
        ops = original(*args, **kwargs)
        traced.append(ops.saved_bytes)
        return ops

    monkeypatch.setattr(menus, "trace_block", trace)
    x, y = ref.batch()
    if how == "measured":
        link = Device("pcie", 1e9, 1e9, 1e-5)
        prof = profile(ref.chain, (x, y), ref.loss_fn, iterations=1, warmup=0, link=link)
    else:
        prof = trace_profile(
            ref.chain, (x, y), ref.loss_fn, gpu="h100-pcie", autocast=torch.bfloat16
        )
    by_class: dict[str | None, int] = {}
    for layer in prof.layers:
        by_class.setdefault(layer.signature, layer.saved_bytes)
    assert traced == list(by_class.values())


def test_a_layer_whose_menu_cannot_be_enumerated_is_left_whole_with_a_warning(monkeypatch):
    import planopt.sacmenu
    from planopt.hardware import Device
    from planopt.runtime.profiler import profile

    monkeypatch.setattr(planopt.sacmenu, "MAX_GROUP_STORAGES", 1)
    ref = reference_model("gpt", "tiny")
    x, y = ref.batch()
    link = Device("pcie", 1e9, 1e9, 1e-5)
    with pytest.warns(UserWarning) as warned:
        prof = profile(ref.chain, (x, y), ref.loss_fn, iterations=1, warmup=0, link=link)
    assert any(str(w.message).startswith("block0: no menu (menu: operators") for w in warned)
    assert prof.layers[1].options == () and prof.layers[1].saved_bytes > 0


def test_sac_never_caches_the_block_s_output_or_a_view_of_its_input():
    """SAC's cache would hold them to the end of the block's backward (the cost model
    frees the output after its last reader and regenerates or copies back the input)."""
    norm = torch.nn.LayerNorm(8)

    def block(x):
        return norm(x.view(4, 8) * 2.0)

    x = torch.randn(32, requires_grad=True).clone()
    ops = trace_block(block, (x,), static=list(norm.parameters()), repeats=1, warmup=0)
    by_name = {o.op: o for o in ops.ops}
    assert not by_name["aten.view.default"].saveable  # a view of the input
    assert not by_name["aten.native_layer_norm.default"].saveable  # returns the output
    assert by_name["aten.mul.Tensor"].saveable
    assert all(ops.ops[j].saveable for e in ops.menu() for j in e.policy)
