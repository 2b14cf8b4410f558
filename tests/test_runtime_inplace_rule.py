"""The in-place rule end to end: the profiler flags the layers, every method plans around them.

Issue 25, item 5a: a model whose blocks start with an in-place op on their
input got plans from every method that the executor then refused at run
time (`RecomputeError`). Now the profilers set `Layer.modifies_input` from
what they observe (the input's version counter moved during the forward),
the rule (`planopt.runnable`) is part of the cost model, and every method
honours it. Truth: the executor itself (which refuses, at the first forward,
exactly the plans the rule forbids: checked on every plan of a 5-layer
chain) and plain PyTorch (bitwise gradients).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import math
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from test_runtime_inplace import ACTIONS, _block  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import planopt  # noqa: E402
from planopt import InvalidPlanError, Plan, registry  # noqa: E402
from planopt.errors import UnsupportedProfileError  # noqa: E402
from planopt.hardware import gpu  # noqa: E402
from planopt.plan import RECOMPUTE, SWAP, need_indices  # noqa: E402
from planopt.runnable import runnable, violations  # noqa: E402
from planopt.runtime import Chain, Executor, RecomputeError  # noqa: E402
from planopt.runtime import menus as menu_builder  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)
# A copy of a block's output (2 x 8 x 8 x 8 floats) takes about a second, as its forward does.
SLOW = planopt.Device("slow", 4096.0, 4096.0, 0.0)


def _relu_first(c: int) -> nn.Module:
    return nn.Sequential(nn.ReLU(inplace=True), nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))


def _relu_inside(c: int) -> nn.Module:
    # in place on its own intermediate, not on its input: not flagged
    return nn.Sequential(
        nn.Conv2d(c, c, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(c, c, 1), nn.BatchNorm2d(c)
    )


@functools.cache
def conv_setup(menus: bool = False):
    """A conv-BN chain whose blocks mostly start with ReLU(inplace=True), profiled (with
    SAC menus, cost model v3, when `menus`).

    Every time is fixed, so every run plans the same chain: the layers' at 1 s, the
    operators' (which decide the menus' fronts and `r_k`) the roofline's on a named GPU.
    Measured once (`iterations=1`), they moved the 30% budget across a plan's edge in
    some runs."""
    torch.manual_seed(0)
    chain = Chain.from_modules(
        {
            "stem": nn.Conv2d(3, 8, 3, padding=1),
            "b1": _relu_first(8),
            "b2": _relu_inside(8),
            "b3": _relu_first(8),
            "b4": _relu_inside(8),
            "b5": _relu_first(8),
            "b6": _relu_inside(8),
            "head": nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10)),
        }
    )
    batch = (torch.randn(2, 3, 8, 8), torch.randint(10, (2,)))
    traced, h100 = menu_builder.trace_block, gpu("h100-sxm")

    def roofline(*args, **kwargs):
        return traced(*args, **{**kwargs, "gpu": h100})

    with mock.patch.object(menu_builder, "trace_block", roofline):
        prof = profile(
            chain, batch, F.cross_entropy, iterations=1, warmup=0, link=SLOW, menus=menus
        )
    unit = prof.replace_layers(
        [dataclasses.replace(layer, fwd=1.0, bwd=1.0) for layer in prof.layers]
    )
    return chain, batch, unit


@pytest.mark.parametrize("menus", [False, True])
def test_the_profiler_flags_exactly_the_layers_that_change_their_input(menus):
    _, _, prof = conv_setup(menus)
    assert prof.has_options is menus
    assert [layer.modifies_input for layer in prof.layers] == [
        False, True, False, True, False, True, False, False,
    ]  # fmt: skip


def _train(chain, batch, plan, prof):
    plain, mine = copy.deepcopy(chain), copy.deepcopy(chain)
    torch.manual_seed(1)
    plain_loss = F.cross_entropy(plain(batch[0].clone()), batch[1])
    plain_loss.backward()
    executor = Executor(mine, plan, profile=prof, loss_fn=F.cross_entropy)
    with executor:
        loss = executor(batch[0].clone(), batch[1])
        loss.backward()
    assert torch.equal(loss.detach(), plain_loss.detach())
    for (name, p), q in zip(plain.named_parameters(), mine.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), name
    for (name, u), v in zip(plain.named_buffers(), mine.buffers(), strict=True):
        assert torch.equal(u, v), name


def _methods():
    return [m for m in registry.planners() if registry.get(m).role is not registry.Role.BOUND]


@pytest.mark.parametrize(
    ("menus", "fraction", "least", "swapped"),
    [
        *((False, f, least, 0) for f, least in (("70%", 2), ("50%", 0), ("30%", 0))),
        *((True, f, least, sw) for f, least, sw in (("70%", 6, 0), ("50%", 7, 5), ("30%", 1, 1))),
    ],
)
def test_every_method_plans_a_runnable_plan_that_trains_exactly(menus, fraction, least, swapped):
    """Before: most methods' plans here raised RecomputeError at the first forward.

    `least`: how many methods find a plan (all of them train); `swapped`: how
    many of those give a swapped layer an option. The rule leaves little room on such
    a chain: without menus, a layer below a block that starts with the
    in-place op may only be swapped or recomputed when that block is
    recomputed, so one recompute drags the run up to the next unflagged
    layer; below 70% no plan of the space fits (the exact methods prove it).
    With menus an option (a replay) frees the layer below, and every plan runs,
    those giving a swapped layer an option (its kept subset swapped) included:
    before, the executor refused those (5 of the 14 plans with menus)."""
    chain, batch, prof = conv_setup(menus)
    planned = swapped_options = 0
    for method in _methods():
        options = {"with_swap_wait": False} if method == "brute-force" else {}
        try:
            solution = planopt.solve(prof, fraction, method, work_limit=2, **options)
        except UnsupportedProfileError:
            continue
        if solution.plan is None:
            continue
        plan = solution.plan
        assert runnable(prof, plan.actions, plan.options, plan.swap_wait), (method, plan)
        options = plan.options or (None,) * len(plan)
        swapped_options += any(
            o is not None and a is SWAP for a, o in zip(plan.actions, options, strict=True)
        )
        _train(chain, batch, plan, prof)
        planned += 1
    assert planned >= least
    assert swapped_options >= swapped


@functools.cache
def linear_setup():
    torch.manual_seed(0)
    chain = Chain.from_modules(
        [_block(6, 16), nn.Linear(16, 16), _block(16, 16), _block(16, 16), _block(16, 3)]
    )
    batch = (torch.randn(4, 6), torch.randint(3, (4,)))
    prof = profile(chain, batch, F.cross_entropy, iterations=1, warmup=0, link=INSTANT)
    return chain, batch, prof


def test_the_rule_is_exactly_what_the_executor_refuses():
    """Every keep/swap/recompute plan of a 5-layer chain (layer 0 changes the batch in
    place, layer 1 does not change its input), each forward waiting for the copy out
    below it: with a profile that does not carry the flag (the executor's own checks
    decide), a plan raises RecomputeError at the first forward exactly when the rule
    forbids it, and otherwise trains exactly; with the profile the profiler made, the
    executor refuses it before running (InvalidPlanError)."""
    chain, batch, prof = linear_setup()
    assert [layer.modifies_input for layer in prof.layers] == [True, False, True, True, True]
    blind = prof.replace_layers(
        [dataclasses.replace(layer, modifies_input=False) for layer in prof.layers]
    )
    refused = 0
    for word in itertools.product("krs", repeat=len(prof)):
        acts = [ACTIONS[c] for c in word]
        need = need_indices(acts, prof)
        prefetch = [need[i] if a is SWAP else None for i, a in enumerate(acts)]
        wait = [i + 1 if a is SWAP and i + 1 < len(acts) else None for i, a in enumerate(acts)]
        plan = Plan.build(acts, prefetch, wait, profile=blind)
        broken = violations(prof, acts, None, wait)
        if broken:
            refused += 1
            executor = Executor(copy.deepcopy(chain), plan, profile=blind, loss_fn=F.cross_entropy)
            with pytest.raises(RecomputeError), executor:
                executor(batch[0].clone(), batch[1])
            flagged = Plan.build(acts, prefetch, wait, profile=prof)
            with pytest.raises(InvalidPlanError, match="in-place rule"):
                Executor(copy.deepcopy(chain), flagged, profile=prof, loss_fn=F.cross_entropy)
        else:
            _train(chain, batch, plan, blind)
    assert 0 < refused < 3 ** len(prof)


# Every copy takes half a second: the copy out of layer 0 holds the queue while
# F_1 and F_2 run, so layer 1's copy starts after F_2 changed its output.
LATE = planopt.Device("late", math.inf, math.inf, 0.5)


def test_a_replay_above_a_swap_waits_for_the_copy_out():
    """Layer 2 changes its input in place and is recomputed from layer 1's copy: unless
    F_2 waits for that copy out, the copy races the change. Before the rule's third
    clause the planners left the wait out (nothing asked for it) and the executor,
    which cannot see the race, trained on the changed value: other gradients."""
    chain, batch, prof = linear_setup()
    blind = prof.replace_layers(
        [dataclasses.replace(layer, modifies_input=False) for layer in prof.layers]
    )
    acts = [SWAP, SWAP, RECOMPUTE, RECOMPUTE, RECOMPUTE]
    need = need_indices(acts, prof)
    prefetch = [need[0], need[1], None, None, None]
    racing = Plan.build(acts, prefetch, profile=blind)
    plain = copy.deepcopy(chain)
    torch.manual_seed(1)
    F.cross_entropy(plain(batch[0].clone()), batch[1]).backward()
    mine = copy.deepcopy(chain)
    executor = Executor(mine, racing, profile=blind, loss_fn=F.cross_entropy, link=LATE)
    with executor:
        executor(batch[0].clone(), batch[1]).backward()
    assert not all(
        torch.equal(p.grad, q.grad)
        for p, q in zip(plain.parameters(), mine.parameters(), strict=True)
    )
    assert [j for j, _ in violations(prof, acts)] == [2]
    with pytest.raises(InvalidPlanError, match="must wait for its copy out"):
        Executor(copy.deepcopy(chain), Plan.build(acts, prefetch, profile=prof), profile=prof)
    waiting = Plan.build(acts, prefetch, [None, 2, None, None, None], profile=prof)
    assert runnable(prof, acts, None, waiting.swap_wait)
    _train_linked(chain, batch, waiting, prof)


def _train_linked(chain, batch, plan, prof):
    plain, mine = copy.deepcopy(chain), copy.deepcopy(chain)
    torch.manual_seed(1)
    F.cross_entropy(plain(batch[0].clone()), batch[1]).backward()
    executor = Executor(mine, plan, profile=prof, loss_fn=F.cross_entropy, link=LATE)
    with executor:
        executor(batch[0].clone(), batch[1]).backward()
    for p, q in zip(plain.parameters(), mine.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
