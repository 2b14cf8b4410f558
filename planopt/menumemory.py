"""What a SAC policy makes a block hold: its forward's, checkpointed forward's and replay's peaks.

NOTE (memory): a policy also changes what the block holds while its forward
and its replay run. Given when the block's own code releases each storage it
makes (`Lifetime`, from `planopt.runtime.liveness`), `policy_memory` gives,
measured after each operator as the live-storage tracker does:

* the plain forward's peak: a storage lives from its operator to its
  release, or to the forward's end if autograd saves it;
* the checkpointed forward's peak under `S`: to its release, or to the end
  if SAC caches it (autograd keeps only placeholders);
* the replay's peak (operators before `cut`): a cached storage from the
  replay's start (the cache holds it) to its last cached operator, a saved
  one from its operator to the replay's end, the rest to their release.

Cost model v3 holds `s_i` (plus `F_i`'s scratch) through `F_i` and
`s_i + w_k` through `R_i`. So an entry's `regen_work_bytes` `w_k` is the
replay's peak beyond `s_i`: its temporaries (a saved operator in the middle
of an elementwise chain makes it run the chain's unsaved temporaries,
GPT-2's gelu_new). When autograd saves the block's output, v3 holds the
forward's output to the end of `B_i`, while checkpoint frees it after its
readers (all done before `R_i`) and the replay makes the one `B_i` reads:
that output's bytes count against the peak too. A policy whose checkpointed
forward holds more than the plain forward (it caches storages autograd does
not save, alive past their release) is one v3 cannot describe: the menu
(`planopt.sacmenu.pareto_menu(memory=)`) leaves it out. Policies caching
only storages autograd saves never are (their forward holds a subset of the
plain one's at every operator): the menu is the front of the exact front's
entries that fit and of the exact front over those (a random operator
cached makes every later one cached, so none up to the last random one
caching what autograd does not save).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Lifetime:
    """A storage the block's forward made: `nbytes`, made by operator `born`, released by
    the block's own code when `dies` operators have run (`planopt.runtime.liveness`);
    `storage`: its index among the internal storages (None: the block's output)."""

    nbytes: int
    born: int
    dies: int
    storage: int | None = None


@dataclass(frozen=True, slots=True)
class BlockMemory:
    """What pricing a policy's memory needs: every storage's lifetime, the internal
    storages autograd saves (`saved`, indices) and their bytes (the layer's s_i), and
    whether autograd saves the block's output (`output_saved`, its `saves_output`)."""

    lifetimes: tuple[Lifetime, ...]
    saved: frozenset[int]
    saved_bytes: int
    output_saved: bool = False


@dataclass(frozen=True, slots=True)
class PolicyMemory:
    """Peaks, in bytes of storages the block made (module doc): `plain` of its forward
    without checkpointing, `forward` of its checkpointed forward under the policy,
    `replay` of checkpoint's replay under the policy."""

    plain: int
    forward: int
    replay: int


def policy_memory(
    ops: Sequence[Any], memory: BlockMemory, cut: int, policy: Sequence[int]
) -> PolicyMemory:
    """The three peaks of saving `policy` (module doc), measured after each
    operator as the live-storage tracker does."""
    n = len(ops)
    last: dict[int, int] = {}  # cached storage -> the last policy position naming it
    for p in policy:
        for s in ops[p].storages:
            last[s] = max(last.get(s, p), p)
    plain, forward, replay = [0] * (n + 1), [0] * (n + 1), [0] * (cut + 1)
    for m in memory.lifetimes:
        saved = m.storage in memory.saved
        cached = m.storage in last
        _add(plain, m.born, n if saved else m.dies, m.nbytes)
        _add(forward, m.born, n if cached else m.dies, m.nbytes)
        end = cut if saved else m.dies
        if cached:
            _add(replay, 0, max(last[m.storage] + 1, end), m.nbytes)
        else:
            _add(replay, m.born, end, m.nbytes)
    return PolicyMemory(_peak(plain), _peak(forward), _peak(replay))


def _add(levels: list[int], start: int, end: int, nbytes: int) -> None:
    """`nbytes` alive after operators start .. end-1 (clipped to the array)."""
    end = min(end, len(levels) - 1)
    if start < end:
        levels[start] += nbytes
        levels[end] -= nbytes


def _peak(levels: list[int]) -> int:
    level = top = 0
    for change in levels[:-1]:
        level += change
        top = max(top, level)
    return top
