"""Group moves, pair moves and kicks: the neighbourhoods of the group search.

A *group* is one layer, or the same layer in several copies of a repeated
block, so one move changes every copy at once. A *level* is one resolution
of the search: its groups, the pairs of groups tried together and the
classes of groups re-optimised together after a kick.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from planopt.plan import KEEP, RECOMPUTE, SWAP, Action
from solvers.search.driver import Phase
from solvers.search.engine import Change, Incumbent

# Prefetch leads tried for a swapped group (and the current lead +- 1).
LEAD_LADDER = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55)


@dataclass(frozen=True)
class Level:
    """One resolution of the group search: its groups, the group pairs tried
    together, and its classes (group indices re-optimised together after a kick)."""

    name: str
    groups: list[list[int]]
    pairs: list[tuple[int, int]] = field(default_factory=list)
    classes: list[list[int]] = field(default_factory=list)


def layer_level(n: int, reach: int = 2, chunk: int = 8) -> Level:
    """Every layer its own group, top layer first; pairs of layers at most `reach`
    apart; classes of `chunk` consecutive layers."""
    groups = [[i] for i in range(n - 1, -1, -1)]
    pairs = [(a, a + d) for d in range(1, reach + 1) for a in range(n - d)]
    classes = [list(range(c, min(n, c + chunk))) for c in range(0, n, chunk)]
    return Level("layers", groups, pairs, classes)


def set_action(inc: Incumbent, group: Sequence[int], action: Action, lead: int = 1) -> list[Change]:
    """Every member of `group` to `action` (a new swap prefetches `lead` steps ahead)."""
    if action is SWAP:
        return [(i, SWAP, lead, None) for i in group]
    return [(i, action, None, None) for i in group]


def group_moves(inc: Incumbent, group: Sequence[int]) -> Iterable[list[Change]]:
    """Candidate moves of one group (same change to every member), in a fixed order."""
    head = group[0]
    current = inc.actions[head]
    for action in (KEEP, RECOMPUTE):
        if any(inc.actions[i] is not action for i in group):
            yield [(i, action, None, None) for i in group]
    lead = inc.lead(head) if current is SWAP else None
    offset = inc.wait_offset(head) if current is SWAP else None
    leads = list(LEAD_LADDER)
    if lead is not None:
        leads += [lead - 1, lead + 1]
    seen: set[int] = set()
    for ell in leads:
        if ell < 0 or ell in seen or ell > inc.n - 1:
            continue
        seen.add(ell)
        if current is SWAP and ell == lead and all(inc.actions[i] is SWAP for i in group):
            continue
        yield [(i, SWAP, ell, offset) for i in group]
    if current is SWAP:
        for off in (None, 1, 2):
            if off != offset:
                yield [(i, SWAP, inc.lead(i) or 0, off) for i in group]


def pair_moves(inc: Incumbent, g1: Sequence[int], g2: Sequence[int]) -> Iterable[list[Change]]:
    """Both groups change action at once (a swap keeps its lead, a new swap gets lead 1)."""
    a1, a2 = inc.actions[g1[0]], inc.actions[g2[0]]
    for b1 in (KEEP, SWAP, RECOMPUTE):
        if b1 is a1:
            continue
        for b2 in (KEEP, SWAP, RECOMPUTE):
            if b2 is a2:
                continue
            yield [*set_action(inc, g1, b1), *set_action(inc, g2, b2)]


def improve_groups(
    inc: Incumbent,
    groups: Sequence[Sequence[int]],
    pairs: Sequence[tuple[int, int]] = (),
    *,
    max_sweeps: int | None = None,
) -> bool:
    """Sweep `groups` (then the group `pairs`, by index), taking each group's best
    improving move, until a sweep improves nothing. Returns whether anything improved."""
    improved_any = False
    sweeps = 0
    while max_sweeps is None or sweeps < max_sweeps:
        sweeps += 1
        improved = False
        candidates: Iterable = (
            *((g,) for g in groups),
            *((groups[a], groups[b]) for a, b in pairs),
        )
        for item in candidates:
            if inc.out_of_work():
                return improved_any
            moves = group_moves(inc, item[0]) if len(item) == 1 else pair_moves(inc, *item)
            if inc.take_best(moves):
                improved = improved_any = True
        if not improved:
            break
    return improved_any


def kicks(inc: Incumbent, level: Level, *, min_members: int = 1) -> bool:
    """Iterated local search: force one group to another action (a *kick*, which may
    break the budget), re-optimise the group's class (two sweeps), keep the result
    when it beats the incumbent from before the kick. Escapes optima that need
    several groups to change at once (GPT-48 at 50%, before the block options
    existed: 9.4% -> 6.6% overhead), but costs a few hundred simulations a kick,
    so it runs after the cheaper phases. Only classes whose groups have at least
    `min_members` layers are kicked."""
    improved = False
    for cls in level.classes:
        groups = [level.groups[g] for g in cls]
        if min(len(g) for g in groups) < min_members:
            continue
        for group in groups:
            for action in (KEEP, SWAP, RECOMPUTE):
                if inc.out_of_work():
                    return improved
                if all(inc.actions[i] is action for i in group):
                    continue
                kick = set_action(inc, group, action)
                improved |= inc.trial(kick, lambda gs=groups: improve_groups(inc, gs, max_sweeps=2))
    return improved


def level_phases(level: Level) -> list[Phase]:
    """Single moves, then pair moves, of one level."""
    out: list[Phase] = [(level.name, lambda inc: improve_groups(inc, level.groups))]
    if level.pairs:
        out.append(
            (level.name + " pairs", lambda inc: improve_groups(inc, level.groups, level.pairs))
        )
    return out


def kick_phase(level: Level, *, min_members: int = 1) -> Phase:
    return (level.name + " kicks", lambda inc: kicks(inc, level, min_members=min_members))
