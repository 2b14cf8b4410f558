"""The in-place rule on an unmodified model: the in-place profile, `apply`, `plan_model`.

Issue 25, item 5a, on the in-place path: a model whose blocks start with an
in-place op on their input. Before, `apply` ran every plan and the ones the
rule forbids trained silently on other values (gradients unlike plain
PyTorch's, no error); now the in-place profile flags those blocks
(`Layer.modifies_input`), `apply` refuses a plan that breaks the rule
(`InvalidPlanError`, from `Plan.check`) and `plan_model` returns plans that
train bitwise like plain PyTorch. Truth: plain PyTorch.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import planopt  # noqa: E402
from planopt import InvalidPlanError, Plan  # noqa: E402
from planopt.errors import BudgetError  # noqa: E402
from planopt.plan import KEEP, SWAP, need_indices  # noqa: E402
from planopt.runnable import runnable  # noqa: E402
from planopt.runtime import apply, plan_model, profile_in_place  # noqa: E402
from planopt.runtime.regions import step_loss  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)
ACTIONS = {"k": "keep", "r": "recompute", "s": "swap"}


class Block(nn.Module):
    """Conv-BN; `pre`: a LeakyReLU on the input first, in place (not idempotent, so a
    replay from the changed value shows in the gradients)."""

    def __init__(self, c: int, pre: bool) -> None:
        super().__init__()
        self.pre = pre
        self.act = nn.LeakyReLU(0.1, inplace=True)
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(self.act(x) if self.pre else x))


class Net(nn.Module):
    def __init__(self, pre: tuple[bool, ...]) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.ModuleList([Block(8, p) for p in pre])
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean((2, 3)))


def loss_fn(out, batch):
    return F.cross_entropy(out, batch[1])


@functools.cache
def setup(pre: tuple[bool, ...] = (True, False, True, True)):
    torch.manual_seed(0)
    model = Net(pre).train()
    batch = (torch.randn(4, 3, 16, 16), torch.randint(10, (4,)))
    prof = profile_in_place(model, batch, loss_fn, link=INSTANT, iterations=1, warmup=0)
    return model, batch, prof


def _grads(model, batch, plan=None, prof=None):
    model = copy.deepcopy(model)
    torch.manual_seed(1)
    if plan is None:
        step_loss(model, (batch[0].clone(), batch[1]), loss_fn).backward()
    else:
        with apply(model, plan, prof):
            step_loss(model, (batch[0].clone(), batch[1]), loss_fn).backward()
    return [p.grad.clone() for p in model.parameters()]


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_the_in_place_profile_flags_the_blocks_that_change_their_input():
    _, _, prof = setup()
    flags = [layer.modifies_input for layer in prof.profile.layers]
    assert flags == [False, True, False, True, True, False]  # prefix, 4 blocks, suffix


def test_apply_refuses_exactly_the_plans_that_would_train_on_other_values():
    """Every keep/recompute/swap plan of the blocks (each forward waiting for the copy
    out below it): with the profile that does not carry the flag, apply trains bitwise
    like plain PyTorch exactly when the rule allows the plan (before: the others ran,
    silently, on other values); with the flagged profile it refuses them."""
    model, batch, prof = setup()
    blind_profile = prof.profile.replace_layers(
        [dataclasses.replace(x, modifies_input=False) for x in prof.profile.layers]
    )
    blind = dataclasses.replace(prof, profile=blind_profile)
    plain = _grads(model, batch)
    n = len(prof.profile)
    refused = 0
    for word in itertools.product("krs", repeat=n - 2):
        acts = [KEEP, *(planopt.Action(ACTIONS[c]) for c in word), KEEP]
        need = need_indices(acts, prof.profile)
        prefetch = [need[i] if a is SWAP else None for i, a in enumerate(acts)]
        wait = [i + 1 if a is SWAP else None for i, a in enumerate(acts)]
        allowed = runnable(prof.profile, acts, None, wait)
        trained = _same(plain, _grads(model, batch, Plan.build(acts, prefetch, wait), blind))
        assert trained == allowed, word
        if not allowed:
            refused += 1
            with pytest.raises(InvalidPlanError, match="in-place rule"):
                apply(copy.deepcopy(model), Plan.build(acts, prefetch, wait), prof)
    assert 0 < refused < 3 ** (n - 2)


@pytest.mark.parametrize("menus", [False, True])
def test_plan_model_plans_train_exactly(menus):
    """Every method's plan_model plan at 70/50/30% of keep-all runs under apply, bitwise
    as plain PyTorch (a budget no runnable plan meets is a BudgetError)."""
    model, batch, _ = setup((True, False, True, False, True, False))
    plain = _grads(model, batch)
    planned = 0
    for method, budget in itertools.product(("greedy", "exact", "remat-dp", "auto"), (70, 50, 30)):
        mine = copy.deepcopy(model)
        try:
            handle = plan_model(
                mine,
                (batch[0].clone(), batch[1]),
                loss_fn,
                budget=f"{budget}%",
                method=method,
                link=INSTANT,
                iterations=1,
                warmup=0,
                menus=menus,
                work_limit=2,
            )
        except BudgetError:
            continue
        plan, profile = handle.solution.plan, handle.inplace.profile
        assert runnable(profile, plan.actions, plan.options, plan.swap_wait), (method, budget)
        torch.manual_seed(1)
        step_loss(mine, (batch[0].clone(), batch[1]), loss_fn).backward()
        handle.remove()
        assert _same(plain, [p.grad for p in mine.parameters()]), (method, budget, plan)
        planned += 1
    assert planned >= 2
