"""A layer's products during one step, held, swapped, dropped and regenerated as v2 says.

Layer `i`'s products are its output (one storage, `x_{i+1}`) and its
internals (`planopt.runtime.storage`). Every tensor autograd saves is
routed, at pack time, to the layer that owns its storage: the input `x_i`
to layer `i-1` (its output), anything else the forward of `i` saved to
layer `i`. The owner's action decides what autograd holds:

* `keep`: the tensor itself. Autograd releases it after the last node that
  reads it, exactly as plain PyTorch does.
* `swap`, `recompute`: a `Ref` (storage, layout). It holds the tensor until
  the end of the owner's forward, then nothing; the copy back (`swap`) or the
  recompute block (`recompute`) gives it a tensor again, over a fresh
  storage, just before its reader runs. Autograd releases the `Ref` after
  the node that reads it, so the regenerated storage goes when its last
  reader is done, as a kept one would; the executor drops what is left at
  the end of each part's last backward reader (the spec's instant), in case
  autograd never reads it.

| call | when (spec) |
| --- | --- |
| `pack(t)` | during `F_i`: each tensor autograd saves |
| `finish_forward(out)` | end of `F_i`: classify, copy out (`swap`), drop (`swap`, `recompute`) |
| `copy_back()` | issue of the backward step `prefetch_at` (`swap`) |
| `regenerate(...)` | the recompute block of the run holding the layer |
| `release_output()`, `release()` | end of the output's last reader; end of `B_i` |
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

import torch

from planopt.errors import PlanoptError, where
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action
from planopt.runtime.chain import Chain
from planopt.runtime.recompute import RecomputeError
from planopt.runtime.sacswap import OptionCache
from planopt.runtime.storage import (
    Saves,
    TensorMeta,
    byte_view,
    plain,
    storage_key,
    storage_nbytes,
    view_on,
)
from planopt.runtime.swap import CopyEngine, DeviceCopy, HostCopy


class Step(Protocol):
    """What a layer reads of its step (`planopt.runtime.executor.Step` is one).

    A protocol, so that the executor imports this module and not the reverse.
    """

    chain: Chain
    static: frozenset[int]
    layers: list[LayerState]
    out_read: list[bool]
    bases: set[int]
    device: torch.device

    @property
    def copies(self) -> CopyEngine: ...

    def check_layer(self, layer: LayerState, saves: Saves) -> None: ...

    def stats_copy_out(self, nbytes: int) -> None: ...

    def stats_copy_back(self, nbytes: int) -> None: ...


class ReleasedError(PlanoptError, RuntimeError):
    """A saved tensor was asked for after the executor released it."""


class Ref:
    """What autograd holds for a saved tensor of a swapped or recomputed product."""

    __slots__ = ("__weakref__", "meta", "part", "tensor", "version")

    def __init__(self, part: Part | None, t: torch.Tensor) -> None:
        self.part = part
        self.meta = TensorMeta(t)
        self.tensor: torch.Tensor | None = plain(t)
        self.version = t._version


class Part:
    """One storage among layer `i`'s products: its output or one internal."""

    __slots__ = ("base", "index", "kind", "layer", "meta", "nbytes", "refs")

    def __init__(self, layer: LayerState, kind: str, index: int, nbytes: int) -> None:
        self.layer = layer
        self.kind = kind  # "output" or "internal"
        self.index = index
        self.nbytes = nbytes
        self.refs: list[weakref.ref] = []
        self.meta: TensorMeta | None = None  # the output's layout (a recompute base)
        self.base: torch.Tensor | None = None  # the output, held as a recompute base

    def attach(self, ref: Ref) -> None:
        ref.part = self
        self.refs.append(weakref.ref(ref))

    def live_refs(self) -> list[Ref]:
        return [r for r in (w() for w in self.refs) if r is not None]

    def fill(self, storage_tensor: torch.Tensor) -> None:
        """Give every reader a tensor over `storage_tensor`'s storage (a fresh copy)."""
        for ref in self.live_refs():
            ref.tensor = view_on(storage_tensor, ref.meta)

    def drop(self) -> None:
        for ref in self.live_refs():
            ref.tensor = None
        self.base = None

    def held(self) -> bool:
        return self.base is not None or any(r.tensor is not None for r in self.live_refs())


def unpack(packed: Any) -> torch.Tensor:
    """The one unpack hook: a tensor as is, or a `Ref`'s current tensor."""
    if isinstance(packed, torch.Tensor):
        return packed
    tensor = packed.tensor
    if tensor is None:
        layer = packed.part.layer if packed.part is not None else None
        state = "released" if layer is None or layer.released else "not regenerated yet"
        raise ReleasedError(
            f"{layer.where if layer else 'executor'}: saved tensor is {state}; the executor "
            "supports one backward per forward (no retain_graph) through the chain's own output"
        )
    if packed.part is not None:
        packed.part.layer.wait_back()
    return tensor


class LayerState:
    """Layer `i`'s products in one step, under its action (see the module doc)."""

    def __init__(self, step: Step, index: int, action: Action) -> None:
        self.step = step
        self.index = index
        self.action = action
        self.saves: Saves | None = None
        self.pending: dict[int, list[Ref]] = {}
        self.output: Part | None = None
        self.internals: list[Part] = []
        self.host: HostCopy | None = None
        self.back: DeviceCopy | None = None
        self.cache: OptionCache | None = None  # a swapped layer's option (its SAC cache)
        self.copied_version = 0  # the output's version when it was copied out
        self.input_refs: list[Ref] = []  # refs this forward made to the layer below's output
        self.input_version = 0  # the input's version as the forward starts
        self.released = False

    @property
    def where(self) -> str:
        return where(self.index, self.step.chain.names[self.index])

    # -- forward ----------------------------------------------------------------

    def start_forward(self, x: torch.Tensor) -> None:
        step = self.step
        input_key = storage_key(x) if self.index > 0 else 0
        self.input_version = x._version
        self.saves = Saves(step.static, input_key, frozenset())

    def pack(self, t: torch.Tensor) -> Any:
        saves = self.saves
        key = saves.add(t)
        if key is None:
            return plain(t)
        if key == saves.input_key:
            below = self.step.layers[self.index - 1]
            if below.action is KEEP:
                return plain(t)
            ref = Ref(None, t)
            ref.tensor = None  # the layer below holds its output as its action says
            below.output.attach(ref)
            self.input_refs.append(ref)
            return ref
        if self.action is KEEP:
            return plain(t)
        ref = Ref(None, t)
        self.pending.setdefault(key, []).append(ref)
        return ref

    def finish_forward(self, out: torch.Tensor, is_base: bool) -> None:
        """End of `F_i`: classify what was saved, then act (module doc)."""
        saves = self.saves
        saves.classify(out)
        self._check_input_refs()
        self.output = Part(self, "output", 0, storage_nbytes(out))
        self.output.meta = TensorMeta(out)
        self.internals = [
            Part(self, "internal", n, storage_nbytes(saves.tensors[key]))
            for n, key in enumerate(saves.internals)
        ]
        parts = {saves.out_key: self.output}
        parts.update(zip(saves.internals, self.internals, strict=True))
        for key, refs in self.pending.items():
            for ref in refs:
                parts[key].attach(ref)
        self.step.check_layer(self, saves)
        if self.action is SWAP:
            self._copy_out(out, [saves.tensors[k] for k in saves.internals])
        elif is_base:
            self.output.base = plain(out)  # keep: the base of the recompute run above
        if self.action is not KEEP:
            for refs in self.pending.values():
                for ref in refs:
                    ref.tensor = None
        self.pending.clear()
        saves.release()
        self.saves = None
        self.copied_version = out._version

    def _copy_out(self, out: torch.Tensor, internals: list[torch.Tensor]) -> None:
        step = self.step
        views = [byte_view(t) for t in internals]
        if self.cache is not None:  # a partial option: its kept subset (v3, 12.2 item 3)
            foreign = step.static | {self.saves.input_key}
            views = [*self.cache.take(foreign, out, step.out_read[self.index]), *views]
        if step.out_read[self.index]:
            views.append(byte_view(out))
        self.host = step.copies.copy_out(views, self.index)
        step.stats_copy_out(sum(v.numel() for v in views))

    def _check_input_refs(self) -> None:
        """The layer below's output must not change in place after it was copied or saved.

        Unless this layer is recomputed: its block runs the change again on the
        value before it (the run's base, or the output the block regenerated)
        and gives `B_i` the changed value, as the forward did.
        """
        if self.action is RECOMPUTE:
            self.input_refs.clear()
            return
        for ref in self.input_refs:
            below = ref.part.layer
            if ref.version != below.copied_version:
                raise RecomputeError(
                    f"{self.where}: a layer that modifies its input in place before saving "
                    f"it must be recomputed, or the layer below kept, when the layer below "
                    f"is {below.action.value}, got {self.action.value} (the copy or the "
                    "recomputation of the layer below holds the value before the change)"
                )
        self.input_refs.clear()

    def end_forward_use(self, out_version: int, above: Action, partial: bool = False) -> None:
        """End of `F_{i+1}`: the output was not modified in place meanwhile, or may be.

        A change by `F_{i+1}` is safe when layer `i+1` is recomputed, or kept
        with a partial option (`partial`: its replay starts from its input),
        and this layer is swapped (the copy holds the value before the
        change, which the replay starts from) or recomputed (its block
        regenerates it, then the replay changes it again). Above a kept layer
        the replay would start from the changed value: refused.
        """
        if out_version == self.copied_version:
            return
        replayed = above is RECOMPUTE or partial
        if replayed and self.action is KEEP:
            upper = self.step.layers[self.index + 1]
            what = "take a partial option" if partial else "start a recompute run"
            raise RecomputeError(
                f"{upper.where}: a layer that modifies its input in place must not {what} "
                f"above a kept layer ({self.where}): its replay would run again from the "
                "changed value; swap the layer below (its copy holds the value before the "
                "change), recompute it, or keep this layer whole"
            )
        if self.step.out_read[self.index] and self.action is not KEEP and not replayed:
            raise RecomputeError(
                f"{self.where}: output must not be modified in place by the next layer when "
                f"this layer is {self.action.value} and the next one is {above.value} (its "
                "copy or recomputation holds the value before the change); recompute the "
                "next layer too, or keep this one"
            )

    def end_batch_use(self, version: int, partial: bool) -> None:
        """End of `F_0`: a change of the batch in place is refused when layer 0 is
        replayed (the batch is the caller's, held as a kept layer's output)."""
        if version != self.input_version and (self.action is RECOMPUTE or partial):
            raise RecomputeError(
                f"{self.where}: a layer that modifies its input in place must not be "
                "replayed (recomputed or partial) above the batch: its replay would start "
                "from the changed batch (the in-place rule); keep it whole or swap it"
            )

    # -- backward -----------------------------------------------------------------

    def copy_back(self) -> None:
        if self.back is not None or self.released or self.host is None:
            return
        step = self.step
        back = step.copies.copy_back(self.host, step.device)
        self.back = back
        step.stats_copy_back(back.nbytes)
        parts = list(self.internals)
        if step.out_read[self.index]:
            parts.append(self.output)
        buffers = back.buffers
        if self.cache is not None:
            buffers = self.cache.restore(buffers)
        for part, buffer in zip(parts, buffers, strict=True):
            part.fill(buffer)
            if part is self.output and self.index in step.bases:
                part.base = view_on(buffer, part.meta)
        back.buffers = []  # the readers hold the storages now

    def wait_back(self) -> None:
        if self.back is not None:
            self.step.copies.wait_back(self.back)

    def base(self) -> torch.Tensor:
        """The output, for the recompute block of the run above."""
        base = self.output.base if self.output is not None else None
        if base is None:
            raise ReleasedError(f"{self.where}: output must be held as a recompute base")
        self.wait_back()
        return base

    def regenerated(self, saves: Saves, out: torch.Tensor) -> None:
        """The recompute block ran this layer's forward again: fill its readers."""
        saves.classify(out)
        got = [storage_nbytes(saves.tensors[k]) for k in saves.internals]
        want = [p.nbytes for p in self.internals]
        if got != want or storage_nbytes(out) != self.output.nbytes:
            raise RecomputeError(
                f"{self.where}: recomputation must recreate the storages its forward saved "
                f"(internals {want} bytes, output {self.output.nbytes}), got internals {got}, "
                f"output {storage_nbytes(out)}; the layer's forward is not repeatable "
                "(data-dependent shapes or side effects), so it cannot be recomputed"
            )
        for part, key in zip(self.internals, saves.internals, strict=True):
            part.fill(saves.tensors[key])
        self.output.fill(out)
        saves.release()

    def release_output(self) -> None:
        if self.output is not None:
            self.output.drop()

    def release(self) -> None:
        """End of `B_i`: nothing of this layer is read again."""
        if self.released:
            return
        self.released = True
        for part in self.internals:
            part.drop()
        self.release_output()
        if self.host is not None:
            self.step.copies.release(self.host, self.back)
        self.host = self.back = None
        if self.cache is not None:
            self.cache.drop()
            self.cache = None
        self.pending.clear()
        self.saves = None

    def held(self) -> int:
        """Parts still holding a tensor (0 after a complete step unless a bug)."""
        parts = [*self.internals, *([self.output] if self.output else [])]
        return sum(part.held() for part in parts)
