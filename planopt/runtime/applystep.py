"""One training step of a model under a plan, applied in place with torch's own mechanisms.

A `PlanStep` lives from the model's forward to the end of its backward. Its
routing `saved_tensors_hooks` are active for the whole model forward (inside
a checkpoint region checkpoint's are innermost). Every tensor autograd saves
goes to the layer that owns it:

* the output of a swapped layer, or the top output of a recompute run, read
  by a later layer (its `saves_input`): a `Saved` reference, filled by the
  copy back (swap) or the run's regeneration (recompute);
* a tensor a swapped block makes (its internals; its output when its own
  backward reads it): a `Saved` that holds the tensor until the end of the
  block's forward, then nothing until the copy back;
* anything else (parameters, the batch, what kept layers save): the tensor.

`BackwardSteps` marks backward steps (hooks on each layer's output): at the issue of step `t`
the copies back with `prefetch_at = t` are enqueued, then the recompute block of step `t` runs,
and `B_t` waits for the copies it reads; at the end of `B_t` what it was the last reader of is
released. Block forwards, step issues and ends and unpacks `poll` the copy engine.

NOTE (a recompute run as one checkpoint): a run `k+1 .. t` of recomputed blocks is one
non-reentrant checkpoint region, opened in block `k+1`'s forward and closed after block `t`'s,
with the generator `checkpoint(..., use_reentrant=False)` steps around one call. It replays the
blocks' recorded calls from the run's base (checkpoint saves only the base, preserves RNG and
autocast). Early stop is off: the replay reaches the run's top output. A tiny `Trigger` saved
last in the region starts the regeneration at the block step. An option's region replays with
early stop (`r_k`); a swapped one's SAC cache goes to host and back (`planopt.runtime.sacswap`)."""

from __future__ import annotations

import contextlib
import functools
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.checkpoint import noop_context_fn

from planopt.errors import PlanoptError
from planopt.plan import RECOMPUTE, SWAP
from planopt.runtime.checkpointing import (
    OPTION_EARLY_STOP,
    Trigger,
    buffers_kept,
    checkpoint_region,
    sac_context,
)
from planopt.runtime.errors import StepUsageError
from planopt.runtime.regions import call_tensors, first_tensor, with_hidden, without_hidden
from planopt.runtime.sacswap import OptionCache
from planopt.runtime.steps import BackwardSteps
from planopt.runtime.storage import TensorMeta, byte_view, plain, storage_key, view_on

if TYPE_CHECKING:
    from planopt.runtime.stepowner import PlanHandle


class PlanCallError(PlanoptError, RuntimeError):
    """The model runs its blocks otherwise than the profile saw (a block twice in a step)."""


class Saved:
    """What autograd holds for a saved tensor of a swapped or recomputed product."""

    __slots__ = ("__weakref__", "meta", "owner", "tensor")

    def __init__(self, owner: Owner, t: torch.Tensor | None, meta: TensorMeta) -> None:
        self.owner = owner
        self.meta = meta
        self.tensor = t


class Owner:
    """A swapped or recomputed layer's products in one step."""

    def __init__(self, step: PlanStep, index: int) -> None:
        self.step = step
        self.index = index
        self.internals: dict[int, list[Saved]] = {}
        self.keep_alive: dict[int, torch.Tensor] = {}
        self.outputs: list[Saved] = []
        self.host = self.back = None
        self.order: list[int] = []  # internal storage keys, in copy order
        self.out_read = self.released = False  # out_read: the output was copied too
        self.cache: OptionCache | None = None  # a swapped block's option (its SAC cache)
        self.foreign: frozenset[int] = frozenset()  # storages the block does not own

    def add_internal(self, key: int, t: torch.Tensor) -> Saved:
        ref = Saved(self, plain(t), TensorMeta(t))
        self.internals.setdefault(key, []).append(ref)
        self.keep_alive.setdefault(key, plain(t))
        return ref

    def add_output_reader(self, t: torch.Tensor) -> Saved:
        ref = Saved(self, None, TensorMeta(t))
        self.outputs.append(ref)
        return ref

    def copy_out(self, out: torch.Tensor, out_read: bool) -> None:
        """End of a swapped block's forward: one copy of its internals (and output if read)."""
        out_key = storage_key(out)
        if out_key in self.internals:  # its own backward reads its output (saves_output)
            self.outputs.extend(self.internals.pop(out_key))
            self.keep_alive.pop(out_key, None)
        keys = list(self.internals)
        views = [byte_view(self.keep_alive[k]) for k in keys]
        if self.cache is not None:  # a partial option: its kept subset (v3, 12.2 item 3)
            views = [*self.cache.take(self.foreign, out, out_read), *views]
        if out_read:
            views.append(byte_view(out))
        self.order = keys
        self.host = self.step.copies.copy_out(views, self.index)
        for refs in self.internals.values():
            for ref in refs:
                ref.tensor = None
        for ref in self.outputs:
            ref.tensor = None
        self.keep_alive.clear()
        self.out_read = out_read

    def copy_back(self) -> None:
        if self.host is None or self.back is not None or self.released:
            return
        # `_fill` runs once the buffers exist: at once, or at the copy's start (a link).
        self.back = self.step.copies.copy_back(self.host, self.step.device, self._fill)
        self.back.buffers = []

    def _fill(self, buffers: list[torch.Tensor]) -> None:
        if self.cache is not None:
            buffers = self.cache.restore(list(buffers))
        for key, buffer in zip(self.order, buffers, strict=False):
            for ref in self.internals[key]:
                ref.tensor = view_on(buffer, ref.meta)
        if self.out_read:
            for ref in self.outputs:
                ref.tensor = view_on(buffers[-1], ref.meta)

    def wait_back(self) -> None:
        if self.back is not None:
            self.step.copies.wait_back(self.back)

    def regenerated(self, out: torch.Tensor) -> None:
        for ref in self.outputs:
            ref.tensor = view_on(out, ref.meta)

    def release_output(self) -> None:
        for ref in self.outputs:
            ref.tensor = None

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        for refs in self.internals.values():
            for ref in refs:
                ref.tensor = None
        self.release_output()
        if self.host is not None:
            self.step.copies.release(self.host, self.back)
        self.host = self.back = None
        if self.cache is not None:
            self.cache.drop()
            self.cache = None


class Run:
    """A recompute run in one step: its checkpoint region and the calls it replays."""

    def __init__(self, step: PlanStep, first: int, top: int) -> None:
        self.step, self.first, self.top = step, first, top
        self.calls: list[tuple[Any, tuple, dict]] = []
        self.gen = None
        self.trigger: torch.Tensor | None = None
        self.dummy = torch.zeros(1, requires_grad=True)

    def open(self, base: torch.Tensor, context_fn=noop_context_fn, early_stop=False) -> None:
        self.gen = checkpoint_region(self._replay, base, context_fn, early_stop)

    def record(self, original, args: tuple, kwargs: dict) -> None:
        self.calls.append((original, *without_hidden(args, kwargs)))

    def close(self) -> None:
        if self.step.regenerates_top(self.top):
            self.trigger = Trigger.apply(self.dummy)
        with contextlib.suppress(StopIteration):
            next(self.gen)
        self.gen = None

    def _replay(self, base: torch.Tensor) -> None:
        owner = self.step.owners.get(self.first)
        if owner is not None:
            owner.wait_back()  # a swapped option: R_i reads its copied-back kept subset
        h = base
        # A replay must not update buffers twice (batch-norm running statistics).
        with buffers_kept(self.step.handle.run_modules(self.first, self.top)):
            for original, args, kwargs in self.calls:
                a, k = with_hidden(args, kwargs, h)
                h = first_tensor(original(*a, **k))
        if self.step.regenerates_top(self.top):
            Trigger.apply(self.dummy)
            self.step.owner(self.top).regenerated(plain(h))

    def abandon(self) -> None:
        """Close a region whose forward raised (its saved-tensor hooks are popped)."""
        if self.gen is not None:
            self.gen.close()
            self.gen = None

    def regenerate(self) -> None:
        """The cost model's recompute block: unpack the trigger, which reruns the region."""
        if self.trigger is not None:
            trigger, self.trigger = self.trigger, None
            _ = trigger.grad_fn.saved_tensors


class PlanStep:
    """One forward and its backward under the plan (see the module docstring)."""

    def __init__(self, handle: PlanHandle, static: set[int], device: torch.device) -> None:
        self.handle = handle
        sched = handle.schedule
        self.sched = sched
        self.static = static
        self.device = device
        self.actions = sched.actions
        self.copies = handle.engine(device)
        self.owners: dict[int, Owner] = {}
        # output storage key -> its non-kept owner, and the storage (weakly)
        self.by_output: dict[int, tuple[Owner, weakref.ref]] = {}
        self.runs: dict[int, Run] = {}  # first layer of a run -> the run, while open or pending
        self.open_run: Run | None = None
        self.swapping: Owner | None = None
        self.foreign: set[int] = set()
        self.steps = BackwardSteps(handle.n, self._issue, self._end, self._finish)
        self.entered: set[int] = set()
        self.top_read = {top: u != top for u, (_, top) in sched.block_at.items()}

    def owner(self, i: int) -> Owner:
        owner = self.owners.get(i)
        if owner is None:
            owner = self.owners[i] = Owner(self, i)
        return owner

    def regenerates_top(self, top: int) -> bool:
        return self.top_read.get(top, False)

    # -- saved tensors ----------------------------------------------------------

    def pack(self, t: torch.Tensor) -> Any:
        key = storage_key(t)
        if key == 0 or key in self.static:
            return plain(t)
        entry = self.by_output.get(key)
        if entry is not None:
            owner, ref = entry
            storage = ref()
            if storage is not None and storage._cdata == key:
                return owner.add_output_reader(t)
            del self.by_output[key]  # freed: the address now holds another storage
        if self.swapping is not None and key not in self.foreign:
            return self.swapping.add_internal(key, t)
        return plain(t)

    def unpack(self, packed: Any) -> torch.Tensor:
        self.copies.poll()  # a copy back started by now gets its buffers
        if isinstance(packed, torch.Tensor):
            return packed
        packed.owner.wait_back()
        if packed.tensor is None:
            raise StepUsageError(
                f"planopt apply: a saved tensor of layer {packed.owner.index} was released or "
                "not yet copied back or regenerated; a plan supports one backward per forward "
                "(no retain_graph)"
            )
        # Read once, as torch.utils.checkpoint's holders are: the node holds it
        # while it runs, so it is freed node by node, as plain autograd frees.
        tensor, packed.tensor = packed.tensor, None
        return tensor

    # -- forward ----------------------------------------------------------------

    def block(self, r: int, original, args: tuple, kwargs: dict):
        """Block layer `r`'s forward under its action."""
        sched = self.sched
        if r in self.entered:
            raise PlanCallError(
                f"layer {r} ({self.handle.blocks.names[r - 1]}): a planned block must run once "
                "per step, got a second call in this forward"
            )
        self.entered.add(r)
        x = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("hidden_states")
        if r == 1:
            self.steps.watch(0, x)
            self.handle.check_input(x)
        self.copies.poll()  # the copies out that ended by now free their sources
        for w in sched.waiters.get(r, ()):
            self.copies.wait_out(self.owner(w).host)
        action = self.actions[r]
        option = self.handle.policy(r)
        if action is RECOMPUTE:
            run = self.open_run
            if run is None:
                run = self.open_run = Run(self, r, self.handle.run_top[r])
                self.runs[r] = run
                run.open(x)
            run.record(original, args, kwargs)
            out = original(*args, **kwargs)
            if r == run.top:
                run.close()
                self.open_run = None
        elif option is not None:
            run = self.open_run = Run(self, r, r)
            changed = self.sched.output_changed[r]  # the block above changes it in place
            context = functools.partial(sac_context, option, output_changed=changed)
            if action is SWAP:  # its kept subset goes to host (`planopt.runtime.sacswap`)
                owner = self.owner(r)
                context = owner.cache = OptionCache(option, changed, f"layer {r}")
                owner.foreign = self.static | {storage_key(t) for t in call_tensors(args, kwargs)}
            run.open(x, context, early_stop=OPTION_EARLY_STOP)
            run.record(original, args, kwargs)
            out = original(*args, **kwargs)
            run.close()
            self.open_run = None
        elif action is SWAP:
            self.swapping = self.owner(r)
            self.foreign = {storage_key(t) for t in call_tensors(args, kwargs)}
            try:
                out = original(*args, **kwargs)
            finally:
                self.swapping = None
                self.foreign = set()
        else:
            out = original(*args, **kwargs)
        h = first_tensor(out)
        self._after(r, h)
        return out

    def _after(self, r: int, h: torch.Tensor) -> None:
        action = self.actions[r]
        read = self.sched.out_read[r]
        if action is SWAP:
            owner = self.owner(r)
            owner.copy_out(h, read)
            if read:
                self._route_output(h, owner)
        elif action is RECOMPUTE and self.regenerates_top(r):
            self._route_output(h, self.owner(r))
        self.steps.watch(r, h)
        if r == self.handle.n - 2:  # the suffix's forward starts here
            self.copies.poll()
            for w in self.sched.waiters.get(r + 1, ()):
                self.copies.wait_out(self.owner(w).host)

    def _route_output(self, h: torch.Tensor, owner: Owner) -> None:
        # NOTE: a storage key is an address, which a later storage may reuse
        # once this one is freed; the weak reference tells them apart.
        self.by_output[storage_key(h)] = (owner, weakref.ref(h.untyped_storage()))

    def finish_forward(self, out: Any) -> None:
        h = first_tensor(out)
        if h is not None:
            self.steps.watch(self.handle.n - 1, h)

    # -- backward ---------------------------------------------------------------

    def _issue(self, t: int) -> None:
        sched = self.sched
        self.copies.poll()
        for i in sched.prefetch.get(t, ()):
            self.owner(i).copy_back()
        run = sched.block_at.get(t)
        if run is not None:
            pending = self.runs.pop(run[0], None)
            if pending is not None:
                pending.regenerate()
        for i in sched.reads_back[t]:
            self.owner(i).wait_back()

    def _end(self, t: int) -> None:
        self.copies.poll()
        if t in self.owners:
            self.owners[t].release()
        if t > 0 and (t - 1) in self.owners and not self.sched.saves_output[t - 1]:
            self.owners[t - 1].release_output()

    def _finish(self) -> None:
        self.abort()
        self.handle.step_finished(self)

    def abandon(self) -> None:
        """The model's forward raised: close an open checkpoint region, keep nothing."""
        if self.open_run is not None:
            self.open_run.abandon()
            self.open_run = None
        self.abort()

    def abort(self) -> None:
        for owner in self.owners.values():
            owner.release()
        self.runs.clear()
