"""What a layer's products are, in PyTorch terms: storages, classified once.

NOTE (v2's products in PyTorch): while layer `i`'s forward runs, every
tensor autograd saves (seen with `torch.autograd.graph.saved_tensors_hooks`)
is counted by its storage, each storage once, and classified:

* the storage of the layer's input `x_i` (`saves_input`): layer `i-1`'s
  output, never counted again here;
* the storage of the layer's output `x_{i+1}` (`saves_output`);
* a static storage (parameters, buffers, the batch): in `static_bytes`;
* any other storage: one of the layer's internals (`saved_bytes`).

A view or an in-place result keeps its storage, so it keeps its class: a
saved `x.view(...)` of the input is the input, an in-place ReLU's result on
an internal is that internal. The output is one storage with its readers,
counted once (`out_bytes`), however many layers' backward read it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from planopt.runtime.tracker import device_nbytes

# NOTE (storage identity): the address of the C++ storage (`StorageImpl`),
# not its data pointer, so that fake tensors (`FakeTensorMode`, whose storages
# have no data: every data pointer is 0) are told apart exactly as real ones
# are, and the same classification serves the real profiler and the fake one.
# Safe as a key while the storage is referenced, which is the case wherever a
# key is kept (the holder keeps a tensor over the storage alive). An empty
# storage has key 0, as before: nothing to count or place.


def storage_key(t: torch.Tensor) -> int:
    storage = t.untyped_storage()
    return storage._cdata if storage.nbytes() else 0


def storage_nbytes(t: torch.Tensor) -> int:
    """Device bytes of `t`'s storage (CUDA: rounded up to the allocator's blocks)."""
    return device_nbytes(t.untyped_storage())


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


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """The whole storage of `t` as a flat uint8 tensor (what a swap copies)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def view_on(buffer: torch.Tensor, like: TensorMeta) -> torch.Tensor:
    """A tensor with `like`'s dtype and layout over the storage of `buffer`."""
    out = torch.empty(0, dtype=like.dtype, device=buffer.device)
    return out.set_(buffer.untyped_storage(), like.offset, like.size, like.stride)


class TensorMeta:
    """Where a saved tensor sits in its storage: enough to rebuild it over a copy."""

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


class Saves:
    """What one layer's forward saved, by storage, classified at its end (module doc).

    `add` during the forward; `classify(output)` at its end gives
    `saves_input`, `saves_output` and the internals (first-seen order).
    `foreign` lists storages that are none of the four classes: created
    before this forward by someone other than the layer below (a module's
    cache); the profiler refuses them.
    """

    __slots__ = (
        "foreign",
        "input_key",
        "internals",
        "known",
        "order",
        "out_key",
        "saves_input",
        "saves_output",
        "static",
        "tensors",
    )

    def __init__(self, static: frozenset[int], input_key: int, known: frozenset[int]) -> None:
        self.static = static
        self.input_key = input_key
        self.known = known  # storages that existed before this forward
        self.order: list[int] = []
        self.tensors: dict[int, torch.Tensor] = {}
        self.saves_input = False
        self.saves_output = False
        self.out_key = 0
        self.internals: list[int] = []
        self.foreign: list[int] = []

    def add(self, t: torch.Tensor) -> int | None:
        """Record a saved tensor; its storage key, or None for a static or empty one."""
        key = storage_key(t)
        if key == 0 or key in self.static:
            return None
        if key == self.input_key:
            self.saves_input = True
            return key
        if key not in self.tensors:
            self.order.append(key)
            self.tensors[key] = plain(t)
        return key

    def classify(self, output: torch.Tensor) -> None:
        self.out_key = storage_key(output)
        for key in self.order:
            if key == self.out_key:
                self.saves_output = True
            elif key in self.known:
                self.foreign.append(key)
            else:
                self.internals.append(key)

    def internal_bytes(self) -> int:
        return sum(storage_nbytes(self.tensors[k]) for k in self.internals)

    def release(self) -> None:
        """Drop the references held for classification."""
        self.tensors.clear()
