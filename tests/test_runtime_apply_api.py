"""apply / plan_model as a user meets them: blocks found, errors, undo, eval, regimes, autocast.

The in-place profile is also checked against the chain profiler
(`planopt.runtime.profile` on the same blocks wrapped as a `Chain`, the
existing reference): every block's products and gradients are the same.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the models extra (pip install transformers)")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402

import planopt  # noqa: E402
from planopt.errors import InvalidPlanError, PlanoptError, ProfileMismatchError  # noqa: E402
from planopt.plan import Plan  # noqa: E402
from planopt.runtime import (  # noqa: E402
    BlockError,
    GradRegimeError,
    GradRegimeWarning,
    apply,
    find_model_blocks,
    measure_step,
    plan_model,
    profile_in_place,
)
from planopt.runtime.regions import CallError, step_loss  # noqa: E402
from tests.tiny_models import tiny  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


def _profile(model, batch, loss_fn=None, **kw):
    return profile_in_place(model, batch, loss_fn, link=INSTANT, iterations=1, warmup=0, **kw)


# -- finding blocks ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "first", "how"),
    [
        ("gpt2", "transformer.h.0", "module-list"),
        ("llama", "model.layers.0", "module-list"),
        ("qwen2", "model.layers.0", "module-list"),
        ("bert", "bert.encoder.layer.0", "module-list"),
        ("neox", "gpt_neox.layers.0", "module-list"),
        ("resnet", "layer1.0", "stages"),
    ],
)
def test_blocks_are_found_in_every_family(family, first, how):
    model, _, _ = tiny(family)
    found = find_model_blocks(model)
    assert found.names[0] == first and found.how == how
    assert len(found) == (8 if family == "resnet" else 4)
    assert len({type(m) for m in found.modules}) == 1


def test_blocks_can_be_named_and_bad_names_are_refused():
    model, _, _ = tiny("resnet")
    found = find_model_blocks(model, ["layer1", "layer2"])
    assert found.modules == (model.layer1, model.layer2) and found.how == "given"
    with pytest.raises(BlockError, match="must be the name of a submodule"):
        find_model_blocks(model, ["layer9"])
    with pytest.raises(BlockError, match="must not contain one another"):
        find_model_blocks(model, ["layer1", "layer1.0"])
    with pytest.raises(BlockError, match="must hold repeated blocks"):
        find_model_blocks(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))


# -- the in-place profile against the chain profiler ----------------------------------


def test_in_place_blocks_measure_what_the_chain_profiler_measures():
    from planopt.runtime import Chain, profile
    from planopt.runtime.hf import _Block, _Gpt2Embed, _Head
    from planopt.runtime.models import lm_loss

    model, batch, _ = tiny("gpt2", size="act")
    body = model.transformer
    chain = Chain.from_blocks(
        [_Block(b) for b in body.h],
        prefix=_Gpt2Embed(body.wte, body.wpe, body.drop),
        suffix=_Head(body.ln_f, model.lm_head),
    )
    ids = batch["input_ids"]

    def shifted(out, b):  # the loss GPT2LMHeadModel computes from labels
        return lm_loss(out.logits[:, :-1], b["labels"][:, 1:])

    inplace = _profile(model, {"input_ids": ids, "labels": ids}, shifted).profile
    chained = profile(
        chain,
        (ids, ids),
        lambda logits, y: lm_loss(logits[:, :-1], y[:, 1:]),
        link=INSTANT,
        iterations=1,
        warmup=0,
        grads_to_none=True,
    )
    fields = ("out_bytes", "saved_bytes", "saves_input", "saves_output", "input_grad_bytes")
    for mine, theirs in zip(inplace.layers[1:-1], chained.layers[1:-1], strict=True):
        assert [getattr(mine, f) for f in fields] == [getattr(theirs, f) for f in fields]
        assert mine.param_grad_bytes == theirs.param_grad_bytes


# -- undo, eval, errors -----------------------------------------------------------------


def test_remove_restores_the_model_exactly():
    model, batch, _ = tiny("llama")
    prof = _profile(model, batch)
    custom = model.model.layers[1].forward  # a forward the user set on the instance
    model.model.layers[1].forward = custom
    assert model.config.use_cache
    before = {id(m): dict(m.__dict__) for m in model.modules()}
    n = len(prof.profile)
    handle = apply(model, Plan.build(["keep", *["recompute"] * (n - 2), "keep"]), prof)
    assert "forward" in model.__dict__ and not model.config.use_cache
    handle.remove()
    handle.remove()  # twice is harmless
    assert model.config.use_cache
    assert "forward" not in model.__dict__
    assert model.model.layers[1].forward is custom
    assert "forward" not in model.model.layers[0].__dict__
    assert {id(m): dict(m.__dict__) for m in model.modules()} == before


def test_eval_and_no_grad_run_the_model_as_written():
    model, batch, _ = tiny("gpt2")
    prof = _profile(model, batch)
    n = len(prof.profile)
    with apply(model, Plan.build(["keep", *["swap"] * (n - 2), "keep"]), prof) as handle:
        with torch.no_grad():
            a = model(**batch).logits
        model.eval()
        b = model(**batch).logits
        assert handle._current is None and handle.engines == {}
    model.train()
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, b)
    assert a.shape == b.shape


def test_mismatched_plans_and_profiles_are_refused():
    model, batch, _ = tiny("qwen2")
    prof = _profile(model, batch)
    n = len(prof.profile)
    with pytest.raises(InvalidPlanError, match="one entry per profile layer"):
        apply(model, Plan.build(["keep"] * (n - 1)), prof)
    other = planopt.random_chain(n, seed=1)
    with pytest.raises(ProfileMismatchError):
        apply(model, Plan.build(["keep"] * n, profile=other), prof)
    with pytest.raises(InvalidPlanError, match="outside its blocks can only be kept"):
        apply(model, Plan.build(["recompute", *["keep"] * (n - 1)]), prof)
    small, _, _ = tiny("qwen2", layers=2)
    with pytest.raises(ProfileMismatchError, match="measured on another model"):
        apply(small, Plan.build(["keep"] * n), prof)
    with pytest.raises(ProfileMismatchError, match="one layer per block"):
        apply(small, Plan.build(["keep"] * n), prof.profile)
    with pytest.raises(CallError, match="must carry a loss"):
        _profile(model, {"input_ids": batch["input_ids"]})
    assert issubclass(CallError, PlanoptError) and issubclass(BlockError, PlanoptError)
    assert "forward" not in model.__dict__  # nothing was left applied


# -- gradient regime ----------------------------------------------------------------------


def _loop(model, batch, steps, set_to_none):
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(steps):
        step_loss(model, batch, None).backward()
        opt.step()
        opt.zero_grad(set_to_none=set_to_none)


def test_the_loop_is_checked_against_the_profiles_gradient_regime():
    model, batch, _ = tiny("bert")
    prof = _profile(model, batch, grads_to_none=True)
    plan = Plan.build(["keep"] * len(prof.profile))
    with apply(copy.deepcopy(model), plan, prof) as h, warnings.catch_warnings():
        warnings.simplefilter("error")
        _loop(h.model, batch, 3, set_to_none=True)  # the profile's regime: silent
    with apply(copy.deepcopy(model), plan, prof) as h, pytest.warns(GradRegimeWarning):
        _loop(h.model, batch, 2, set_to_none=False)
    with (
        apply(copy.deepcopy(model), plan, prof, check_regime="raise") as h,
        pytest.raises(GradRegimeError, match="set to None between steps"),
    ):
        _loop(h.model, batch, 2, set_to_none=False)
    # A profile saved to a file and loaded back keeps its regime (in its source).
    with (
        apply(copy.deepcopy(model), plan, prof.profile, check_regime="raise") as h,
        pytest.raises(GradRegimeError),
    ):
        _loop(h.model, batch, 2, set_to_none=False)
    assert prof.grad_regime == "none"


# -- autocast and gradient accumulation ---------------------------------------------------


def test_autocast_and_gradient_accumulation_stay_bitwise():
    model, batch, _ = tiny("gpt2")
    prof = _profile(model, batch, grads_to_none=False)
    n = len(prof.profile)
    plan = Plan.build(["keep", "recompute", "swap", "recompute", "recompute", "keep"][:n])

    def train(m, handle=None):
        torch.manual_seed(3)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(2):
            for _ in range(2):  # two micro-batches per step
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = step_loss(m, batch, None) / 2
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
        if handle is not None:
            handle.remove()
        return [p.detach().clone() for p in m.parameters()]

    plain = train(copy.deepcopy(model))
    m = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        planned = train(m, apply(m, plan, prof))
    assert all(torch.equal(a, b) for a, b in zip(plain, planned, strict=True))


# -- selective checkpointing of a partial option (cost model v3) ---------------------------


@pytest.mark.parametrize("policy", [(), (0, 2, 5, 9), tuple(range(200))])
def test_a_partial_option_policy_recomputes_bitwise(policy):
    from torch.utils.checkpoint import checkpoint

    from planopt.runtime.checkpointing import sac_context

    model, _, _ = tiny("llama")
    block = model.model.layers[0]
    x = torch.randn(2, 16, 32, requires_grad=True)
    pos = model.model.rotary_emb(x, torch.arange(16)[None])

    def grads(fn):
        torch.manual_seed(0)
        out = fn(x)
        (g,) = torch.autograd.grad(out.square().sum(), [x])
        return g

    plain = grads(lambda h: block(h, position_embeddings=pos))
    sac = grads(
        lambda h: checkpoint(
            lambda t: block(t, position_embeddings=pos),
            h,
            use_reentrant=False,
            context_fn=lambda: sac_context(policy),
        )
    )
    assert torch.equal(plain, sac)


# -- plan_model: from a Hugging Face model to training under a plan ------------------------


SMALL = dict(
    intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2
)
FAST = dict(link=INSTANT, iterations=1, warmup=0)  # a user leaves these out


def test_plan_model_from_a_hugging_face_model_in_under_ten_lines():
    from transformers import LlamaConfig, LlamaForCausalLM

    def user_code(budget):
        # ---- what a user writes: 9 lines from a transformers model to a planned loop ----
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, **SMALL))
        ids = torch.randint(64, (8, 64), generator=torch.Generator().manual_seed(1))
        batch = {"input_ids": ids, "labels": ids}
        optimizer = torch.optim.AdamW(model.parameters())
        handle = plan_model(model, batch, budget=budget, **FAST) if budget else None
        losses = []
        for _ in range(3):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.detach())
        return model, batch, handle, losses

    _, _, _, plain = user_code(None)
    model, batch, handle, planned = user_code("65%")
    assert all(torch.equal(a, b) for a, b in zip(plain, planned, strict=True))
    sol = handle.solution
    assert sol.plan is handle.plan and sol.schedule.feasible
    assert set(handle.plan.actions[1:-1]) != {planopt.Action.KEEP}  # it planned something
    measured = measure_step(model, batch, handle=handle)
    assert measured.peak_bytes <= sol.budget
    assert abs(measured.error) <= 0.005
    handle.remove()


def test_a_saving_policy_holds_more_than_a_recomputing_one():
    """The SAC policy is not vacuous: saving every op holds more after the forward."""
    from torch.utils.checkpoint import checkpoint

    from planopt.runtime.checkpointing import sac_context
    from planopt.runtime.tracker import LiveMemory

    model, _, _ = tiny("llama", size="act")
    block = model.model.layers[0]
    x = torch.randn(8, 64, 32, requires_grad=True)
    pos = model.model.rotary_emb(x, torch.arange(64)[None])
    held = {}
    for name, policy in (("none", ()), ("all", tuple(range(500)))):
        lives = LiveMemory()
        lives.track([x, *pos], planopt.runtime.Category.BATCH)
        with lives:
            out = checkpoint(
                lambda t: block(t, position_embeddings=pos),
                x,
                use_reentrant=False,
                context_fn=lambda p=policy: sac_context(p),
            )
        held[name] = lives.current - out.untyped_storage().nbytes()
        del out
    assert held["all"] > held["none"] + 500_000


# -- solve_pinned: the prefix and suffix are kept, the plan fits the real profile ------------


@pytest.mark.parametrize("seed", range(6))
def test_solve_pinned_keeps_prefix_and_suffix_and_fits_the_real_profile(seed):
    from planopt.runtime import solve_pinned
    from planopt.runtime.planmodel import solving_profile

    prof = planopt.random_chain(8, seed=seed, version=2)
    solving = solving_profile(prof)
    assert solving.static_bytes == (
        prof.static_bytes + prof.layers[0].saved_bytes + prof.layers[0].out_bytes
    )
    for budget in ("60%", "80%"):
        try:
            sol = solve_pinned(prof, budget, "greedy", work_limit=1e6)
        except planopt.BudgetError as exc:
            assert "prefix and suffix kept" in str(exc) and exc.minimum > 0
            continue
        if sol.plan is None:
            continue
        actions = sol.plan.actions
        assert actions[0] is planopt.Action.KEEP and actions[-1] is planopt.Action.KEEP
        assert sol.plan.profile == prof.fingerprint
        schedule = planopt.simulate(prof, sol.plan, budget)
        assert schedule.feasible and schedule.peak_bytes == sol.schedule.peak_bytes


def test_two_forwards_then_one_backward_stay_bitwise():
    model, batch, _ = tiny("llama")
    prof = _profile(model, batch, grads_to_none=False)
    n = len(prof.profile)
    plan = Plan.build(["keep", "swap", "recompute", "recompute", "swap", "keep"][:n])

    def grads(m):
        torch.manual_seed(0)
        loss = step_loss(m, batch, None) + step_loss(m, batch, None)
        loss.backward()
        return [p.grad.clone() for p in m.parameters()]

    plain = grads(copy.deepcopy(model))
    m = copy.deepcopy(model)
    with apply(m, plan, prof):
        planned = grads(m)
    assert all(torch.equal(a, b) for a, b in zip(plain, planned, strict=True))


def test_solve_pinned_never_claims_optimal_for_the_real_profile():
    from planopt.runtime import solve_pinned

    prof = planopt.random_chain(6, seed=0, version=2)
    sol = solve_pinned(prof, "90%", "auto", work_limit=1e5)
    assert sol.plan is not None and sol.status is planopt.Status.FEASIBLE
    assert sol.lower_bound is None and "re-scored on the in-place profile" in sol.message


def test_a_batch_of_another_shape_is_warned_about_once():
    from planopt.runtime import InputShapeWarning

    model, batch, _ = tiny("gpt2")
    prof = _profile(model, batch)
    plan = Plan.build(["keep"] * len(prof.profile))
    short = {k: v[:, :8] for k, v in batch.items()}
    with apply(model, plan, prof), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step_loss(model, batch, None).backward()  # the profiled shape: silent
        assert not [w for w in caught if w.category is InputShapeWarning]
        step_loss(model, short, None).backward()
        step_loss(model, short, None).backward()
    shape = [w for w in caught if w.category is InputShapeWarning]
    assert len(shape) == 1 and "float32[2, 8, 32]" in str(shape[0].message)


class _Boom(nn.Module):
    """A block that can be told to raise (an out-of-memory error, a bad input)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fail = False

    def forward(self, x):
        if self.fail:
            raise RuntimeError("boom")
        return torch.relu(self.fc(x)) + x


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Boom() for _ in range(4))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_a_forward_that_raises_inside_a_recompute_run_leaves_no_hooks_behind():
    torch.manual_seed(0)
    net = _Net()
    x, y = torch.randn(4, 8), torch.randint(2, (4,))

    def loss_fn(out, batch):
        return torch.nn.functional.cross_entropy(out, batch[1])

    prof = _profile(net, (x, y), loss_fn)
    plan = Plan.build(["keep", "recompute", "recompute", "recompute", "swap", "keep"])
    plain = copy.deepcopy(net)
    step_loss(plain, (x, y), loss_fn).backward()
    with apply(net, plan, prof):
        net.blocks[2].fail = True
        with pytest.raises(RuntimeError, match="boom"):
            step_loss(net, (x, y), loss_fn)
        assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
        net.blocks[2].fail = False
        step_loss(net, (x, y), loss_fn).backward()
    for a, b in zip(plain.parameters(), net.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_a_block_run_twice_in_a_step_is_refused():
    from planopt.runtime.applystep import PlanCallError
    from planopt.runtime.counting import ChainError

    class Twice(_Net):
        def forward(self, x):
            for block in [*self.blocks, self.blocks[0]]:
                x = block(x)
            return self.head(x)

    torch.manual_seed(0)
    net, batch = Twice(), (torch.randn(4, 8), torch.randint(2, (4,)))

    def loss_fn(out, b):
        return torch.nn.functional.cross_entropy(out, b[1])

    with pytest.raises(ChainError, match="must run once per step"):
        _profile(net, batch, loss_fn)
    prof = _profile(_Net(), batch, loss_fn)
    with apply(net, Plan.build(["keep"] * 6), prof.profile), pytest.raises(PlanCallError):
        step_loss(net, batch, loss_fn)
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
