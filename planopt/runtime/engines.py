"""Which copy engine a step uses: CUDA streams, host threads over an emulated link, or none.

Above `swap` (the schedule every engine shares, `CudaCopies`, `SyncCopies`)
and `threadcopies` (`ThreadCopies`, built on `swap`), so the imports run
one way: engines -> threadcopies -> swap.
"""

from __future__ import annotations

import torch

from planopt.profile import Device
from planopt.runtime.errors import RuntimeOptionError
from planopt.runtime.swap import CopyEngine, CudaCopies, SyncCopies
from planopt.runtime.threadcopies import ThreadCopies


def copy_engine(
    device: torch.device, link: Device | None = None, clock: str = "wall"
) -> CopyEngine:
    """`CudaCopies` on CUDA; on CPU `ThreadCopies` with a `link` (on `clock`), else `SyncCopies`."""
    if device.type == "cuda":
        if link is not None:
            raise RuntimeOptionError(
                f"link: an emulated link is for CPU devices, got {link.name!r} on {device}; "
                "a CUDA device copies over its own link (leave link=None)"
            )
        return CudaCopies(device)
    if link is not None:
        return ThreadCopies(link, clock)
    return SyncCopies()
