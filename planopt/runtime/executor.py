"""Run a chain's training step under a plan, exactly as the cost model executes it.

`Executor(chain, plan, profile=...)` is an `nn.Module` around the chain: its
forward runs `F_0 .. F_{L-1}`, routing every tensor autograd saves to the
layer that owns its storage (`planopt.runtime.layers`), which keeps, swaps
or drops it as its action says; the caller's `loss.backward()` then runs the
spec's backward steps through autograd hooks (`planopt.runtime.steps`):
copies back at `prefetch_at`, each recompute run regenerated as one block at
its step (`B_{t+1}` when layer `t+1` reads the run's top output, else
`B_t`), each product released at the end of its last reader; at each step's
start the copy engine frees what the spec frees by then (`poll`). It is also
a context manager around one step, which releases what a step without
backward left.

    executor = Executor(chain, plan, profile=profile, loss_fn=F.cross_entropy)
    loss = executor(x, y)      # the loss is fused into the last layer
    loss.backward()

Who reads a layer's output (`saves_input`, `saves_output`) comes from the
profile, so a plan with a swap or a recompute needs `profile=`; the first
step checks the layer's products against it. A recompute block restores the
forward's RNG and autocast state and undoes buffer updates, so gradients are
bitwise those of plain PyTorch. A kept layer's partial option (cost model
v3) runs in a selective-checkpoint region (`planopt.runtime.partial`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from planopt.errors import InvalidPlanError, ProfileMismatchError, where
from planopt.plan import Plan
from planopt.profile import Device, Profile
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.engines import copy_engine
from planopt.runtime.errors import BatchError, DeviceError, RuntimeOptionError
from planopt.runtime.inputs import check_chain, check_choice, check_loss_fn
from planopt.runtime.layers import LayerState, unpack
from planopt.runtime.partial import check_partial_products, partial_forward
from planopt.runtime.recompute import (
    ForwardState,
    block_input,
    buffers_unchanged,
    capture,
    collected,
    replay,
)
from planopt.runtime.stepplan import StepPlan, check_plan
from planopt.runtime.steps import BackwardSteps
from planopt.runtime.storage import Saves, static_keys, storage_key
from planopt.runtime.swap import CopyEngine
from planopt.runtime.threadcopies import CLOCKS
from planopt.runtime.tracker import at, host_memory, regenerating


@dataclass(frozen=True, slots=True)
class StepStats:
    """What one step did (the executor's own account; the memory is measured elsewhere)."""

    copies_out: int
    bytes_out: int
    copies_back: int
    bytes_back: int
    recomputed_layers: int
    # The backward reached the end of the chain; None: not observed (a keep-all
    # plan runs plain autograd, with no hooks to observe it).
    complete: bool | None
    held_at_end: int | None  # products still held after the step: 0 unless a bug


class Step:
    """One forward and its backward under the plan."""

    def __init__(self, executor: Executor, x: torch.Tensor, target: torch.Tensor | None) -> None:
        self.executor = executor
        self.chain = executor.chain
        self.loss_fn = executor.loss_fn
        self.schedule = sched = executor._schedule
        self.out_read = sched.out_read
        self.bases = sched.bases
        self.x, self.target = x, target
        self.device = _device_of(self.chain, x)
        self.static = static_keys(self.chain, (x, target))
        self.layers = [LayerState(self, i, a) for i, a in enumerate(sched.actions)]
        self.base_requires_grad: dict[int, bool] = {}
        self.states: dict[int, ForwardState] = {}
        self.steps = BackwardSteps(len(self.chain), self._issue, self._end, self._finish)
        self._copies: CopyEngine | None = None
        self.copies_out = self.bytes_out = self.copies_back = self.bytes_back = 0
        self.recomputed, self.done = 0, False

    @property
    def copies(self) -> CopyEngine:
        if self._copies is None:
            self._copies = self.executor._engine(self.device)
        return self._copies

    def stats_copy_out(self, nbytes: int) -> None:
        self.copies_out, self.bytes_out = self.copies_out + 1, self.bytes_out + nbytes

    def stats_copy_back(self, nbytes: int) -> None:
        self.copies_back, self.bytes_back = self.copies_back + 1, self.bytes_back + nbytes

    def check_layer(self, layer: LayerState, saves: Saves) -> None:
        """First step with a profile: the layer's products are the profile's."""
        if self.executor._verify:
            self.executor._check_layer(layer.index, layer, saves)

    # -- forward ------------------------------------------------------------

    def forward(self) -> torch.Tensor:
        sched, chain, layers = self.schedule, self.chain, self.layers
        n = len(layers)
        h = self.x
        for i in range(n):
            self._boundary(f"F_{i}")
            for w in sched.waiters.get(i, ()):
                self.copies.wait_out(layers[w].host)  # swap_wait: F_i after the copy out of w
            if i in sched.run_starts:
                with host_memory():
                    self.states[i] = capture(self.device)
            layer = layers[i]
            layer.start_forward(h)
            policy = sched.policies[i]
            with saved_tensors_hooks(layer.pack, unpack):
                if policy is None:
                    out = chain.run_layer(i, h, self.target, self.loss_fn)
                else:  # a partial option (v3)
                    out = partial_forward(self, i, h, policy, sched.output_changed[i])
            layer.finish_forward(out, i in sched.bases)
            if i in sched.bases:
                self.base_requires_grad[i] = out.requires_grad
            if i > 0:  # end of F_i: x_i's forward use
                layers[i - 1].end_forward_use(h._version, layer.action, policy is not None)
            else:
                layer.end_batch_use(h._version, policy is not None)
            self.steps.watch(i, out)
            h = out
        self.executor._verified()
        return h

    # -- backward -------------------------------------------------------------

    def _boundary(self, label: str) -> None:
        at(label)  # a step starts: what the copy engine frees or allocates by now goes first
        if self._copies is not None:
            self._copies.poll()

    def _issue(self, t: int) -> None:
        self._boundary(f"B_{t}")
        layers = self.layers
        for i in self.schedule.prefetch.get(t, ()):
            layers[i].copy_back()
        run = self.schedule.block_at.get(t)
        if run is not None:
            self._regenerate(*run)
        for i in self.schedule.reads_back[t]:
            layers[i].wait_back()

    def _end(self, t: int) -> None:
        self.layers[t].release()
        if t > 0 and not self.schedule.saves_output[t - 1]:
            self.layers[t - 1].release_output()  # B_t was the last reader of x_t

    def _regenerate(self, first: int, top: int) -> None:
        """The recompute block of run `first .. top`, from layer `first - 1`'s output."""
        at(f"R_{first}..{top}")
        k = first - 1
        if k < 0:
            base, requires_grad = self.x, self.x.requires_grad
        else:
            base, requires_grad = self.layers[k].base(), self.base_requires_grad[k]
        modules = [self.chain.layers[j] for j in range(first, top + 1)]
        with (
            replay(self.states[first]),
            buffers_unchanged(modules),
            torch.enable_grad(),
            regenerating(),
        ):
            # The block must save what the forward saved, and what an operator
            # saves depends on which inputs require grad; nothing but `h` may
            # hold the base, which goes once the block's first forward is done.
            h = block_input(base, requires_grad)
            del base
            for j in range(first, top + 1):
                saves = Saves(self.static, storage_key(h) if j > 0 else 0, frozenset())
                with collected(saves):
                    out = self.chain.run_layer(j, h, self.target, self.loss_fn)
                self.layers[j].regenerated(saves, out)
                if j == first and k >= 0:
                    self.layers[k].output.base = None  # the block's read of its base ends
                h = out
        del h, out
        self.recomputed += top - first + 1

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
        return StepStats(
            copies_out=self.copies_out,
            bytes_out=self.bytes_out,
            copies_back=self.copies_back,
            bytes_back=self.bytes_back,
            recomputed_layers=self.recomputed,
            complete=complete,
            held_at_end=sum(layer.held() for layer in self.layers),
        )


_PLAIN_STATS = StepStats(0, 0, 0, 0, 0, None, None)


def _device_of(chain: nn.Module, x: torch.Tensor) -> torch.device:
    for p in chain.parameters():
        return p.device
    return x.device


class Executor(nn.Module):
    """The chain's training step under `plan` (see the module docstring).

    `loss_fn` fuses the loss into the last layer (as the profiler does), and
    `forward(x, target)` returns the loss; without it `forward(x)` returns the
    model output. `profile` (required when the plan swaps or recomputes)
    says which layers read their input or output in backward; with
    `verify`, the first step checks every layer's products against it.
    `link` (CPU only) emulates the host link: copies run on host threads
    and last `latency + bytes / bandwidth` (`ThreadCopies`), on the wall
    clock or (`link_clock="thread"`) on the compute thread's CPU time plus its
    waits; without it CPU copies end when they are made.
    """

    def __init__(
        self,
        chain: Chain,
        plan: Plan,
        *,
        profile: Profile | None = None,
        loss_fn: LossFn | None = None,
        verify: bool = True,
        link: Device | None = None,
        link_clock: str = "wall",
    ) -> None:
        super().__init__()
        check_chain(chain, "Executor")
        if not isinstance(plan, Plan):
            hint = " (a Solution without a plan: its status says why, e.g. infeasible)"
            raise InvalidPlanError(
                f"Executor: plan must be a planopt.Plan, got {type(plan).__name__}"
                + (hint if plan is None else "")
            )
        if loss_fn is not None:
            check_loss_fn(loss_fn, "Executor")
        check_plan(chain, plan, profile)
        self.chain = chain
        self.plan = plan
        self.profile = profile
        self.loss_fn = loss_fn
        self._schedule = StepPlan(plan, profile)
        if profile is None and not self._schedule.trivial:
            raise InvalidPlanError(
                "executor: a plan that swaps or recomputes needs profile= (a planopt.profile/2 "
                "of this chain): who reads each layer's output decides what is copied and "
                "where a recompute block runs"
            )
        if link is not None and not isinstance(link, Device):
            raise RuntimeOptionError(
                f"Executor: link must be a planopt.Device, got {type(link).__name__}"
            )
        check_choice("link_clock", link_clock, CLOCKS, "Executor")
        self.link = link
        self.link_clock = link_clock
        self._verify = profile is not None and verify
        self._engines: dict[torch.device, CopyEngine] = {}
        self._step: Step | None = None
        self.last_step: StepStats | None = None

    def _engine(self, device: torch.device) -> CopyEngine:
        engine = self._engines.get(device)
        if engine is None:
            engine = self._engines[device] = copy_engine(device, self.link, self.link_clock)
        return engine

    @property
    def engines(self) -> dict[torch.device, CopyEngine]:
        """The copy engines used so far, by device (a `ThreadCopies` keeps `records`)."""
        return dict(self._engines)

    def synchronize(self) -> None:
        """Return when every copy enqueued so far has ended (the step's makespan)."""
        for engine in self._engines.values():
            engine.synchronize()

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise BatchError(
                f"Executor: inputs must be a tensor, got {type(x).__name__}; call "
                "executor(x, y) with the batch's two tensors"
            )
        if self.loss_fn is not None and not isinstance(target, torch.Tensor):
            raise BatchError(
                "Executor: target must be a tensor when the executor has a loss_fn, got "
                f"{type(target).__name__}; call executor(x, y)"
            )
        device = _device_of(self.chain, x)
        if x.device != device:
            raise DeviceError(
                f"Executor: inputs must be on the parameters' device {device}, got {x.device}"
            )
        if self._step is not None:
            self._step.abort()  # a forward without backward: release it
        if not torch.is_grad_enabled():
            return self._plain(x, target)
        if self._schedule.trivial and not self._verify:
            # keep-all: ordinary autograd, nothing to hold, copy or regenerate.
            self.last_step = _PLAIN_STATS
            return self._plain(x, target)
        step = Step(self, x, target)
        self._step = step
        try:
            out = step.forward()
        except BaseException:
            step.abort()
            raise
        return out

    def _plain(self, x: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        h = x
        for layer in self.chain.layers:
            h = layer(h)
        return h if self.loss_fn is None else self.loss_fn(h, target)

    def _check_layer(self, i: int, layer: LayerState, saves: Saves) -> None:
        spec = self.profile.layers[i]
        if self._schedule.policies[i] is not None:
            check_partial_products(i, spec, layer.output.nbytes)
            return
        got = (
            layer.output.nbytes,
            sum(p.nbytes for p in layer.internals),
            saves.saves_input,
            saves.saves_output,
        )
        want = (spec.out_bytes, spec.saved_bytes, spec.saves_input, spec.saves_output)
        if got != want:
            fields = ("out_bytes", "saved_bytes", "saves_input", "saves_output")
            diff = ", ".join(
                f"{f} {w!r} (measured {g!r})"
                for f, g, w in zip(fields, got, want, strict=True)
                if g != w
            )
            raise ProfileMismatchError(
                f"{where(i, spec.name)}: products must match the profile, got {diff}; the "
                "profile was measured with another batch shape, dtype, device or loss, or "
                "is not a planopt.profile/2 measured by planopt.runtime.profile"
            )

    def _verified(self) -> None:
        self._verify = False  # checked once, on the first forward that passes

    def _step_finished(self, step: Step, *, complete: bool) -> None:
        if step is not self._step:
            return
        self._step = None
        self.last_step = step.stats(complete)

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
        """Free what the copy engines keep across steps: pinned buffers (CUDA), threads."""
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()
