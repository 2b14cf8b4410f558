"""A block's menu: the exact Pareto front of (bytes kept, recompute seconds) over SAC policies.

A block's forward is a sequence of operators (`MenuOp`, one per ATen
operator that PyTorch's selective activation checkpointing sees, in order).
Run under `torch.utils.checkpoint` with a policy that saves the outputs of
a set `S` of operators (`create_selective_checkpoint_contexts`), the block
holds from its forward to its backward exactly the storages of those
outputs (SAC's cache; every tensor autograd saves is a checkpoint holder,
not a tensor), and before its backward it replays its forward, where every
operator not in `S` runs again and the operators in `S` return their
cached outputs. The replay stops early, at the operator position `cut`
where the last tensor autograd saved is packed again
(`planopt.runtime.opprofile` finds it), so only operators before `cut`
cost anything. Hence, for a policy `S`:

* `h(S)` = the bytes of the union of the block-internal storages of the
  outputs of `S` (a view or an in-place result keeps its storage; the
  block's input and output and the parameters are not internal);
* `r(S)` = the sum of the seconds of the operators before `cut` not in `S`.

The menu is the set of Pareto-optimal `(h, r)` pairs with a policy for each.

NOTE (why it is exact): only operators before `cut` are worth saving (a
later one adds bytes and saves nothing), and only those SAC may cache
(`saveable`: not in-place, outputs not mutated later). Operators whose
outputs share a storage are joined into groups (connected components of
"outputs in the same storage"); `h` is additive over groups and `r` over
operators, so a policy is one independent choice per group. Each group is
enumerated whole (every subset of its storages, with every operator whose
outputs lie inside the subset saved: saving them costs no more bytes), and
the groups' fronts are combined by a Pareto sum (a choice dominated within
its group is dominated in every combination). Random operators add one
coupling: a replayed random operator must draw what it drew in the forward,
so if one is saved every later one before `cut` is saved too; the front is
the Pareto union over where that suffix of saved random operators starts.

NOTE (memory): what a policy holds while the block's forward and replay run, and
which policies cost model v3 can describe, is `planopt.menumemory`'s: with it,
the menu prices each entry's `regen_work_bytes` and leaves out the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planopt.errors import PlanoptError
from planopt.menu import LayerOption
from planopt.menumemory import BlockMemory, PolicyMemory, policy_memory

# A group with more operators and more storages than this is not enumerated (2**n subsets).
MAX_GROUP_STORAGES = 16


class MenuError(PlanoptError, ValueError):
    """A block's operator record that no exact menu can be built from."""


@dataclass(frozen=True, slots=True)
class MenuOp:
    """One operator of a block's forward, as the menu sees it.

    `storages`: indices (into the block's storage sizes) of the internal
    storages its outputs live in; `saveable`: SAC may cache its outputs;
    `random`: it draws random numbers (`nondeterministic_seeded`).
    """

    seconds: float
    storages: tuple[int, ...] = ()
    saveable: bool = True
    random: bool = False


@dataclass(frozen=True, slots=True)
class MenuEntry:
    """One point of the front: keep `saved_bytes`, replay `recompute` s; `policy`: saved ops;
    `regen_work_bytes`: what the replay holds beyond the layer's internals (module NOTE)."""

    saved_bytes: int
    recompute: float
    policy: tuple[int, ...]
    regen_work_bytes: int = 0


def policy_cost(
    ops: Sequence[MenuOp], storage_bytes: Sequence[int], cut: int, policy: Sequence[int]
) -> tuple[int, float]:
    """`(h, r)` of saving exactly the operators at `policy` (module doc): the definition."""
    saved = set(policy)
    kept = {s for j in saved for s in ops[j].storages}
    h = sum(storage_bytes[s] for s in kept)
    r = sum(op.seconds for j, op in enumerate(ops[:cut]) if j not in saved)
    return h, r


def _check(ops: Sequence[MenuOp], storage_bytes: Sequence[int], cut: int) -> None:
    if not 0 <= cut <= len(ops):
        raise MenuError(f"menu: cut must be in 0..{len(ops)} (the operators), got {cut}")
    for s, b in enumerate(storage_bytes):
        if b < 0:
            raise MenuError(f"menu: storage {s}: bytes must be >= 0, got {b}")
    for j, op in enumerate(ops):
        if not op.seconds >= 0:
            raise MenuError(f"menu: operator {j}: seconds must be >= 0, got {op.seconds}")
        for s in op.storages:
            if not 0 <= s < len(storage_bytes):
                raise MenuError(
                    f"menu: operator {j}: storage {s} is not one of the block's "
                    f"{len(storage_bytes)} storages"
                )


def _groups(ops: Sequence[MenuOp], candidates: list[int]) -> list[list[int]]:
    """Candidate operators joined when their outputs share a storage (first-seen order)."""
    parent: dict[int, int] = {}

    def find(s: int) -> int:
        while parent.setdefault(s, s) != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    for j in candidates:
        first, *rest = ops[j].storages
        for s in rest:
            parent[find(s)] = find(first)
    groups: dict[int, list[int]] = {}
    for j in candidates:
        groups.setdefault(find(ops[j].storages[0]), []).append(j)
    return list(groups.values())


# A partial front: (bytes, seconds saved, policy), bytes ascending, gain strictly ascending.
_Front = list[tuple[int, float, tuple[int, ...]]]


def _pareto(points: list[tuple[int, float, tuple[int, ...]]]) -> _Front:
    """Least bytes for each gain: sorted by bytes, then by gain descending; strict gains kept."""
    points.sort(key=lambda p: (p[0], -p[1], p[2]))
    out: _Front = []
    for p in points:
        if not out or p[1] > out[-1][1]:
            out.append(p)
    return out


def _group_front(
    ops: Sequence[MenuOp],
    storage_bytes: Sequence[int],
    group: list[int],
    forced_in: set[int],
    forced_out: set[int],
) -> _Front:
    """Every choice of the group (module NOTE): each union of its operators' storages,
    with every operator inside it saved, enumerated over whichever is fewer: subsets of
    the operators or of the storages."""
    storages = sorted({s for j in group for s in ops[j].storages})
    index = {s: k for k, s in enumerate(storages)}
    masks = {j: sum(1 << index[s] for s in ops[j].storages) for j in group}
    if min(len(group), len(storages)) > MAX_GROUP_STORAGES:
        raise MenuError(
            f"menu: operators {group[:4]}... share {len(storages)} storages; at most "
            f"{MAX_GROUP_STORAGES} operators or storages of a group are enumerated exactly"
        )
    if len(group) < len(storages):
        unions = set()
        for subset in range(1 << len(group)):
            union = 0
            for k, j in enumerate(group):
                if subset >> k & 1:
                    union |= masks[j]
            unions.add(union)
        candidates = sorted(unions)
    else:
        candidates = range(1 << len(storages))
    points = []
    for subset in candidates:
        chosen = tuple(j for j in group if masks[j] & ~subset == 0 and j not in forced_out)
        if any(j in forced_in and j not in chosen for j in group):
            continue
        used = 0
        for j in chosen:
            used |= masks[j]
        if used != subset:  # the same choice appears (cheaper) at `used`
            continue
        h = sum(storage_bytes[s] for s in storages if subset >> index[s] & 1)
        points.append((h, sum(ops[j].seconds for j in chosen), chosen))
    return _pareto(points)


def _combine(a: _Front, b: _Front) -> _Front:
    return _pareto([(ha + hb, ga + gb, pa + pb) for ha, ga, pa in a for hb, gb, pb in b])


def pareto_menu(
    ops: Sequence[MenuOp],
    storage_bytes: Sequence[int],
    cut: int,
    *,
    below: int | None = None,
    fixed: float = 0.0,
    memory: BlockMemory | None = None,
    forward_fits: bool = True,
) -> tuple[MenuEntry, ...]:
    """The exact front of `(h, r)` (module doc), `h` ascending; each entry's policy sorted.

    `below`: keep only entries holding fewer bytes (the whole layer's
    internals: an entry holding as much is no better than keeping it all).
    `fixed`: seconds every replay spends whatever it saves (added to each `r`).
    `memory`: the block's storage lifetimes; each entry then gets its
    `regen_work_bytes`, and policies cost model v3 cannot describe are left
    out (`planopt.menumemory`), unless `forward_fits` is False: then the whole
    front is priced (`experiments.selective_v31` measures what those would buy).
    """
    _check(ops, storage_bytes, cut)
    total = sum(op.seconds for op in ops[:cut])
    points = _front(ops, storage_bytes, cut)
    if memory is not None and forward_fits:
        # none up to the last random operator caching what autograd does not save (a
        # saved random operator makes every later one saved)
        last = max((j for j, op in enumerate(ops) if op.random and op.saveable and
                    not set(op.storages) <= memory.saved), default=-1)  # fmt: skip
        only_saved = [
            op if op.random and j > last else MenuOp(
                op.seconds, op.storages, op.saveable and not op.random and
                set(op.storages) <= memory.saved, op.random)
            for j, op in enumerate(ops)
        ]  # fmt: skip
        points = _pareto(
            [
                p
                for p in [*points, *_front(only_saved, storage_bytes, cut)]
                if _fits(policy_memory(ops, memory, cut, p[2]))
            ]
        )
    entries = []
    for h, gain, policy in points:
        if below is not None and h >= below:
            continue
        work = 0
        if memory is not None:
            held = memory.saved_bytes + memory.output_saved * sum(
                m.nbytes for m in memory.lifetimes if m.storage is None
            )
            work = max(0, policy_memory(ops, memory, cut, policy).replay - held)
        entries.append(MenuEntry(h, fixed + max(0.0, total - gain), tuple(sorted(policy)), work))
    return tuple(entries)


def _fits(peaks: PolicyMemory) -> bool:
    """The checkpointed forward holds no more than the plain one (v3's `F_i`)."""
    return peaks.forward <= peaks.plain


def _front(ops: Sequence[MenuOp], storage_bytes: Sequence[int], cut: int) -> _Front:
    """The exact front as (bytes, seconds saved, policy) (module doc)."""
    free = tuple(
        j for j, op in enumerate(ops[:cut]) if op.saveable and not op.storages and not op.random
    )
    candidates = [j for j, op in enumerate(ops[:cut]) if op.saveable and op.storages]
    randoms = [j for j, op in enumerate(ops[:cut]) if op.saveable and op.random]
    free_random = [j for j in randoms if not ops[j].storages]
    groups = _groups(ops, candidates)
    union: list[tuple[int, float, tuple[int, ...]]] = []
    # Saved random operators are a suffix of `randoms`, starting at `start`.
    for start in range(len(randoms) + 1):
        forced_in = set(randoms[start:])
        forced_out = set(randoms[:start])
        base = free + tuple(j for j in free_random if j in forced_in)
        front: _Front = [(0, sum(ops[j].seconds for j in base), base)]
        for group in groups:
            front = _combine(front, _group_front(ops, storage_bytes, group, forced_in, forced_out))
        union.extend(front)
    return _pareto(union)


def thin(menu: Sequence[MenuEntry], size: int) -> tuple[MenuEntry, ...]:
    """At most `size` entries of a front: its two ends and the entries nearest to evenly
    spaced byte levels between them (deterministic; the front's order kept)."""
    if size < 1:
        raise MenuError(f"menu: size must be >= 1, got {size}")
    if len(menu) <= size:
        return tuple(menu)
    if size == 1:
        return (menu[0],)
    lo, hi = menu[0].saved_bytes, menu[-1].saved_bytes
    picked = {0, len(menu) - 1}
    for k in range(1, size - 1):
        level = lo + (hi - lo) * k / (size - 1)
        best = min(
            (i for i in range(len(menu)) if i not in picked),
            key=lambda i: (abs(menu[i].saved_bytes - level), i),
        )
        picked.add(best)
    return tuple(menu[i] for i in sorted(picked))


def layer_options(menu: Sequence[MenuEntry], below: int | None = None) -> tuple[LayerOption, ...]:
    """A menu as a profile layer's options (`sac0`, `sac1`, ... by bytes ascending).

    `below`: leave out entries holding that many bytes or more (the layer's
    `saved_bytes`: an option may hold at most that, and holding as much is
    no better than keeping the layer).
    """
    kept = [e for e in menu if below is None or e.saved_bytes < below]
    return tuple(
        LayerOption(f"sac{k}", e.saved_bytes, e.recompute, e.policy, e.regen_work_bytes)
        for k, e in enumerate(kept)
    )
