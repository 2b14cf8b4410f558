"""Run a chain's training step under a plan, exactly as the spec executes it.

`Executor(chain, plan, profile=...)` is an `nn.Module` around the chain: its
forward runs `F_0 .. F_{L-1}` with each layer's saved tensor kept, swapped or
marked for recomputation; the caller's `loss.backward()` then runs the
spec's backward steps through autograd hooks (`planopt.runtime.steps`). It is
also a context manager around one step, which checks that the step released
everything and records its statistics.

    executor = Executor(chain, plan, profile=profile, loss_fn=F.cross_entropy)
    loss = executor(x, y)      # the loss is fused into the last layer
    loss.backward()

What each action does, and when, is in `planopt.runtime.layers`; what `s_i`
is in PyTorch terms is in `planopt.runtime.storage`. A recompute run
`k+1 .. t` is regenerated as one block from layer `k`'s output (kept, or
swapped and copied back by then), immediately before `B_t`, with the
forward's RNG and autocast state and without touching buffers twice.

A plan is refused unless it fits the chain: one action per layer, the
chain's names, and, when it carries the fingerprint of the profile it was
solved for, that profile (`profile=`), whose measured saved bytes are checked
against the first step's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from planopt.errors import InvalidPlanError, ProfileMismatchError, where
from planopt.plan import RECOMPUTE, SWAP, Plan
from planopt.profile import Profile
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.layers import LAYER_CLASSES, Layer, RecomputeLayer, SwapLayer
from planopt.runtime.memory import Tracker
from planopt.runtime.recompute import ForwardState, buffers_unchanged, capture, replay
from planopt.runtime.steps import BackwardSteps
from planopt.runtime.storage import static_keys
from planopt.runtime.swap import CopyEngine, copy_engine


@dataclass(frozen=True, slots=True)
class StepStats:
    """What one step did. `saved_bytes` and `peak_saved_bytes` need tracking."""

    saved_bytes: tuple[int, ...] | None
    peak_saved_bytes: int | None
    copies_out: int
    bytes_out: int
    copies_back: int
    bytes_back: int
    recomputed_layers: int
    # The backward reached the end of the chain; None: not observed (a keep-all
    # plan without tracking runs plain autograd, with no hooks to observe it).
    complete: bool | None
    held_at_end: int | None  # tracked bytes still held after the step: 0 unless a bug


def check_plan(chain: Chain, plan: Plan, profile: Profile | None) -> None:
    """Refuse a plan that was not made for this chain (and this profile)."""
    n = len(chain)
    if len(plan) != n:
        raise InvalidPlanError(f"plan: must have one entry per chain layer ({n}), got {len(plan)}")
    if profile is not None:
        if not isinstance(profile, Profile):
            raise TypeError(f"profile must be a planopt.Profile, got {type(profile).__name__}")
        plan.check(profile)
        for i, (mine, theirs) in enumerate(zip(profile.names, chain.names, strict=True)):
            if mine != theirs:
                raise ProfileMismatchError(
                    f"{where(i, theirs)}: profile layer name must match the chain, got "
                    f"{mine!r}; the profile was measured on another model"
                )
    elif plan.profile is not None:
        raise ProfileMismatchError(
            f"plan: was made for profile {plan.profile}; pass profile= (the profile it was "
            "solved for) so the executor can check it belongs to this chain"
        )
    if plan.names:
        for i, (mine, theirs) in enumerate(zip(plan.names, chain.names, strict=True)):
            if mine is not None and mine != theirs:
                raise InvalidPlanError(
                    f"{where(i, theirs)}: name must match the chain, got {mine!r}"
                )


class _Schedule:
    """The plan, indexed for the step: runs, bases, waits and prefetches."""

    def __init__(self, plan: Plan) -> None:
        n = len(plan)
        self.actions = plan.actions
        self.run_starts: set[int] = set()  # first layer of each recompute run
        self.run_base: dict[int, int] = {}  # top of a run -> base k (-1: the input)
        for first, top in plan.runs():
            self.run_starts.add(first)
            self.run_base[top] = first - 1
        self.bases = {k for k in self.run_base.values() if k >= 0}
        self.waiters: dict[int, list[int]] = {}
        self.prefetch: dict[int, list[int]] = {}
        for i in range(n):
            if plan.actions[i] is SWAP:
                self.prefetch.setdefault(plan.prefetch_at[i], []).append(i)
                if plan.swap_wait[i] is not None:
                    self.waiters.setdefault(plan.swap_wait[i], []).append(i)
        for layers in self.prefetch.values():
            layers.sort(reverse=True)  # spec: higher layer index first
        self.trivial = not any(a is SWAP or a is RECOMPUTE for a in plan.actions)


class Step:
    """One forward and its backward under the plan."""

    def __init__(
        self,
        executor: Executor,
        x: torch.Tensor,
        target: torch.Tensor | None,
        *,
        track: bool,
        keep_log: bool,
    ) -> None:
        self.executor = executor
        self.chain = executor.chain
        self.loss_fn = executor.loss_fn
        self.schedule = executor._schedule
        self.x = x
        self.target = target
        self.device = _device_of(self.chain, x)
        self.tracker = Tracker(keep_log) if track else None
        self._static: frozenset[int] | None = None
        n = len(self.chain)
        self.layers: list[Layer] = [
            LAYER_CLASSES[a.value](self, i, track) for i, a in enumerate(self.schedule.actions)
        ]
        self.states: dict[int, ForwardState] = {}
        self.steps = BackwardSteps(n, self._issue, self._end, self._finish)
        self.watch = track or not self.schedule.trivial
        self._copies: CopyEngine | None = None
        self.copies_out = self.bytes_out = self.copies_back = self.bytes_back = 0
        self.recomputed = 0
        self.done = False

    @property
    def static(self) -> frozenset[int]:
        """Storage keys of parameters, buffers and the batch (only hooked layers need them)."""
        if self._static is None:
            self._static = static_keys(self.chain, (self.x, self.target))
        return self._static

    @property
    def copies(self) -> CopyEngine:
        if self._copies is None:
            self._copies = self.executor._engine(self.device)
        return self._copies

    # -- accounting ---------------------------------------------------------

    def alloc(self, what: str, layer: int, nbytes: int) -> None:
        if self.tracker is not None:
            self.tracker.alloc(what, layer, nbytes)

    def free(self, what: str, layer: int, nbytes: int) -> None:
        if self.tracker is not None:
            self.tracker.free(what, layer, nbytes)

    def stats_copy_out(self, nbytes: int) -> None:
        self.copies_out += 1
        self.bytes_out += nbytes

    def stats_copy_back(self, nbytes: int) -> None:
        self.copies_back += 1
        self.bytes_back += nbytes

    # -- forward ------------------------------------------------------------

    def forward(self) -> torch.Tensor:
        sched, chain, layers = self.schedule, self.chain, self.layers
        n = len(layers)
        h = self.x
        for i in range(n):
            for w in sched.waiters.get(i, ()):
                self.copies.wait_out(layers[w].host)  # swap_wait: F_i after the copy out of s_w
            if i in sched.run_starts:
                self.states[i] = capture(self.device)
            hooks = layers[i].hooks()
            with hooks if hooks is not None else contextlib.nullcontext():
                out = chain.run_layer(i, h, self.target, self.loss_fn)
            layer = layers[i]
            layer.after_forward(out)
            if i in sched.bases and not isinstance(layer, SwapLayer):
                layer.keep_output(out)
            # End of F_i: s_{i-1} of a swap or recompute layer leaves the device
            # (its copy out, if any, already ended or is ordered before the free).
            if i > 0:
                layers[i - 1].drop_forward()
            if i == n - 1:
                layer.drop_forward()
            if self.watch:
                self.steps.watch(i, out)
            h = out
        return h

    # -- backward -------------------------------------------------------------

    def _issue(self, t: int) -> None:
        layers = self.layers
        for i in self.schedule.prefetch.get(t, ()):
            layers[i].copy_back()
        k = self.schedule.run_base.get(t)
        if k is not None:
            self._regenerate(k, t)
        layers[t].before_backward()

    def _end(self, t: int) -> None:
        self.layers[t].release()

    def _regenerate(self, k: int, t: int) -> None:
        """The recompute block of run `k+1 .. t`, from layer `k`'s output."""
        if k < 0:
            base, requires_grad = self.x, self.x.requires_grad
        else:
            base, requires_grad = self.layers[k].base(), self.layers[k].base_requires_grad
        # The block must save what the forward saved, and what an operator
        # saves depends on which inputs require grad.
        base = base.detach().requires_grad_(requires_grad)
        modules = [self.chain.layers[j] for j in range(k + 1, t + 1)]
        with replay(self.states[k + 1]), buffers_unchanged(modules), torch.enable_grad():
            h = base
            for j in range(k + 1, t + 1):
                layer = self.layers[j]
                assert isinstance(layer, RecomputeLayer)
                with layer.rerun_hooks():
                    out = self.chain.run_layer(j, h, self.target, self.loss_fn)
                layer.after_rerun(out)
                h = out
        self.recomputed += t - k

    def _finish(self) -> None:
        self.done = True
        self.executor._step_finished(self, complete=True)

    def abort(self) -> None:
        """Release whatever the step still holds (no backward, or a failed one)."""
        if self.done:
            return
        self.done = True
        self.steps.finished = True
        for layer in self.layers:
            layer.release()
        self.executor._step_finished(self, complete=False)

    def stats(self, complete: bool) -> StepStats:
        tracked = self.tracker is not None
        return StepStats(
            saved_bytes=tuple(layer.forward_bytes for layer in self.layers) if tracked else None,
            peak_saved_bytes=self.tracker.peak if tracked else None,
            copies_out=self.copies_out,
            bytes_out=self.bytes_out,
            copies_back=self.copies_back,
            bytes_back=self.bytes_back,
            recomputed_layers=self.recomputed,
            complete=complete,
            held_at_end=self.tracker.held if tracked else None,
        )


_PLAIN_STATS = StepStats(None, None, 0, 0, 0, 0, 0, None, None)


def _device_of(chain: nn.Module, x: torch.Tensor) -> torch.device:
    for p in chain.parameters():
        return p.device
    return x.device


class Executor(nn.Module):
    """The chain's training step under `plan` (see the module docstring).

    `loss_fn` fuses the loss into the last layer (as the profiler does), and
    `forward(x, target)` returns the loss; without it `forward(x)` returns the
    model output. `track_memory` follows the saved bytes held on the device
    side (`last_step.peak_saved_bytes`), which is how `measure` reads the
    peak on CPU. With `profile=`, the first step checks its saved bytes per
    layer against the profile's.
    """

    def __init__(
        self,
        chain: Chain,
        plan: Plan,
        *,
        profile: Profile | None = None,
        loss_fn: LossFn | None = None,
        track_memory: bool = False,
        verify: bool = True,
        keep_log: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(chain, Chain):
            raise TypeError(f"chain must be a planopt.runtime.Chain, got {type(chain).__name__}")
        if not isinstance(plan, Plan):
            raise TypeError(f"plan must be a planopt.Plan, got {type(plan).__name__}")
        check_plan(chain, plan, profile)
        self.chain = chain
        self.plan = plan
        self.profile = profile
        self.loss_fn = loss_fn
        self.track_memory = track_memory
        self.keep_log = keep_log
        self._schedule = _Schedule(plan)
        self._verify = profile is not None and verify
        self._engines: dict[torch.device, CopyEngine] = {}
        self._step: Step | None = None
        self.last_step: StepStats | None = None
        self.last_log: list[tuple[str, int, int]] | None = None

    def _engine(self, device: torch.device) -> CopyEngine:
        engine = self._engines.get(device)
        if engine is None:
            engine = self._engines[device] = copy_engine(device)
        return engine

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        if self.loss_fn is not None and target is None:
            raise ValueError("executor: target is required when the executor has a loss_fn")
        if self._step is not None:
            self._step.abort()  # a forward without backward: release it
        if not torch.is_grad_enabled():
            return self._plain(x, target)
        verify = self._verify
        if self._schedule.trivial and not (self.track_memory or verify):
            # keep-all: ordinary autograd, nothing to hold, copy or regenerate.
            self.last_step = _PLAIN_STATS
            self.last_log = None
            return self._plain(x, target)
        step = Step(self, x, target, track=self.track_memory or verify, keep_log=self.keep_log)
        self._step = step
        try:
            out = step.forward()
            if verify:
                self._check_sizes(step)
        except BaseException:
            step.abort()
            raise
        return out

    def _plain(self, x: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        h = x
        for layer in self.chain.layers:
            h = layer(h)
        return h if self.loss_fn is None else self.loss_fn(h, target)

    def _check_sizes(self, step: Step) -> None:
        for i, (layer, spec) in enumerate(zip(step.layers, self.profile.layers, strict=True)):
            if layer.forward_bytes != spec.product_bytes:
                raise ProfileMismatchError(
                    f"{where(i, spec.name)}: saved bytes must match the profile "
                    f"({spec.product_bytes}), measured {layer.forward_bytes}; the profile was "
                    "measured with another batch shape, dtype, device or loss"
                )
        self._verify = False  # checked once, on the first step that passes

    def _step_finished(self, step: Step, *, complete: bool) -> None:
        if step is not self._step:
            return
        self._step = None
        self.last_step = step.stats(complete)
        self.last_log = step.tracker.log if step.tracker is not None else None

    # -- context manager: one training step -----------------------------------

    def __enter__(self) -> Executor:
        if self._step is not None:
            self._step.abort()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        step = self._step
        if step is not None:
            step.abort()  # the block ended without a (complete) backward
        return None

    def release_host_memory(self) -> None:
        """Free the pinned host buffers kept for reuse across steps (CUDA)."""
        for engine in self._engines.values():
            pool = getattr(engine, "pool", None)
            if pool is not None:
                pool.clear()
