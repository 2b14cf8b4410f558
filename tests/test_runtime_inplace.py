"""Layers that modify their input in place (a block that starts with an in-place activation).

Issue 25: every method's plan for such a chain was refused at run time, and
a recompute block that started with the in-place op crashed inside torch
("a leaf Variable that requires grad is being used in an in-place
operation"). The executor now runs every plan whose values it can give
exactly: the in-place layer recomputed above a swapped layer (the copy
holds the value before the change, the block changes it again) or inside a
run; it refuses, at the first forward and naming the rule, the plans where
a copy or a recomputation would hold the value before the change while
backward reads the changed one, or where a block would start from the
changed value. Truth: plain PyTorch (bitwise gradients) and the live-storage
tracker (memory within the fidelity tolerance).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import planopt  # noqa: E402
from planopt import InvalidPlanError, Plan  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE, SWAP, need_indices  # noqa: E402
from planopt.runtime import Chain, Executor, RecomputeError  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)
ACTIONS = {"k": KEEP, "r": RECOMPUTE, "s": SWAP}


def _block(c_in: int, c_out: int) -> nn.Module:
    # LeakyReLU is not idempotent: running it twice on the changed value
    # would give other gradients, so an exact match shows the value was right.
    return nn.Sequential(nn.LeakyReLU(0.1, inplace=True), nn.Linear(c_in, c_out))


@functools.cache
def setup():
    torch.manual_seed(0)
    chain = Chain.from_modules(
        [nn.Linear(6, 16), _block(16, 16), _block(16, 16), _block(16, 16), _block(16, 3)]
    )
    batch = (torch.randn(4, 6), torch.randint(3, (4,)))
    prof = profile(chain, batch, F.cross_entropy, iterations=1, warmup=0, link=INSTANT)
    assert all(layer.saves_input for layer in prof.layers[1:])
    assert [layer.modifies_input for layer in prof.layers] == [False, True, True, True, True]
    return chain, batch, prof


def _plan(prof, actions: str) -> Plan:
    """The plan, each swap's copy out waited for by the next forward (the in-place
    rule: a replay above a swap must not race its copy)."""
    acts = [ACTIONS[c] for c in actions]
    need = need_indices(acts, prof)
    n = len(acts)
    return Plan.build(
        acts,
        [need[i] if a is SWAP else None for i, a in enumerate(acts)],
        [i + 1 if a is SWAP and i + 1 < n else None for i, a in enumerate(acts)],
        profile=prof,
    )


def _blind(prof):
    """The profile without `modifies_input`: the executor's own checks decide."""
    return prof.replace_layers(
        [dataclasses.replace(layer, modifies_input=False) for layer in prof.layers]
    )


@pytest.mark.parametrize("actions", ["kkkkk", "srrrr", "ksrrr", "rrrrr", "kkksr", "kkkks"])
def test_runnable_plans_train_exactly_and_fit_the_prediction(actions):
    chain, batch, prof = setup()
    plan = _plan(prof, actions)
    plain, mine = copy.deepcopy(chain), copy.deepcopy(chain)
    torch.manual_seed(1)
    plain_loss = F.cross_entropy(plain(batch[0].clone()), batch[1])
    plain_loss.backward()
    executor = Executor(mine, plan, profile=prof, loss_fn=F.cross_entropy)
    with executor:
        loss = executor(batch[0].clone(), batch[1])
        loss.backward()
    assert torch.equal(loss.detach(), plain_loss.detach())
    for p, q in zip(plain.parameters(), mine.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    m = measure(copy.deepcopy(chain), plan, batch, F.cross_entropy, profile=prof, iterations=0)
    predicted = planopt.simulate(prof, plan).peak_bytes
    assert m.peak_bytes * (1 - 0.005) <= predicted <= m.peak_bytes * 1.02


@pytest.mark.parametrize(
    ("actions", "rule"),
    [
        ("krrrr", "must not start a recompute run above a kept layer"),
        ("kkkrk", "must not start a recompute run above a kept layer"),
        ("skkkk", "must be recomputed, or the layer below kept"),
        ("kssss", "must be recomputed, or the layer below kept"),
        ("rkkkk", "must be recomputed, or the layer below kept"),
        ("krrkk", "must be recomputed, or the layer below kept|must not start a recompute run"),
    ],
)
def test_plans_that_would_train_on_other_values_are_refused_at_the_first_forward(actions, rule):
    """Before: RecomputeError for swaps, torch's leaf-Variable error in the block for krrrr.

    The profiler flags the layers (`modifies_input`), so the executor refuses the plan
    as it is built (the in-place rule, `planopt.runnable`); with a profile that does
    not say so, it still refuses at the first forward."""
    chain, batch, prof = setup()
    with pytest.raises(InvalidPlanError, match="in-place rule"):
        Executor(copy.deepcopy(chain), _plan(prof, actions), profile=prof)
    blind = _blind(prof)
    mine = copy.deepcopy(chain)
    executor = Executor(mine, _plan(blind, actions), profile=blind, loss_fn=F.cross_entropy)
    with pytest.raises(RecomputeError, match=rule), executor:
        executor(batch[0].clone(), batch[1])
    assert executor.last_step is not None and executor.last_step.held_at_end == 0
