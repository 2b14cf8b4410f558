"""When each storage a block's forward makes is released, with autograd holding nothing.

    deaths = storage_deaths(fn, args, kwargs, wanted)   # {(position, output): position}
    lifetimes_of(fn, args, kwargs, operators, makers)   # as planopt.sacmenu.Lifetime

`planopt.runtime.opprofile` keeps every tensor of its traced run alive (it
tells storages apart by identity), so it cannot see when the block's own
code lets one go. This is one more forward of the block, under a pack hook
that keeps nothing (as checkpoint's forward, whose autograd holds only
placeholders): each storage an operator makes is watched by a weak
reference, and its death is the number of operators dispatched when it is
released. So a storage made by operator `b` and released at `d` is alive
after operators `b .. d-1` (the instants the live-storage tracker measures
at), and a storage still alive when the forward returns dies at the
operator count. Operators are counted as `create_selective_checkpoint_contexts`
calls its policy (`SAC_IGNORED_OPS` skipped), as in `opprofile`.

What autograd would save, and what a SAC policy caches, keep storages
alive longer; `planopt.sacmenu.policy_peaks` adds those from the trace.
Works on real and on fake tensors (a fake storage has a Python object too).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import SAC_IGNORED_OPS

from planopt.menumemory import Lifetime


class _Deaths(TorchDispatchMode):
    """Counts operators; watches the storages of the wanted (position, output) pairs."""

    def __init__(self, wanted: set[tuple[int, int]]) -> None:
        super().__init__()
        self.wanted = wanted
        self.count = 0
        self.open = True
        self.deaths: dict[tuple[int, int], int] = {}
        self.refs: list[weakref.ref] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in SAC_IGNORED_OPS:
            return out
        j = self.count
        self.count += 1
        flat = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        for k, t in enumerate(flat):
            if (j, k) in self.wanted:
                died = functools.partial(self._died, (j, k))
                self.refs.append(weakref.ref(t.untyped_storage(), died))
        return out

    def _died(self, key: tuple[int, int], _ref: weakref.ref) -> None:
        if self.open:
            self.deaths.setdefault(key, self.count)


def _nothing(t: torch.Tensor) -> None:
    return None


def _never(packed: Any) -> torch.Tensor:
    raise RuntimeError("liveness: a forward traced for liveness has no backward")


def storage_deaths(
    fn: Callable[..., Any],
    args: tuple,
    kwargs: Mapping[str, Any],
    wanted: set[tuple[int, int]],
) -> tuple[dict[tuple[int, int], int], int]:
    """Run `fn(*args, **kwargs)` once (grad on, autograd keeping nothing); for each wanted
    (operator position, output index), the operator count at its storage's release
    (module doc), and the number of operators. The caller sets the RNG state."""
    mode = _Deaths(wanted)
    with torch.enable_grad(), saved_tensors_hooks(_nothing, _never), mode:
        out = fn(*args, **kwargs)
    mode.open = False
    count = mode.count
    deaths = {key: mode.deaths.get(key, count) for key in wanted}
    del out
    return deaths, count


def lifetimes_of(
    fn: Callable[..., Any],
    args: tuple,
    kwargs: Mapping[str, Any],
    operators: int,
    makers: tuple[tuple[int, int, int, int | None], ...],
) -> tuple[Lifetime, ...]:
    """Each storage the block made (`makers`: operator position, output index, bytes,
    internal storage index or None), with its release; the traced run had `operators`."""
    deaths, count = storage_deaths(fn, args, kwargs, {(j, k) for j, k, _, _ in makers})
    if count != operators:
        raise RuntimeError(
            f"trace_block: the block ran {count} operators, then {operators}; its operator "
            "sequence must not change between runs"
        )
    return tuple(Lifetime(b, j, deaths[j, k], s) for j, k, b, s in makers)
