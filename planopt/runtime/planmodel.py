"""One call from a model to training under a plan: profile in place, solve, apply.

    import planopt.runtime as pr
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", ...))
    batch = {"input_ids": ids, "labels": ids}
    optimizer = torch.optim.AdamW(model.parameters())
    handle = pr.plan_model(model, batch, budget="50%")      # loss: output.loss
    for _ in range(20):                                     # the user's own loop
        model(**batch).loss.backward()
        optimizer.step(); optimizer.zero_grad()
    handle.remove()                                         # the model as it was

`measure_step` runs one step of the model (under its plan when applied) and
reads its peak from outside the plan: planopt's live-storage tracker or
torch's own `MemTracker` (`tracker="torch"`). On CPU a swap's host copies
are made out of the dispatcher's sight (`planopt.runtime.hostcopies`), so
both count device memory only, which is what the cost model predicts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

import planopt
import planopt.profile
from planopt.errors import BudgetError
from planopt.plan import KEEP, Plan
from planopt.profile import Device, Profile
from planopt.result import Solution, Status
from planopt.runnable import repair
from planopt.runtime.apply import PlanHandle, apply
from planopt.runtime.errors import RuntimeOptionError
from planopt.runtime.inplace import InPlaceProfile, profile_in_place
from planopt.runtime.menus import MENU_SIZE
from planopt.runtime.regions import Batch, StepLossFn, batch_tensors, step_loss
from planopt.runtime.tracker import LiveMemory
from planopt.runtime.training import prepare_grads, restored

# On CPU there is no host link to measure; the profile's link then stands for
# a PCIe 4.0 x16 GPU's (copies on CPU are real and synchronous unless `link=`).
CPU_LINK = Device("assumed PCIe 4.0 x16 link (CPU run)", 25e9, 25e9, 1e-5)
PIN_TRIES = 4


def _pinned(plan: Plan, profile: Profile) -> Plan:
    """`plan`'s actions and options on `profile`, the prefix and suffix (code around the
    blocks) kept whole, then mended to keep the in-place rule (`planopt.runnable.repair`: a
    block that changes its input in place may not be replayed above the kept prefix)."""
    actions = list(plan.actions)
    prefetch, wait = list(plan.prefetch_at), list(plan.swap_wait)
    options = list(plan.options) if plan.options is not None else None
    for i in (0, len(actions) - 1):
        actions[i], prefetch[i], wait[i] = KEEP, None, None
        if options is not None:
            options[i] = None
    actions, prefetch, wait, options = repair(profile, actions, prefetch, wait, options)
    return Plan.build(actions, prefetch, wait, profile=profile, options=options)


def solving_profile(profile: Profile) -> Profile:
    """The profile the solver sees: the prefix's products folded into `static_bytes`.

    apply can only keep the prefix, whose internals live from the step's
    start to its end (exactly static) and whose output lives until block 0's
    backward (static over-predicts only during the prefix's own backward).
    Folded, nothing is left for a solver to gain by swapping or recomputing
    the prefix, so it plans the blocks. The plan is then re-scored on the
    real profile.
    """
    first = profile.layers[0]
    folded = dataclasses.replace(first, saved_bytes=0, out_bytes=0)
    static = profile.static_bytes + first.saved_bytes + first.out_bytes
    layers = [folded, *profile.layers[1:]]
    frees = getattr(planopt.profile, "backward_frees", None)  # cost model v3
    for i in (0, 1):  # what B_0 and B_1 free shrank: a signed scratch may not go lower
        if frees is not None and i < len(layers) and layers[i].bwd_work_bytes < 0:
            floor = frees(tuple(layers), i)
            work = max(layers[i].bwd_work_bytes, -floor)
            layers[i] = dataclasses.replace(layers[i], bwd_work_bytes=work)
    return profile.replace_layers(layers, static_bytes=static, name=f"{profile.name} (solving)")


def solve_pinned(
    profile: Profile, budget: float | int | str, method: str = "greedy", **options
) -> Solution:
    """`planopt.solve` for a plan that keeps the prefix and suffix (apply acts on blocks).

    The solver plans `solving_profile(profile)`; its plan, with prefix and
    suffix set to keep, is re-scored on `profile` itself. When it does not
    fit, the budget handed to the solver is lowered by the overshoot and the
    solve repeated (at most `PIN_TRIES` times): the plan returned always fits
    the caller's budget on `profile`, checked by the simulator, or
    `BudgetError` says by how much the best one did not.
    """
    target = planopt.parse_budget(budget, profile)
    solving = solving_profile(profile)
    ask: float = target
    last = None
    for _ in range(PIN_TRIES):
        sol = planopt.solve(solving, ask, method, **options)
        if sol.plan is None:
            return dataclasses.replace(sol, budget=target)
        plan = _pinned(sol.plan, profile)
        schedule = planopt.simulate(profile, plan, target)
        if schedule.feasible:
            # "optimal" held for the solving profile, not for this one: say feasible.
            status = Status.FEASIBLE if sol.status is Status.OPTIMAL else sol.status
            return dataclasses.replace(
                sol,
                plan=plan,
                schedule=schedule,
                status=status,
                budget=target,
                lower_bound=None,
                message=(sol.message + "; " if sol.message else "")
                + f"solved ({sol.status.value}) with the prefix in static memory, prefix and "
                "suffix kept, re-scored on the in-place profile",
            )
        last = schedule.peak_bytes
        ask = ask - (schedule.peak_bytes - target)
        if ask < sol.min_budget:
            break
    raise BudgetError(
        f"budget must leave room for the model's prefix and suffix kept: the best plan found "
        f"with them kept peaks at {last} bytes, over the budget of {target} bytes",
        minimum=last,
    )


def plan_model(
    model: nn.Module,
    batch: Batch,
    loss_fn: StepLossFn | None = None,
    budget: float | int | str = "50%",
    method: str = "greedy",
    *,
    link: Device | None = None,
    blocks: Sequence[str] | None = None,
    grads_to_none: bool = True,
    optimizer: torch.optim.Optimizer | None = None,
    iterations: int = 3,
    warmup: int = 1,
    check_regime: str = "warn",
    signed_scratch: bool = True,
    menus: bool = True,
    menu_size: int | None = MENU_SIZE,
    **options,
) -> PlanHandle:
    """Profile `model` in place, solve for `budget`, apply the plan (module docstring).

    `loss_fn(output, batch) -> scalar` (default: `output.loss`). `link`: the
    host link (CUDA: measured when omitted; CPU: `CPU_LINK` when omitted, and
    a link given is also emulated by the copies). `grads_to_none`: the loop
    sets gradients to None between steps (`optimizer.zero_grad()`'s default).
    `options` go to `planopt.solve` (`work_limit`, `seed`, a method's own).
    `signed_scratch`, `menus`, `menu_size`: see `profile_in_place` (cost model v3;
    with menus the solver may give a kept block a partial option).
    The handle carries `solution` and `inplace` (the `InPlaceProfile`).
    """
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    prof_link = link if link is not None or device.type == "cuda" else CPU_LINK
    inplace = profile_in_place(
        model,
        batch,
        loss_fn,
        blocks=blocks,
        link=prof_link,
        iterations=iterations,
        warmup=warmup,
        grads_to_none=grads_to_none,
        optimizer=optimizer,
        signed_scratch=signed_scratch,
        menus=menus,
        menu_size=menu_size,
    )
    solution = solve_pinned(inplace.profile, budget, method, **options)
    if solution.plan is None:
        raise BudgetError(
            f"plan_model: with the model's prefix kept (apply plans its blocks only): "
            f"{solution.message}",
            minimum=solution.min_budget,
        )
    handle = apply(
        model,
        solution.plan,
        inplace,
        link=link if device.type != "cuda" else None,
        check_regime=check_regime,
    )
    handle.solution = solution
    handle.inplace = inplace
    return handle


@dataclass(frozen=True)
class StepMemory:
    """The measured peak of one training step, beside the cost model's prediction."""

    peak_bytes: int
    predicted_bytes: int | None
    source: str

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured: positive over-predicts."""
        if self.predicted_bytes is None or not self.peak_bytes:
            return None
        return (self.predicted_bytes - self.peak_bytes) / self.peak_bytes


def measure_step(
    model: nn.Module,
    batch: Batch,
    loss_fn: StepLossFn | None = None,
    *,
    handle: PlanHandle | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    tracker: str = "planopt",
    grads_to_none: bool | None = None,
) -> StepMemory:
    """Peak memory of one step (forward, backward; no optimizer step), model left as found.

    Runs under `handle`'s plan when given (and compares with the simulator's
    peak for it), in `handle`'s gradient regime unless `grads_to_none` says.
    `tracker`: "planopt" (`LiveMemory`) or "torch" (`MemTracker`).
    """
    if tracker not in ("planopt", "torch"):
        raise RuntimeOptionError(f"tracker must be 'planopt' or 'torch', got {tracker!r}")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    to_none = grads_to_none if grads_to_none is not None else bool(handle and handle.grads_to_none)
    tensors = batch_tensors(batch)
    with restored(model, device):
        prepare_grads(model, to_none)
        if tracker == "torch":
            from torch.distributed._tools.mem_tracker import MemTracker

            mt = MemTracker()
            mt.track_external(model, *tensors, *([optimizer] if optimizer else []))
            with mt:
                _step(model, batch, loss_fn, handle)
            peak = mt.get_tracker_snapshot("peak")[device]["Total"]
            source = "torch.distributed._tools.mem_tracker.MemTracker"
        else:
            lives = LiveMemory(device.type)
            lives.track_model(model, tensors, optimizer)
            with lives:
                _step(model, batch, loss_fn, handle)
            peak, source = lives.peak, "planopt.runtime.tracker.LiveMemory"
    predicted = None
    if handle is not None:
        predicted = planopt.simulate(handle.profile, handle.plan).peak_bytes
    return StepMemory(int(peak), predicted, source)


def _step(model, batch, loss_fn, handle) -> None:
    loss = step_loss(model, batch, loss_fn)
    loss.backward()
    del loss
    if handle is not None:
        handle.synchronize()


__all__ = [
    "CPU_LINK",
    "InPlaceProfile",
    "StepMemory",
    "measure_step",
    "plan_model",
    "solve_pinned",
]
