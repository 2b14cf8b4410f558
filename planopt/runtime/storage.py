"""What a layer's saved tensor `s_i` is, in PyTorch terms, and how it is counted.

NOTE (the runtime's `s_i`): the spec's `s_i` is what layer `i`'s backward
reads, and also what a recomputation starting after layer `i` needs. In
PyTorch that is:

* every tensor autograd saves while layer `i`'s forward runs (seen with
  `torch.autograd.graph.saved_tensors_hooks`), and
* the layer's output `a_i`, the base of a recomputation of layer `i+1`;

counted by storage, each distinct storage once, minus static storages
(parameters, buffers, the batch), which are in `static_bytes`.

A storage read by two layers is in both: a ReLU's output is saved by the ReLU
and, as its input, by the next convolution. The spec lets those two layers
keep, swap or recompute independently (B_{i+1} runs before the ReLU's
copy back with `prefetch_at = i`), so an executor that follows it exactly must
treat them as two saved tensors; counting such a storage once would make the
plan physically impossible for some actions. While both memberships are on
the device the storage exists once, so measured memory is at most the
predicted one. The profiler states that bytes figure in the profile's source.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

# Storage identity: the data pointer of the untyped storage. Safe as a key
# while the storage is referenced, which is the case for every storage a
# `SavedSet` holds (the set keeps a reference to one tensor over it).


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def storage_nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def plain(t: torch.Tensor) -> torch.Tensor:
    """`t` without its autograd history, as a pack hook must return it.

    A pack hook that returns an autograd output itself makes a reference
    cycle through C++ (output -> grad_fn -> saved output) that leaks.
    """
    return t if t.grad_fn is None else t.detach()


def static_keys(chain: nn.Module, tensors: Iterable[torch.Tensor | None]) -> frozenset[int]:
    """Storages that are always resident: parameters, buffers and the batch."""
    keys = {storage_key(p) for p in chain.parameters()}
    keys.update(storage_key(b) for b in chain.buffers())
    keys.update(storage_key(t) for t in tensors if isinstance(t, torch.Tensor))
    keys.discard(0)
    return frozenset(keys)


class SavedSet:
    """The distinct non-static storages of one layer, in first-seen order.

    `add` returns the slot of the storage (new or already present) or None
    for a static or empty storage; it keeps one tensor per storage so the
    storage stays alive (and its key valid) while the set holds it.
    """

    __slots__ = ("keys", "nbytes", "slots", "static")

    def __init__(self, static: frozenset[int]) -> None:
        self.static = static
        self.keys: dict[int, int] = {}
        self.slots: list[torch.Tensor] = []
        self.nbytes = 0

    def add(self, t: torch.Tensor) -> tuple[int, int] | None:
        """`(slot, new bytes)` for a counted storage, None for a static or empty one."""
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key == 0 or key in self.static:
            return None
        slot = self.keys.get(key)
        if slot is not None:
            return slot, 0
        nbytes = storage.nbytes()
        slot = len(self.slots)
        self.keys[key] = slot
        self.slots.append(plain(t))
        self.nbytes += nbytes
        return slot, nbytes

    def __len__(self) -> int:
        return len(self.slots)


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """The whole storage of `t` as a flat uint8 tensor (what a swap copies)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def view_on(buffer: torch.Tensor, like: TensorMeta) -> torch.Tensor:
    """A tensor with `like`'s dtype and layout over the storage of `buffer`."""
    out = torch.empty(0, dtype=like.dtype, device=buffer.device)
    return out.set_(buffer.untyped_storage(), like.offset, like.size, like.stride)


class TensorMeta:
    """Where a saved tensor sits in its storage: enough to rebuild it after a swap."""

    __slots__ = ("dtype", "offset", "size", "stride")

    def __init__(self, t: torch.Tensor) -> None:
        self.dtype = t.dtype
        self.size = t.size()
        self.stride = t.stride()
        self.offset = t.storage_offset()


def tensor_nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of distinct storages among `tensors`."""
    seen: dict[int, int] = {}
    for t in tensors:
        seen.setdefault(storage_key(t), storage_nbytes(t))
    seen.pop(0, None)
    return sum(seen.values())
