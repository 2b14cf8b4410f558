"""A swapped layer's partial option (cost model v3, 12.2 item 3 and 12.5): its kept subset
copied to host after `F_i` and back before the replay in `B_i`.

An option's region keeps its subset in the cache that torch's
`create_selective_checkpoint_contexts` builds:
`_CachingTorchDispatchMode.storage`, op key -> {call index: pytree of
`_VersionWrapper` or `_RECOMPUTE`}; checkpoint's replay reads it back
(`_CachedTorchDispatchMode`) through each wrapper's `.val`, checking
`.version` against the tensor's `_version`. That cache is exactly the kept
subset, so a swap of the option copies it and nothing else.

`OptionCache` is the region's `context_fn`: it makes the two contexts and
keeps them, so the runtime reaches the cache once `F_i` has ended. `take`
groups the cached tensors by storage (storages the layer does not own, its
input, parameters, the batch, what the caller passed, stay as they are: they
are not the option's `h_k`), returns one byte view per storage for the copy
engine the whole-layer swap uses, and clears the wrappers' device
references. `restore` puts tensors over the copies back into the wrappers;
`drop` clears them at the end of `B_i` (an early-stopped replay leaves
entries it did not read).

Versions: a copy back is a fresh tensor with its own `_version`. `take`
records, per wrapper, how far its tensor had moved from the version SAC
recorded (0 unless it changed in place after it was cached); `restore` sets
`.version` to the fresh tensor's version minus that lag, so SAC's check
refuses a changed entry exactly as it would have without the swap (unless
the region allows the change, `planopt.runtime.sac.sac_context`).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import create_selective_checkpoint_contexts

from planopt.errors import PlanoptError
from planopt.runtime.sac import SavePositions
from planopt.runtime.storage import TensorMeta, byte_view, storage_key, view_on


class SacInternalsError(PlanoptError, RuntimeError):
    """This torch's selective-checkpoint cache is not the one a swapped option reads."""


def _is_wrapper(leaf: Any) -> bool:
    return hasattr(leaf, "val") and hasattr(leaf, "version") and hasattr(leaf, "get_val")


class OptionCache:
    """The `context_fn` of a swapped layer's option region, and its kept subset (module doc)."""

    def __init__(self, policy: tuple[int, ...], output_changed: bool, where: str) -> None:
        self.policy = tuple(policy)
        self.output_changed = output_changed
        self.where = where
        self.contexts: tuple | None = None
        # storage key -> [(wrapper, weakly: the replay consumes it, layout, version lag)]
        self.groups: dict[int, list[tuple[weakref.ref, TensorMeta, int]]] = {}
        self.keys: list[int] = []  # the storages copied, in copy order
        self.out_key = 0  # the output's storage, when the cache holds it and it is copied

    def __call__(self) -> tuple:
        self.contexts = create_selective_checkpoint_contexts(
            SavePositions(self.policy), allow_cache_entry_mutation=self.output_changed
        )
        return self.contexts

    def _wrappers(self) -> list[Any]:
        caching = self.contexts[0] if self.contexts else None
        storage = getattr(caching, "storage", None)
        if not isinstance(storage, dict):
            raise SacInternalsError(
                f"{self.where}: a swap of a partial option's kept subset needs torch's "
                "selective-checkpoint cache (`_CachingTorchDispatchMode.storage`, a dict), got "
                f"{type(storage).__name__} in torch {torch.__version__}; keep the layer with "
                "its option or swap it whole"
            )
        found: list[Any] = []
        for entries in storage.values():
            for entry in entries.values():
                leaves, _ = tree_flatten(entry)
                for leaf in leaves:
                    # A cached non-tensor (a size) has nothing to copy.
                    if _is_wrapper(leaf) and isinstance(leaf.val, torch.Tensor):
                        found.append(leaf)
        return found

    def take(
        self, foreign: frozenset[int] | set[int], out: torch.Tensor, out_read: bool
    ) -> list[torch.Tensor]:
        """End of `F_i`: one byte view per cached storage the layer owns (not in `foreign`),
        in copy order; the wrappers let go of those storages (the views hold them until
        the copy engine has them). The output's storage is left out when `out_read`: the
        swap copies the output anyway, once (`restore` then reads its buffer, the last)."""
        views: dict[int, torch.Tensor] = {}
        self.groups, self.keys, self.out_key = {}, [], 0
        for wrapper in self._wrappers():
            t = wrapper.val
            key = storage_key(t)
            if key == 0 or key in foreign:
                continue
            if key not in views:
                views[key] = byte_view(t)
                self.groups[key] = []
            lag = t._version - wrapper.version if wrapper.version is not None else 0
            self.groups[key].append((weakref.ref(wrapper), TensorMeta(t), lag))
            wrapper.val = None
        out_key = storage_key(out)
        self.out_key = out_key if out_read and out_key in views else 0
        views.pop(self.out_key, None)
        self.keys = list(views)
        return list(views.values())

    def restore(self, buffers: list[torch.Tensor]) -> list[torch.Tensor]:
        """The copy back was enqueued: tensors over its `buffers` (`take`'s views first,
        the output last) in the wrappers; returns the buffers that follow `take`'s."""
        restored = dict(zip(self.keys, buffers, strict=False))
        if self.out_key:
            restored[self.out_key] = buffers[-1]
        for key, buffer in restored.items():
            for ref, meta, lag in self.groups.get(key, ()):
                wrapper = ref()
                if wrapper is None:
                    continue
                t = view_on(buffer, meta)
                wrapper.val = t
                wrapper.version = t._version - lag
        return buffers[len(self.keys) :]

    def drop(self) -> None:
        """End of `B_i`: nothing reads the cache again (entries an early stop left go)."""
        for group in self.groups.values():
            for ref, _, _ in group:
                wrapper = ref()
                if wrapper is not None:
                    wrapper.val = None
        self.groups, self.keys, self.out_key = {}, [], 0
