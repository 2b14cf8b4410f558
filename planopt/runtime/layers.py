"""One layer's saved tensor `s_i` during one step, for each action of the plan.

Each class does, for its action, what the spec's memory table says, at the
instants the executor calls it:

| call | when (spec) |
| --- | --- |
| `hooks()` | around `F_i`: pack/unpack of everything autograd saves |
| `after_forward(out)` | end of `F_i` (the output joins `s_i`; a swap's copy out is enqueued) |
| `drop_forward()` | end of `F_{i+1}` (of `F_i` for the last layer): swap, recompute free |
| `copy_back()` | when the backward step `prefetch_at` is issued (swap) |
| `before_backward()` | start of `B_i`: a swap waits for its copy back |
| `release()` | end of `B_i` |

Memory is reported to the step's tracker at those same calls, so the
tracked peak is the spec's peak when copies are instantaneous (CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.autograd.graph import saved_tensors_hooks

from planopt.errors import where
from planopt.runtime.recompute import SavedMeta, check_count, check_same
from planopt.runtime.storage import SavedSet, TensorMeta, byte_view, plain, view_on
from planopt.runtime.swap import DeviceCopy, HostCopy

if TYPE_CHECKING:
    from planopt.runtime.executor import Step


class ReleasedError(RuntimeError):
    """A saved tensor was asked for after the executor released it."""


class _SwapRef:
    """What autograd holds for a swapped saved tensor: its slot and layout."""

    __slots__ = ("layer", "meta", "slot")

    def __init__(self, layer: SwapLayer, slot: int, meta: TensorMeta) -> None:
        self.layer = layer
        self.slot = slot
        self.meta = meta


class _RecomputeRef:
    """What autograd holds for a recomputed saved tensor: its position in the forward."""

    __slots__ = ("index", "layer")

    def __init__(self, layer: RecomputeLayer, index: int) -> None:
        self.layer = layer
        self.index = index


def unpack(packed: Any) -> torch.Tensor:
    """The one unpack hook: a tensor as is, or a swapped/recomputed one fetched."""
    if isinstance(packed, torch.Tensor):
        return packed
    if isinstance(packed, _SwapRef):
        return packed.layer.fetch(packed.slot, packed.meta)
    return packed.layer.regenerated(packed.index)


class Layer:
    """Common state: the step, the index, the forward's saved set and output."""

    action = "keep"

    def __init__(self, step: Step, index: int, track: bool) -> None:
        self.step = step
        self.index = index
        self.track = track
        self.saved: SavedSet | None = None
        self.forward_bytes = 0  # |s_i| as seen in this step's forward
        self.output: torch.Tensor | None = None  # kept for a recompute base
        self.output_version = 0
        self.base_requires_grad = False

    @property
    def where(self) -> str:
        return where(self.index, self.step.chain.names[self.index])

    def _add(self, t: torch.Tensor) -> tuple[int, int] | None:
        added = self.saved.add(t)
        if added is not None and added[1]:
            self.step.alloc("forward", self.index, added[1])
        return added

    def hooks(self) -> saved_tensors_hooks | None:
        return None

    def after_forward(self, out: torch.Tensor) -> None:
        if self.saved is not None:
            self._add(out)
            self.forward_bytes = self.saved.nbytes

    def keep_output(self, out: torch.Tensor) -> None:
        """Hold the output as the base of the recompute run above (it is part of s_i)."""
        self.output = plain(out)
        self.output_version = out._version
        self.base_requires_grad = out.requires_grad

    def base(self) -> torch.Tensor:
        """The output, for the recompute block that starts at layer i+1."""
        out = self.output
        if out is None:
            raise ReleasedError(f"{self.where}: output must be held as a recompute base")
        if out._version != self.output_version:
            raise RuntimeError(
                f"{self.where}: output must not be modified in place after its forward "
                "(the recomputation of the next layers starts from it)"
            )
        return out

    def drop_forward(self) -> None:
        return None

    def copy_back(self) -> None:
        return None

    def before_backward(self) -> None:
        return None

    def release(self) -> None:
        return None


class KeepLayer(Layer):
    """`keep`: ordinary autograd. Tracked, it holds its storages until the end of `B_i`."""

    def __init__(self, step: Step, index: int, track: bool) -> None:
        super().__init__(step, index, track)
        if track:
            self.saved = SavedSet(step.static)

    def hooks(self) -> saved_tensors_hooks | None:
        if self.saved is None:
            return None

        def pack(t: torch.Tensor) -> torch.Tensor:
            self._add(t)
            return plain(t)

        return saved_tensors_hooks(pack, unpack)

    def release(self) -> None:
        if self.saved is not None:
            self.step.free("keep", self.index, self.saved.nbytes)
            self.saved = None
        self.output = None


class SwapLayer(Layer):
    """`swap`: storages copied to the host after `F_i`, back at `prefetch_at`."""

    action = "swap"

    def __init__(self, step: Step, index: int, track: bool) -> None:
        super().__init__(step, index, track)
        self.saved = SavedSet(step.static)
        self.out_ref: _SwapRef | torch.Tensor | None = None
        self.host: HostCopy | None = None
        self.back: DeviceCopy | None = None
        self.released = False

    def hooks(self) -> saved_tensors_hooks:
        def pack(t: torch.Tensor) -> Any:
            added = self._add(t)
            if added is None:
                return plain(t)
            return _SwapRef(self, added[0], TensorMeta(t))

        return saved_tensors_hooks(pack, unpack)

    def after_forward(self, out: torch.Tensor) -> None:
        added = self._add(out)
        self.out_ref = plain(out) if added is None else _SwapRef(self, added[0], TensorMeta(out))
        self.output_version = out._version
        self.base_requires_grad = out.requires_grad
        self.forward_bytes = self.saved.nbytes
        self.host = self.step.copies.copy_out([byte_view(t) for t in self.saved.slots])
        self.step.stats_copy_out(self.saved.nbytes)

    def drop_forward(self) -> None:
        saved = self.saved
        if saved is None:
            return
        if saved.slots and isinstance(self.out_ref, _SwapRef):
            out = saved.slots[self.out_ref.slot]
            if out._version != self.output_version:
                raise RuntimeError(
                    f"{self.where}: output must not be modified in place by the next layer "
                    "(it is being copied to the host)"
                )
        self.step.free("swap-out", self.index, saved.nbytes)
        self.saved = None  # the device storages go; CUDA: after the copy (record_stream)

    def copy_back(self) -> None:
        if self.back is None and not self.released:
            self.back = self.step.copies.copy_back(self.host, self.step.device)
            self.step.alloc("copy-back", self.index, self.back.nbytes)
            self.step.stats_copy_back(self.back.nbytes)

    def fetch(self, slot: int, meta: TensorMeta) -> torch.Tensor:
        back = self.back
        if back is None:
            state = "released" if self.released else "not copied back yet"
            raise ReleasedError(
                f"{self.where}: swapped tensor is {state}; the executor supports one "
                "backward per forward (no retain_graph) through the chain's own output"
            )
        self.step.copies.wait_back(back)
        return view_on(back.buffers[slot], meta)

    def base(self) -> torch.Tensor:
        if isinstance(self.out_ref, _SwapRef):
            return self.fetch(self.out_ref.slot, self.out_ref.meta)
        if self.out_ref is None:
            raise ReleasedError(f"{self.where}: output must be held as a recompute base")
        return self.out_ref

    def before_backward(self) -> None:
        if self.back is not None:
            self.step.copies.wait_back(self.back)

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self.saved is not None:  # released before its forward was dropped (aborted step)
            self.step.free("swap-out", self.index, self.saved.nbytes)
            self.saved = None
        if self.host is not None:
            self.step.copies.release(self.host, self.back)
        if self.back is not None:
            self.step.free("copy-back", self.index, self.back.nbytes)
        self.host = self.back = self.out_ref = None


class RecomputeLayer(Layer):
    """`recompute`: dropped after `F_{i+1}`, regenerated by its run's block in backward."""

    action = "recompute"

    def __init__(self, step: Step, index: int, track: bool) -> None:
        super().__init__(step, index, track)
        self.saved = SavedSet(step.static)
        self.metas: list[SavedMeta] = []
        self.regen: list[torch.Tensor] | None = None
        self.regen_set: SavedSet | None = None
        self.released = False

    def hooks(self) -> saved_tensors_hooks:
        def pack(t: torch.Tensor) -> _RecomputeRef:
            self.metas.append(SavedMeta.of(t))
            self._add(t)
            return _RecomputeRef(self, len(self.metas) - 1)

        return saved_tensors_hooks(pack, unpack)

    def drop_forward(self) -> None:
        if self.saved is not None:
            self.step.free("recompute-drop", self.index, self.saved.nbytes)
            self.saved = None

    # -- the recompute block ------------------------------------------------

    def rerun_hooks(self) -> saved_tensors_hooks:
        """Hooks for this layer's forward inside the block: collect, in order, check."""
        self.regen = []
        self.regen_set = SavedSet(self.step.static)

        def pack(t: torch.Tensor) -> None:
            index = len(self.regen)
            if index < len(self.metas):
                check_same(self.where, index, self.metas[index], t)
            self.regen.append(plain(t))
            added = self.regen_set.add(t)
            if added is not None and added[1]:
                self.step.alloc("regenerate", self.index, added[1])
            return None

        return saved_tensors_hooks(pack, _never)

    def after_rerun(self, out: torch.Tensor) -> None:
        check_count(self.where, len(self.metas), len(self.regen))
        added = self.regen_set.add(out)
        if added is not None and added[1]:
            self.step.alloc("regenerate", self.index, added[1])

    def regenerated(self, index: int) -> torch.Tensor:
        if self.regen is None:
            state = "released" if self.released else "not recomputed yet"
            raise ReleasedError(
                f"{self.where}: recomputed tensor is {state}; the executor supports one "
                "backward per forward (no retain_graph) through the chain's own output"
            )
        return self.regen[index]

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self.drop_forward()
        if self.regen_set is not None:
            self.step.free("regenerated", self.index, self.regen_set.nbytes)
        self.regen = self.regen_set = None
        self.output = None


def _never(_packed: Any) -> torch.Tensor:
    raise RuntimeError("the graph built inside a recompute block is never backpropagated")


LAYER_CLASSES = {"keep": KeepLayer, "swap": SwapLayer, "recompute": RecomputeLayer}
