"""Memory PyTorch really holds: a live-storage tracker, and the CUDA allocator's counters.

`LiveMemory` is a `TorchDispatchMode`: every tensor an operator returns
while it is active has its storage counted once, from the operator that
allocated it until the storage is released (a weak reference on the
storage object, which PyTorch keeps for as long as the C++ storage lives).
Its peak is taken after every operator, when the operator's outputs exist
and before anything it no longer needs is released: the instant where a
step holds the most. It sees every storage allocated through the
dispatcher, whatever holds it (autograd, the executor, the model's own
code), so it measures PyTorch, not planopt's idea of PyTorch. Storages that
exist before it starts (parameters, gradients, buffers, optimizer state,
the batch) are registered with `track`.

NOTE (host copies on CPU): on CPU the "device" is host memory, so the
executor's host copies of swapped tensors would be counted as device
memory. They are not device memory on a GPU, where the cost model puts
them, so the CPU copy engine allocates them inside `host_memory()`, which
files them under `HOST`, outside the total. Everything else the executor
allocates (copied-back tensors, regenerated tensors) counts.

NOTE (threads): the mode sees the operators of the thread it is entered on.
A copy engine's worker threads (`ThreadCopies`) allocate nothing (their
buffers come from the compute thread), but a worker may drop the last
reference to a storage, whose release then runs on the worker: the counts
change under a lock.

`AllocatorProbe` and `TrackerProbe` give the one interface the profiler
uses: the caching allocator's `memory_allocated` / `max_memory_allocated` on
CUDA, this tracker elsewhere.

Not seen (as for torch's own `MemTracker`): storages allocated outside the
dispatcher (inside a kernel, or under `no_dispatch`) and storages resized in
place with `UntypedStorage.resize_`; none of planopt's models does either.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
import weakref
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Any, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# The caching allocator's smallest block; every CUDA allocation is rounded
# up to a multiple of it (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize).
CUDA_BLOCK = 512


class Category(StrEnum):
    """What a tracked storage is (the issue's categories, plus buffers, batch and host)."""

    PARAMETER = "parameters"
    BUFFER = "buffers"
    GRADIENT = "gradients"
    OPTIMIZER = "optimizer state"
    BATCH = "batch"
    ACTIVATION = "activations"  # allocated by a forward (a recompute block's included)
    TEMPORARY = "temporaries"  # allocated by a backward (activation gradients, scratch)
    HOST = "host copies"  # not device memory: outside the total


# NOTE (fake tensors): under `FakeTensorMode` a storage lives on `meta` and its
# tensors on a fake device; `tracing_for("cuda")` (planopt.runtime.fake) makes
# every size the target device's, so a trace on fake CPU tensors counts what
# the GPU's allocator would hand out.
_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("target", default=None)


@contextlib.contextmanager
def tracing_for(device_type: str) -> Iterator[None]:
    """Sizes inside are those of `device_type` (a fake trace of that device)."""
    token = _TARGET.set(device_type)
    try:
        yield
    finally:
        _TARGET.reset(token)


def device_bytes(nbytes: int, device: torch.device) -> int:
    """Bytes `nbytes` take on `device`: CUDA rounds up to its allocator's blocks."""
    kind = _TARGET.get() or device.type
    if kind == "cuda" and nbytes:
        return math.ceil(nbytes / CUDA_BLOCK) * CUDA_BLOCK
    return nbytes


def device_nbytes(storage: torch.UntypedStorage) -> int:
    """Bytes a storage takes on its device (see `device_bytes`)."""
    return device_bytes(storage.nbytes(), storage.device)


class _Entry:
    __slots__ = ("born", "category", "nbytes", "ref")

    def __init__(self, nbytes: int, category: Category, born: str) -> None:
        self.nbytes = nbytes
        self.category = category
        self.born = born  # `where` the step was when the storage was allocated
        self.ref: weakref.ref | None = None


_ACTIVE: list[LiveMemory] = []
_GRAPH_TASK = getattr(torch._C, "_current_graph_task_id", None)


def _in_backward() -> bool:
    """Inside autograd's backward (a category only: the counts never depend on it)."""
    return _GRAPH_TASK is not None and _GRAPH_TASK() != -1


@contextlib.contextmanager
def host_memory() -> Iterator[None]:
    """Storages allocated inside are host memory (a swap's host copies): not counted."""
    saved = [(t, t._override) for t in _ACTIVE]
    for t in _ACTIVE:
        t._override = Category.HOST
    try:
        yield
    finally:
        for t, override in saved:
            t._override = override


@contextlib.contextmanager
def regenerating() -> Iterator[None]:
    """Storages allocated inside are activations even during backward (a recompute block)."""
    saved = [(t, t._override) for t in _ACTIVE]
    for t in _ACTIVE:
        if t._override is None:
            t._override = Category.ACTIVATION
    try:
        yield
    finally:
        for t, override in saved:
            t._override = override


_WHERE = [""]


def at(label: str) -> None:
    """Name where the step is (`F_3`, `B_5`, ...): recorded with the peak."""
    _WHERE[0] = label
    for t in _ACTIVE:
        t.where = label


def current_where() -> str:
    """The label of the last `at` (what a copy engine records with a wait)."""
    return _WHERE[0]


class LiveMemory(TorchDispatchMode):
    """Bytes of live storages on one device type, by category, with peaks (see module doc).

    `current` and `peak` exclude `HOST`. `peak_categories` and `peak_where`
    say what was live, and where the step was, at the peak. `local_peak`
    is the peak since the last `reset_local_peak()` (the profiler's window
    around one layer's forward or backward).
    """

    def __init__(self, device_type: str = "cpu") -> None:
        super().__init__()
        self.device_type = device_type
        self._entries: dict[int, _Entry] = {}  # id(storage) -> entry, while it lives
        self._override: Category | None = None
        self._hooks: list[Any] = []
        self.by_category: dict[Category, int] = dict.fromkeys(Category, 0)
        self.current = 0
        self.peak = 0
        self.local_peak = 0
        self.peak_categories: dict[Category, int] = dict(self.by_category)
        self.peak_where = ""
        self.where = ""
        # Storages may be released on another thread (a copy engine's worker
        # holding the last reference): every count changes under this lock.
        self._lock = threading.RLock()

    # -- bookkeeping ------------------------------------------------------------

    def _add(self, storage: torch.UntypedStorage, category: Category) -> None:
        with self._lock:
            self._add_locked(storage, category)

    def _add_locked(self, storage: torch.UntypedStorage, category: Category) -> None:
        key = id(storage)
        entry = self._entries.get(key)
        if entry is not None:
            return
        if storage.device.type != self.device_type:
            return
        entry = _Entry(device_nbytes(storage), category, self.where)
        entry.ref = weakref.ref(storage, self._released(key, entry))
        self._entries[key] = entry
        self.by_category[category] += entry.nbytes
        if category is not Category.HOST:
            self.current += entry.nbytes

    def _released(self, key: int, entry: _Entry):
        def callback(_ref: weakref.ref) -> None:
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]
                self.by_category[entry.category] -= entry.nbytes
                if entry.category is not Category.HOST:
                    self.current -= entry.nbytes

        return callback

    def _relabel(self, storage: torch.UntypedStorage, category: Category) -> None:
        with self._lock:
            self._relabel_locked(storage, category)

    def _relabel_locked(self, storage: torch.UntypedStorage, category: Category) -> None:
        entry = self._entries.get(id(storage))
        if entry is None or entry.ref() is not storage:
            self._add_locked(storage, category)
            return
        if entry.category is category:
            return
        was_host = entry.category is Category.HOST
        self.by_category[entry.category] -= entry.nbytes
        self.by_category[category] += entry.nbytes
        if was_host != (category is Category.HOST):
            self.current += entry.nbytes if was_host else -entry.nbytes
        entry.category = category

    def _update_peak(self) -> None:
        with self._lock:
            self._update_peak_locked()

    def _update_peak_locked(self) -> None:
        if self.current > self.local_peak:
            self.local_peak = self.current
        if self.current > self.peak:
            self.peak = self.current
            self.peak_categories = dict(self.by_category)
            self.peak_where = self.where

    def reset_local_peak(self) -> None:
        self.local_peak = self.current

    def alive_from(self, label: str, exclude: Iterable[int] = ()) -> int:
        """Bytes of live storages allocated while `where` was `label` (not HOST).

        `exclude`: ids of storages to leave out (`id(t.untyped_storage())`).
        """
        skip = set(exclude)
        with self._lock:
            return sum(
                e.nbytes
                for key, e in self._entries.items()
                if e.born == label and e.category is not Category.HOST and key not in skip
            )

    # -- registering what exists before the step ----------------------------------

    def track(self, tensors: Iterable[Any], category: Category) -> None:
        """Count the storages of `tensors` (pre-existing ones) under `category`."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._relabel(t.untyped_storage(), category)
        self._update_peak()

    def track_model(
        self,
        module: torch.nn.Module,
        batch: Iterable[Any] = (),
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        """Parameters, buffers, existing gradients, optimizer state and the batch.

        A gradient allocated later (gradients set to None between steps) is
        relabelled `GRADIENT` when it is accumulated into `.grad`.
        """
        params = list(module.parameters())
        self.track(params, Category.PARAMETER)
        self.track(module.buffers(), Category.BUFFER)
        self.track((p.grad for p in params if p.grad is not None), Category.GRADIENT)
        if optimizer is not None:
            state = [v for s in optimizer.state.values() for v in s.values()]
            self.track(state, Category.OPTIMIZER)
        self.track(batch, Category.BATCH)
        for p in params:
            if p.requires_grad:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_hook))

    def _grad_hook(self, p: torch.Tensor) -> None:
        if p.grad is not None:
            self._relabel(p.grad.untyped_storage(), Category.GRADIENT)

    # -- the mode ---------------------------------------------------------------

    def __enter__(self) -> LiveMemory:
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self._override is not None:
            category = self._override
        elif _in_backward():
            category = Category.TEMPORARY  # inside autograd's backward
        else:
            category = Category.ACTIVATION
        flat, _ = tree_flatten(out)
        for t in flat:
            if isinstance(t, torch.Tensor):
                self._add(t.untyped_storage(), category)
        self._update_peak()
        return out

    def summary(self) -> dict[str, int]:
        """Peak bytes by category (host copies shown, not counted in the peak)."""
        return {c.value: n for c, n in self.peak_categories.items() if n}


# -- one interface over the allocator and the tracker ------------------------------


class MemoryProbe(Protocol):
    """Current and peak device bytes; `reset_peak` starts a window (as CUDA's does)."""

    source: str

    def current(self) -> int: ...
    def reset_peak(self) -> None: ...
    def peak(self) -> int: ...


class AllocatorProbe:
    """CUDA's caching allocator: what it handed out (reserved bytes are reported beside)."""

    source = "torch.cuda.max_memory_allocated (the caching allocator)"

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def current(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def reserved_peak(self) -> int:
        return torch.cuda.max_memory_reserved(self.device)


class TrackerProbe:
    """The live-storage tracker, over the window since `reset_peak`."""

    source = "planopt.runtime.tracker.LiveMemory (every storage allocated through the dispatcher)"

    def __init__(self, tracker: LiveMemory) -> None:
        self.tracker = tracker

    def current(self) -> int:
        return self.tracker.current

    def reset_peak(self) -> None:
        self.tracker.reset_local_peak()

    def peak(self) -> int:
        return self.tracker.local_peak
