"""Apply a plan to the model as written: `apply(model, plan, profile)`, undone by `remove()`.

    prof = profile_in_place(model, batch, link=link)        # an InPlaceProfile
    plan = planopt.solve(prof.profile, "50%").plan          # prefix and suffix kept
    with apply(model, plan, prof):                          # or: handle.remove() later
        for batch in data:                                  # the user's own loop
            loss = model(**batch).loss
            loss.backward(); optimizer.step(); optimizer.zero_grad()

`forward` is replaced on the model instance and on each block instance (and
restored exactly by `remove()`): the model's forward runs under the step's
routing hooks, each block's under its action (`planopt.runtime.applystep`):
`keep` runs as is, `recompute` in a non-reentrant `torch.utils.checkpoint`
region per run of consecutive recomputed blocks, a partial option (cost
model v3) in a selective-checkpoint region saving exactly its op positions,
`swap` with `saved_tensors_hooks` whose copies go to pinned host memory on
CUDA streams (or host threads over an emulated link on CPU) and come back at
the plan's `prefetch_at`. Outside training (`model.eval()` or
`torch.no_grad()`) the model runs as written. The prefix and suffix layers
(the model's code around its blocks) are always kept.

NOTE (gradient regime): a profile is measured with parameter gradients set to
None between steps or kept; the memory it predicts holds only in that
regime. The first forward after a completed backward looks at the
parameters' `.grad` and warns (or raises, `check_regime="raise"`) when the
loop runs the other regime.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from planopt.errors import InvalidPlanError, PlanoptError, ProfileMismatchError, where
from planopt.plan import KEEP, RECOMPUTE, SWAP, Plan
from planopt.profile import Device, Profile
from planopt.runtime.applystep import PlanStep
from planopt.runtime.errors import RuntimeInputError, RuntimeOptionError
from planopt.runtime.hostcopies import host_engine
from planopt.runtime.inplace import InPlaceProfile
from planopt.runtime.measure import grads_regime
from planopt.runtime.modelblocks import BlockError, find_model_blocks
from planopt.runtime.regions import Patched, UseCacheOff, call_tensors
from planopt.runtime.stepplan import StepPlan
from planopt.runtime.storage import storage_key
from planopt.runtime.swap import CopyEngine
from planopt.runtime.threadcopies import CLOCKS

REGIME_CHECKS = ("warn", "raise", "off")


class GradRegimeError(PlanoptError, RuntimeError):
    """The training loop runs another gradient regime than the profile was measured in."""


class GradRegimeWarning(UserWarning):
    """`GradRegimeError`'s message, as a warning (`check_regime="warn"`, the default)."""


class InputShapeWarning(UserWarning):
    """A step's blocks see another input shape or dtype than the profile measured."""


class PlanHandle:
    """A plan applied to a model (module docstring): a context manager; `remove()` undoes it.

    `solution` is the `planopt.Solution` when `plan_model` made the plan;
    `steps` counts the backwards completed under the plan.
    """

    def __init__(
        self,
        model: nn.Module,
        plan: Plan,
        profile: InPlaceProfile | Profile,
        *,
        blocks: Sequence[str] | None = None,
        link: Device | None = None,
        link_clock: str = "wall",
        check_regime: str = "warn",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise RuntimeInputError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(plan, Plan):
            raise RuntimeInputError(f"plan must be a planopt.Plan, got {type(plan).__name__}")
        if isinstance(profile, InPlaceProfile):
            prof, to_none = profile.profile, profile.grads_to_none
            blocks = profile.blocks if blocks is None else blocks
        elif isinstance(profile, Profile):
            prof, to_none = profile, grads_regime(profile, None)
        else:
            raise RuntimeInputError(
                f"profile must be a planopt.runtime.InPlaceProfile or a planopt.Profile, got "
                f"{type(profile).__name__}"
            )
        if check_regime not in REGIME_CHECKS:
            raise RuntimeOptionError(
                f"check_regime must be one of {', '.join(REGIME_CHECKS)}, got {check_regime!r}"
            )
        if link_clock not in CLOCKS:
            raise RuntimeOptionError(
                f"link_clock must be one of {', '.join(CLOCKS)}, got {link_clock!r}"
            )
        try:
            found = find_model_blocks(model, blocks)
        except BlockError as exc:
            if blocks is None or not isinstance(profile, InPlaceProfile):
                raise
            raise ProfileMismatchError(
                f"profile: its blocks must be modules of {type(model).__name__}, got {exc}; "
                "it was measured on another model"
            ) from exc
        self._check(plan, prof, found.names)
        self.model, self.plan, self.profile = model, plan, prof
        self.blocks = found
        self.n = len(found) + 2
        self.grads_to_none = to_none
        self.check_regime = check_regime
        self.link, self.link_clock = link, link_clock
        self.schedule = StepPlan(plan, prof)
        self._policies = self.schedule.policies  # names checked by plan.check above
        self.run_top: dict[int, int] = {}
        for first, top in self.schedule.block_at.values():
            for j in range(first, top + 1):
                self.run_top[j] = top
        self.inplace = profile if isinstance(profile, InPlaceProfile) else None
        self.solution = None
        self.steps = 0
        self._regime_checked = check_regime == "off"
        self._shape_warned = False
        self._engines: dict[torch.device, CopyEngine] = {}
        self._current: PlanStep | None = None
        self._patched = Patched()
        self._cache = UseCacheOff(model)
        self._cache.__enter__()
        self._patched.patch(model, self._model_forward)
        for r, module in enumerate(found.modules, start=1):
            self._patched.patch(module, self._block_forward(r))
        self.removed = False

    @staticmethod
    def _check(plan: Plan, prof: Profile, names: tuple[str, ...]) -> None:
        n = len(names) + 2
        if len(prof) != n:
            raise ProfileMismatchError(
                f"profile: must have one layer per block plus prefix and suffix ({n}), got "
                f"{len(prof)}; it was measured on another model or other blocks"
            )
        for r, name in enumerate(names, start=1):
            if prof.layers[r].name != name:
                raise ProfileMismatchError(
                    f"{where(r, prof.layers[r].name)}: profile layer must be the model's block "
                    f"{name!r}; it was measured on another model or other blocks"
                )
        if len(plan) != n:
            raise InvalidPlanError(
                f"plan: must have one entry per profile layer (prefix, {n - 2} blocks, suffix: "
                f"{n}), got {len(plan)}"
            )
        plan.check(prof)
        for i in (0, n - 1):
            if plan.actions[i] is not KEEP:
                raise InvalidPlanError(
                    f"{where(i, prof.layers[i].name)}: the model's code outside its blocks can "
                    f"only be kept, got {plan.actions[i].value} (plan_model pins it to keep)"
                )

    # -- what a step asks -------------------------------------------------------

    def engine(self, device: torch.device) -> CopyEngine:
        engine = self._engines.get(device)
        if engine is None:
            engine = self._engines[device] = host_engine(device, self.link, self.link_clock)
        return engine

    @property
    def engines(self) -> dict[torch.device, CopyEngine]:
        return dict(self._engines)

    def run_modules(self, first: int, top: int) -> list[nn.Module]:
        """The block modules of layers `first .. top`."""
        return list(self.blocks.modules[first - 1 : top])

    def policy(self, i: int) -> tuple[int, ...] | None:
        return self._policies[i]

    def step_finished(self, step: PlanStep) -> None:
        self.steps += 1
        if self._current is step:
            self._current = None

    def synchronize(self) -> None:
        """Return when every copy enqueued so far has ended."""
        for engine in self._engines.values():
            engine.synchronize()

    # -- the patched forwards ------------------------------------------------------

    def _active(self) -> bool:
        return not self.removed and torch.is_grad_enabled() and self.model.training

    def _model_forward(self, original):
        def forward(*args, **kwargs):
            if not self._active():
                return original(*args, **kwargs)
            self._check_grad_regime()
            device = next((p.device for p in self.model.parameters()), torch.device("cpu"))
            static = {storage_key(p) for p in self.model.parameters()}
            static.update(storage_key(b) for b in self.model.buffers())
            static.update(storage_key(t) for t in call_tensors(args, kwargs))
            static.discard(0)
            # NOTE: a step whose backward has not run yet keeps what it holds (two
            # forwards, then one backward of their summed losses, is a valid loop).
            step = self._current = PlanStep(self, static, device)
            with saved_tensors_hooks(step.pack, step.unpack):
                try:
                    out = original(*args, **kwargs)
                except BaseException:
                    step.abandon()  # inner hooks first: a checkpoint region left open
                    self._current = None
                    raise
            step.finish_forward(out)
            return out

        return forward

    def _block_forward(self, r: int):
        def make(original):
            def forward(*args, **kwargs):
                step = self._current
                if step is None or not self._active():
                    return original(*args, **kwargs)
                return step.block(r, original, args, kwargs)

            return forward

        return make

    def check_input(self, x: torch.Tensor) -> None:
        """Warn (once) when a step's first block input is not the profiled one: the
        memory the plan was solved for holds for the profiled shape and dtype only."""
        if self._shape_warned:
            return
        sig = self.profile.layers[1].signature or ""
        want = sig.partition("|in=")[2]
        got = f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
        if want and want != got:
            self._shape_warned = True
            warnings.warn(
                f"input shape: the plan was solved for blocks whose input is {want}, got "
                f"{got}; its predicted memory holds for the profiled batch only (profile "
                "again for this shape)",
                InputShapeWarning,
                stacklevel=5,
            )

    def _check_grad_regime(self) -> None:
        if self._regime_checked or self.steps == 0:
            return
        self._regime_checked = True
        params = [p for p in self.model.parameters() if p.requires_grad]
        none = all(p.grad is None for p in params)
        if none == self.grads_to_none:
            return
        said = "set to None" if self.grads_to_none else "kept (zeroed in place)"
        got = "None" if none else "allocated"
        message = (
            f"gradient regime: the profile was measured with parameter gradients {said} "
            f"between steps, but at this step's start they are {got}; the plan's memory "
            "holds only in the profile's regime (gradient accumulation keeps them between "
            "micro-batches): use optimizer.zero_grad(set_to_none="
            f"{self.grads_to_none}) or profile with grads_to_none={not self.grads_to_none}"
        )
        if self.check_regime == "raise":
            raise GradRegimeError(message)
        warnings.warn(message, GradRegimeWarning, stacklevel=4)

    # -- undo ---------------------------------------------------------------------

    def remove(self) -> None:
        """Restore the model exactly (forwards, `use_cache`) and free the copy engines."""
        if self.removed:
            return
        self.removed = True
        if self._current is not None:
            self._current.abort()
            self._current = None
        self._patched.restore()
        self._cache.__exit__(None, None, None)
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()

    def __enter__(self) -> PlanHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        counts = {a.value: self.plan.actions.count(a) for a in (KEEP, SWAP, RECOMPUTE)}
        state = "removed" if self.removed else "applied"
        return f"PlanHandle({type(self.model).__name__}, {counts}, {state})"


def apply(
    model: nn.Module,
    plan: Plan,
    profile: InPlaceProfile | Profile,
    *,
    blocks: Sequence[str] | None = None,
    link: Device | None = None,
    link_clock: str = "wall",
    check_regime: str = "warn",
) -> PlanHandle:
    """Run `model`'s training steps under `plan` (module docstring); returns the handle.

    `profile`: the `InPlaceProfile` (or its `Profile`) the plan was solved for.
    `blocks`: module names, when the profile was made with them. `link`
    (CPU only): copies over an emulated host link on threads; without it CPU
    copies end when made. `check_regime`: "warn", "raise" or "off".
    """
    return PlanHandle(
        model,
        plan,
        profile,
        blocks=blocks,
        link=link,
        link_clock=link_clock,
        check_regime=check_regime,
    )
