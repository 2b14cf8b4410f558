"""CPU copy engines whose host copies no dispatch-mode tracker sees (torch's `MemTracker` included).

On CPU a swap's host copies are the same RAM as the "device", so a tracker
that sees every storage (torch's `MemTracker`, planopt's `LiveMemory`) would
count them as device memory, which on a GPU they are not (the cost model
puts them on the host). These engines allocate the host buffers, and make
the copies into them, outside the dispatcher
(`torch.utils._mode_utils.no_dispatch`): a `TorchDispatchMode` never sees
them, so `MemTracker`'s peak of a swap plan on CPU is the device peak the
cost model predicts. The copies back land in buffers allocated normally on
the compute thread: device memory, seen from the instant the copy back is
enqueued (synchronous copies), or from its modelled start over an emulated
link (`planopt.runtime.threadcopies`, the cost model's instant).

`ThreadCopies` already copies on worker threads (a dispatch mode sees only
the thread it was entered on); its host buffers are hidden here too.
"""

from __future__ import annotations

import torch
from torch.utils._mode_utils import no_dispatch

from planopt.profile import Device
from planopt.runtime.engines import copy_engine
from planopt.runtime.swap import CopyEngine, Direction, SyncCopies
from planopt.runtime.threadcopies import ThreadCopies


def _hidden_buffers(sizes: list[int]) -> list[torch.Tensor]:
    with no_dispatch():
        return [torch.empty(n, dtype=torch.uint8) for n in sizes]


class HiddenSyncCopies(SyncCopies):
    """`SyncCopies` with host buffers and copies out of the dispatcher's sight."""

    def _host_buffers(self, sizes: list[int]) -> list[torch.Tensor]:
        return _hidden_buffers(sizes)

    def _enqueue(self, direction, dsts, srcs, after, layer) -> None:
        if direction is Direction.D2H:
            with no_dispatch(), torch.no_grad():
                return super()._enqueue(direction, dsts, srcs, after, layer)
        with torch.no_grad():
            return super()._enqueue(direction, dsts, srcs, after, layer)


class HiddenThreadCopies(ThreadCopies):
    """`ThreadCopies` (the emulated link) with host buffers out of the dispatcher's sight."""

    def _host_buffers(self, sizes: list[int]) -> list[torch.Tensor]:
        return _hidden_buffers(sizes)


def host_engine(device: torch.device, link: Device | None, clock: str = "wall") -> CopyEngine:
    """The engine `apply` uses: `CudaCopies` on CUDA; on CPU the hidden-host engines above."""
    if device.type == "cuda":
        return copy_engine(device, link, clock)
    if link is not None:
        return HiddenThreadCopies(link, clock)
    return HiddenSyncCopies()
