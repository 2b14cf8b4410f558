"""Every documented mistake with the runtime API is a `PlanoptError` naming the rule and value.

Issue 25: these raised `ValueError`, `TypeError`, `IndexError` or torch's
`RuntimeError` ("grad can be implicitly created only for scalar outputs"),
where the README promises `planopt.PlanoptError` subclasses.
"""

from __future__ import annotations

import functools
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import planopt  # noqa: E402
from planopt import InvalidPlanError, Plan, PlanoptError  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE  # noqa: E402
from planopt.runtime import Chain, Executor, check, measure, profile, trace_profile  # noqa: E402
from planopt.runtime.errors import (  # noqa: E402
    BatchError,
    ChainError,
    DeviceError,
    LossFnError,
    RuntimeOptionError,
)
from planopt.runtime.measure import plain_step_seconds  # noqa: E402
from planopt.runtime.models import reference_model  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


@functools.cache
def setup():
    torch.manual_seed(0)
    chain = Chain.from_modules([nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)])
    batch = (torch.randn(5, 4), torch.randint(3, (5,)))
    prof = profile(chain, batch, F.cross_entropy, iterations=1, warmup=0, link=INSTANT)
    return chain, batch, prof


def _executor_after_an_infeasible_solve():
    chain, _, prof = setup()
    solution = planopt.solve(prof, prof.static_bytes, "pooch")
    assert solution.plan is None and solution.status.value == "infeasible"
    Executor(chain, solution.plan, profile=prof, loss_fn=F.cross_entropy)


def _executor_step(call, plan_actions=None, **kw):
    chain, batch, prof = setup()
    plan = Plan.keep_all(prof) if plan_actions is None else Plan.build(plan_actions, profile=prof)
    executor = Executor(chain, plan, profile=prof, **kw)
    with executor:
        call(executor, batch)


def _on_meta(fn):
    chain, batch, prof = setup()
    fn(chain, batch, prof, torch.device("meta"))


CASES = {
    "profile without link on CPU": (
        lambda: profile(setup()[0], setup()[1], F.cross_entropy),
        RuntimeOptionError,
        r"profile: link is required on a cpu device .*got None",
    ),
    "Executor(chain, None) after an infeasible solve": (
        _executor_after_an_infeasible_solve,
        InvalidPlanError,
        r"Executor: plan must be a planopt\.Plan, got NoneType \(a Solution without a plan",
    ),
    "profile of a tensor instead of (x, y)": (
        lambda: profile(setup()[0], setup()[1][0], F.cross_entropy, link=INSTANT),
        BatchError,
        r"profile: batch must be a pair \(inputs, targets\) of tensors, got one tensor of "
        r"shape \(5, 4\)",
    ),
    "measure of a tensor instead of (x, y)": (
        lambda: measure(setup()[0], Plan.keep_all(setup()[2]), setup()[1][0], F.cross_entropy),
        BatchError,
        r"measure: batch must be a pair",
    ),
    "check of a tensor instead of (x, y)": (
        lambda: check(
            setup()[0],
            Plan.keep_all(setup()[2]),
            setup()[1][0],
            F.cross_entropy,
            profile=setup()[2],
        ),
        BatchError,
        r"check: batch must be a pair",
    ),
    "reference model's batch of three": (
        lambda: profile(setup()[0], (*setup()[1], None), F.cross_entropy, link=INSTANT),
        BatchError,
        r"profile: batch must be a pair \(inputs, targets\) of tensors, got a tuple of 3",
    ),
    "profile with loss_fn=None": (
        lambda: profile(setup()[0], setup()[1], None, link=INSTANT),
        LossFnError,
        r"profile: the chain's last layer \(loss_fn is None\) must return a scalar loss, "
        r"got a tensor of shape \(5, 3\)",
    ),
    "measure with loss_fn=None": (
        lambda: measure(setup()[0], Plan.build([KEEP] * 3), setup()[1], None),
        LossFnError,
        r"measure: the chain's last layer \(loss_fn is None\) must return a scalar loss",
    ),
    "a loss that is not a scalar": (
        lambda: profile(
            setup()[0],
            setup()[1],
            functools.partial(F.cross_entropy, reduction="none"),
            link=INSTANT,
        ),
        LossFnError,
        r"layer 2 \(linear2\): loss_fn must return a scalar loss, got a tensor of shape \(5,\)",
    ),
    "a loss_fn that is not callable": (
        lambda: profile(setup()[0], setup()[1], "cross_entropy", link=INSTANT),
        LossFnError,
        r"profile: loss_fn must be a callable .* got 'cross_entropy'",
    ),
    "profile of a non-Chain": (
        lambda: profile(nn.Sequential(nn.Linear(4, 3)), setup()[1], F.cross_entropy, link=INSTANT),
        ChainError,
        r"profile: chain must be a planopt\.runtime\.Chain .*got Sequential",
    ),
    "measure of a non-Chain": (
        lambda: measure(nn.Linear(4, 3), Plan.keep_all(setup()[2]), setup()[1], F.cross_entropy),
        ChainError,
        r"measure: chain must be a planopt\.runtime\.Chain .*got Linear",
    ),
    "Executor of a non-Chain": (
        lambda: Executor(nn.Linear(4, 3), Plan.keep_all(setup()[2])),
        ChainError,
        r"Executor: chain must be a planopt\.runtime\.Chain .*got Linear",
    ),
    "trace_profile of a non-Chain": (
        lambda: trace_profile(nn.Linear(4, 3), setup()[1], F.cross_entropy, gpu="h100-pcie"),
        ChainError,
        r"trace_profile: chain must be a planopt\.runtime\.Chain .*got Linear",
    ),
    "an empty chain": (
        lambda: Chain.from_modules([]),
        ChainError,
        r"chain: layers must hold at least one module, got 0",
    ),
    "profile with iterations=0": (
        lambda: profile(setup()[0], setup()[1], F.cross_entropy, iterations=0, link=INSTANT),
        RuntimeOptionError,
        r"profile: iterations must be an integer >= 1, got 0",
    ),
    "check with iterations=0": (
        lambda: check(
            setup()[0],
            Plan.keep_all(setup()[2]),
            setup()[1],
            F.cross_entropy,
            profile=setup()[2],
            iterations=0,
        ),
        RuntimeOptionError,
        r"check: iterations must be an integer >= 1, got 0",
    ),
    "measure with warmup=-1": (
        lambda: measure(
            setup()[0], Plan.keep_all(setup()[2]), setup()[1], F.cross_entropy, warmup=-1
        ),
        RuntimeOptionError,
        r"measure: warmup must be an integer >= 0, got -1",
    ),
    "plain_step_seconds with iterations=True": (
        lambda: plain_step_seconds(setup()[0], setup()[1], F.cross_entropy, iterations=True),
        RuntimeOptionError,
        r"plain_step_seconds: iterations must be an integer >= 0, got True",
    ),
    "a bad timer": (
        lambda: profile(setup()[0], setup()[1], F.cross_entropy, timer="cpu", link=INSTANT),
        RuntimeOptionError,
        r"profile: timer must be one of wall, thread, got 'cpu'",
    ),
    "a bad link": (
        lambda: profile(setup()[0], setup()[1], F.cross_entropy, link=1e9),
        RuntimeOptionError,
        r"profile: link must be a planopt\.Device, got float",
    ),
    "a bad link_clock": (
        lambda: Executor(
            setup()[0], Plan.keep_all(setup()[2]), profile=setup()[2], link_clock="cpu"
        ),
        RuntimeOptionError,
        r"Executor: link_clock must be one of wall, thread, got 'cpu'",
    ),
    "profile with parameters on another device": (
        lambda: _on_meta(lambda c, b, p, d: profile(c, b, F.cross_entropy, device=d, link=INSTANT)),
        DeviceError,
        r"chain: parameter layers\.0\.weight must be on meta, got cpu",
    ),
    "measure with parameters on another device": (
        lambda: _on_meta(
            lambda c, b, p, d: measure(c, Plan.keep_all(p), b, F.cross_entropy, device=d)
        ),
        DeviceError,
        r"chain: parameter layers\.0\.weight must be on meta, got cpu",
    ),
    "an executor step on inputs on another device": (
        lambda: _executor_step(
            lambda ex, b: ex(b[0].to("meta"), b[1].to("meta")),
            [RECOMPUTE, RECOMPUTE, RECOMPUTE],
            loss_fn=F.cross_entropy,
        ),
        DeviceError,
        r"Executor: inputs must be on the parameters' device cpu, got meta",
    ),
    "an executor step without its target": (
        lambda: _executor_step(lambda ex, b: ex(b[0]), loss_fn=F.cross_entropy),
        BatchError,
        r"Executor: target must be a tensor when the executor has a loss_fn, got NoneType",
    ),
    "an executor step on (x, y) as one argument": (
        lambda: _executor_step(lambda ex, b: ex(b), loss_fn=F.cross_entropy),
        BatchError,
        r"Executor: inputs must be a tensor, got tuple",
    ),
    "a fresh optimizer whose step needs a closure": (
        lambda: measure(
            setup()[0],
            Plan.keep_all(setup()[2]),
            setup()[1],
            F.cross_entropy,
            profile=setup()[2],
            optimizer=torch.optim.LBFGS(setup()[0].parameters()),
        ),
        RuntimeOptionError,
        r"optimizer: a fresh LBFGS must be stepped once before it is measured",
    ),
    "an unknown reference model": (
        lambda: reference_model("alexnet"),
        RuntimeOptionError,
        r"model must be one of mlp, vgg, resnet, gpt, got 'alexnet'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_runtime_mistake_is_a_planopt_error_naming_rule_and_value(case):
    call, error, message = CASES[case]
    with pytest.raises(PlanoptError, match=message) as info:
        call()
    assert isinstance(info.value, error), type(info.value)
    assert isinstance(info.value, ValueError)  # as the runtime's argument errors were
