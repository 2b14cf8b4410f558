"""Menus on the in-place profile: block classes traced as their model calls them.

`profile_in_place` (and so `plan_model`) attaches each block class's SAC
menu (cost model v3). Evidence from outside the code under test: a plan
with options applied to an unmodified tiny GPT-2 / Llama trains bitwise as
plain PyTorch over 3 AdamW steps, and the live-storage tracker's measured
peak matches `planopt.simulate`'s prediction (same tolerance as
`test_runtime_apply_v3`); the positions are checked against the calls
`create_selective_checkpoint_contexts` makes to its policy inside the model.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the models extra (pip install transformers)")
pytestmark = pytest.mark.torch

import planopt  # noqa: E402
from planopt.plan import Plan  # noqa: E402
from planopt.runtime import (  # noqa: E402
    apply,
    applystep,
    measure_step,
    plan_model,
    profile_in_place,
)
from planopt.runtime.regions import step_loss  # noqa: E402
from tests.tiny_models import tiny  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


def _train(model, batch, make=None):
    torch.manual_seed(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    handle = make(model) if make else None
    for _ in range(3):
        step_loss(model, batch, None).backward()
        opt.step()
        opt.zero_grad()
    if handle is not None:
        handle.remove()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(
    ("family", "pick"),
    [
        *[(f, p) for f in ("gpt2", "llama") for p in ("low", "mixed", "high")],
    ],
)
def test_menu_options_train_bitwise_and_peak_as_predicted(family, pick):
    model, batch, _ = tiny(family, size="act")
    prof = profile_in_place(model, batch, link=INSTANT, iterations=1, warmup=0)
    layers = prof.profile.layers
    n = len(layers)
    assert prof.profile.is_v3
    menus = [layer.options for layer in layers[1:-1]]
    assert all(len(m) >= 3 for m in menus) and not layers[0].options and not layers[-1].options
    names = {
        "low": [m[0].name for m in menus],
        "mixed": [m[k % len(m)].name if k % 2 else None for k, m in enumerate(menus, 2)],
        "high": [m[-1].name for m in menus],
    }[pick]
    plan = Plan.build(["keep"] * n, options=[None, *names, None], profile=prof.profile)
    plain = _train(copy.deepcopy(model), batch)
    planned = _train(copy.deepcopy(model), batch, lambda m: apply(m, plan, prof))
    assert all(torch.equal(a, b) for a, b in zip(plain, planned, strict=True))
    m = copy.deepcopy(model)
    with apply(m, plan, prof) as handle:
        measured = measure_step(m, batch, handle=handle)
    assert measured.predicted_bytes == planopt.simulate(prof.profile, plan).peak_bytes
    assert -0.005 <= measured.error <= 0.03, (measured.peak_bytes, measured.predicted_bytes)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_positions_are_the_calls_apply_s_policy_gets(family, monkeypatch):
    """Inside the model, apply's SAC policy sees exactly the traced operators, in order."""
    model, batch, _ = tiny(family, size="act")
    prof = profile_in_place(model, batch, link=INSTANT, iterations=1, warmup=0, menu_size=None)
    from planopt.runtime.inplacemenus import block_trace

    block = model.transformer.h[1] if family == "gpt2" else model.model.layers[1]
    traced = [o.op for o in block_trace(model, batch, block, repeats=1).ops]
    calls: list[list[str]] = []

    def recording(policy, output_changed=False):
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

        seen: list[str] = []
        calls.append(seen)

        def fn(ctx, op, *a, **k):
            if not ctx.is_recompute:
                seen.append(str(op))
            return CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(fn)

    monkeypatch.setattr(applystep, "sac_context", recording)
    n = len(prof.profile)
    options = [None] * n
    options[2] = prof.profile.layers[2].options[0].name
    plan = Plan.build(["keep"] * n, options=options, profile=prof.profile)
    with apply(model, plan, prof):
        step_loss(model, batch, None).backward()
    assert len(calls) == 1
    assert calls[0] == traced


def test_menus_false_gives_the_old_v2_profile():
    model, batch, _ = tiny("llama", size="act")
    handle = plan_model(model, batch, budget="60%", menus=False, iterations=1, warmup=0)
    try:
        layers = handle.inplace.profile.layers
        assert not any(layer.options for layer in layers)
        assert not any(o is not None for o in getattr(handle.solution.plan, "options", ()) or ())
        assert "Menus" not in handle.inplace.profile.source
    finally:
        handle.remove()
    with_menus = profile_in_place(model, batch, link=INSTANT, iterations=1, warmup=0)
    assert all(layer.options for layer in with_menus.profile.layers[1:-1])


def test_plan_model_keeps_the_solver_s_options_and_fits():
    """solve_pinned re-scores the plan with its options (it dropped them: no plan fit)."""
    model, batch, _ = tiny("llama", size="act")
    m = copy.deepcopy(model)
    handle = plan_model(m, batch, budget="40%", method="remat-dp", iterations=1, warmup=0)
    try:
        plan = handle.solution.plan
        assert plan.options is not None and any(o is not None for o in plan.options)
        measured = measure_step(m, batch, handle=handle)
        assert measured.peak_bytes <= planopt.parse_budget("40%", handle.inplace.profile) * 1.005
        assert -0.005 <= measured.error <= 0.03
    finally:
        handle.remove()


# GPT-2 block positions (tiny "act"): 57 is gelu_new's pow, 63 the mul addmm (65) reads
BAD = (*range(27), 28, *range(32, 47), *range(50, 56), 57, 61, 65, 66)


def _forward_peak(block, x, kwargs, policy):
    """The tracker's peak over one forward of `block` (checkpointed with `policy`, or plain)."""
    from torch.utils.checkpoint import checkpoint

    from planopt.runtime.sac import sac_context
    from planopt.runtime.tracker import LiveMemory

    x = x.detach().requires_grad_(True)
    tracker = LiveMemory("cpu")
    tracker.track_model(block, [x, *[v for v in kwargs.values() if torch.is_tensor(v)]])
    with tracker:
        before = tracker.current
        tracker.reset_local_peak()
        if policy is None:
            out = block(x, **kwargs)
        else:
            context = sac_context(policy)
            fn = lambda h: block(h, **kwargs)  # noqa: E731
            out = checkpoint(fn, x, use_reentrant=False, context_fn=context)
        peak = tracker.local_peak - before
    del out
    return peak


def test_a_policy_v3_cannot_describe_is_not_on_the_menu():
    """GPT-2's gelu_new with `pow` saved and the `mul` addmm reads not (BAD): the
    checkpointed forward holds pow's output (autograd never saves it) while the chain's
    temporaries live, more than the plain forward ever holds; cost model v3 has no term
    for that (it was the 204,416-byte under-prediction). The trace's lifetimes predict
    the tracker's forward peaks exactly, and no menu entry's forward exceeds the plain."""
    from planopt.menumemory import policy_memory
    from planopt.runtime.inplacemenus import block_arguments, block_trace
    from planopt.runtime.regions import UseCacheOff

    model, batch, _ = tiny("gpt2", size="act")
    block = model.transformer.h[0]
    ops = block_trace(model, batch, block, repeats=1)
    with UseCacheOff(model):
        args, kwargs = block_arguments(model, batch, block)
    plain = _forward_peak(block, args[0], kwargs, None)
    bad = policy_memory(ops.menu_ops(), ops.memory(), ops.cut, BAD)
    assert (bad.plain, bad.forward) == (plain, _forward_peak(block, args[0], kwargs, BAD))
    assert bad.forward > plain
    prof = profile_in_place(model, batch, link=INSTANT, iterations=1, warmup=0)
    for option in prof.profile.layers[1].options:
        assert _forward_peak(block, args[0], kwargs, option.policy) <= plain, option


def _fullest_replay(layer):
    return max(layer.options, key=lambda o: (o.regen_work_bytes, o.saved_bytes))


def test_the_replay_peak_is_what_the_lifetimes_say():
    """BERT's block under its menu entry with the most replay scratch: the tracker's
    peak over checkpoint's replay is the replay's peak from the trace's lifetimes, plus
    the block's output and its seed gradient (alive here); it exceeds the block's
    internals by `regen_work_bytes`."""
    from torch.utils.checkpoint import checkpoint

    from planopt.menumemory import policy_memory
    from planopt.runtime.inplacemenus import block_arguments, block_trace
    from planopt.runtime.regions import UseCacheOff
    from planopt.runtime.sac import sac_context
    from planopt.runtime.tracker import LiveMemory

    model, batch, _ = tiny("bert", size="act")
    block = model.bert.encoder.layer[0]
    ops = block_trace(model, batch, block, repeats=1)
    with UseCacheOff(model):
        args, kwargs = block_arguments(model, batch, block)
    entry = max(ops.menu(), key=lambda e: (e.regen_work_bytes, e.saved_bytes))
    assert entry.regen_work_bytes > 0
    x = args[0].detach().requires_grad_(True)
    tracker = LiveMemory("cpu")
    tracker.track_model(block, [x, *[v for v in kwargs.values() if torch.is_tensor(v)]])
    peaks: list[int] = []

    def fn(h):
        replaying = torch._C._current_graph_task_id() != -1
        if replaying:
            tracker.reset_local_peak()
        try:
            return block(h, **kwargs)
        finally:  # also when checkpoint stops the replay early (an exception)
            if replaying:
                peaks.append(tracker.local_peak)

    with tracker:
        base = tracker.current
        context = sac_context(entry.policy)
        out = checkpoint(fn, x, use_reentrant=False, context_fn=context)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(torch.ones_like(out))
    replay = policy_memory(ops.menu_ops(), ops.memory(), ops.cut, entry.policy).replay
    assert replay == ops.saved_bytes + entry.regen_work_bytes
    assert len(peaks) == 1
    assert peaks[0] - base == replay + 2 * out.untyped_storage().nbytes()


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_fullest_replays_peak_as_predicted_by_both_trackers(family):
    """Every block kept with the menu entry of the most replay scratch: torch's
    MemTracker and the live-storage tracker both measure the predicted peak."""
    model, batch, _ = tiny(family, size="act")
    prof = profile_in_place(model, batch, link=INSTANT, iterations=1, warmup=0)
    n = len(prof.profile)
    names = [_fullest_replay(layer).name for layer in prof.profile.layers[1:-1]]
    plan = Plan.build(["keep"] * n, options=[None, *names, None], profile=prof.profile)
    for tracker in ("torch", "planopt"):
        m = copy.deepcopy(model)
        with apply(m, plan, prof) as handle:
            measured = measure_step(m, batch, handle=handle, tracker=tracker)
        assert -0.005 <= measured.error <= 0.03, (tracker, measured)


PLANS = (
    ("keep", "recompute", "recompute", "recompute", "keep", "keep"),
    ("keep", "keep", "keep", "recompute", "keep", "keep"),
    ("keep", "recompute", "keep", "recompute", "keep", "keep"),
)


@pytest.mark.parametrize("actions", PLANS)
def test_partial_blocks_over_recompute_runs_peak_as_predicted(actions):
    """BERT, each kept block with its entry of the most replay scratch, over recompute
    runs (the replay is the step's peak): MemTracker and the live-storage tracker both
    measure the prediction; without `regen_work_bytes` it under-predicts. (Before the
    menus left out SAC caching the block's output or a view of its input, the cache held
    the forward's copies too: 65,536 bytes each, 0.9 to 2.3% under.)"""
    model, batch, _ = tiny("bert", size="act")
    prof = profile_in_place(model, batch, link=INSTANT, iterations=1, warmup=0)
    n = len(prof.profile)
    options = [
        _fullest_replay(layer).name if action == "keep" and 0 < i < n - 1 else None
        for i, (layer, action) in enumerate(zip(prof.profile.layers, actions, strict=True))
    ]
    plan = Plan.build(list(actions), options=options, profile=prof.profile)
    for tracker in ("torch", "planopt"):
        m = copy.deepcopy(model)
        with apply(m, plan, prof) as handle:
            measured = measure_step(m, batch, handle=handle, tracker=tracker)
        assert -0.005 <= measured.error <= 0.03, (tracker, measured)
    zeroed = [
        dataclasses.replace(
            layer, options=tuple(dataclasses.replace(o, regen_work_bytes=0) for o in layer.options)
        )
        for layer in prof.profile.layers
    ]
    blind_profile = prof.profile.replace_layers(zeroed)
    blind_plan = Plan.build(list(actions), options=options, profile=blind_profile)
    blind = planopt.simulate(blind_profile, blind_plan).peak_bytes
    assert blind < measured.peak_bytes * 0.995, (blind, measured)
