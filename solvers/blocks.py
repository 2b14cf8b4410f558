"""Block-aware planning (method "blocks"): plan one copy of a repeated block for all copies.

(draft)
"""

from __future__ import annotations

from collections.abc import Sequence

from planopt.blocks import BlockStructure, Repeat


def copy_classes(rep: Repeat, level: int) -> list[list[int]]:
    """The copies of `rep` tied together at `level`: the first and last copy alone,
    the middle ones in `2**level` contiguous classes (as equal as possible)."""
    k = rep.repeats
    if k <= 2:
        return [[r] for r in range(k)]
    middle = list(range(1, k - 1))
    parts = min(2**level, len(middle))
    out: list[list[int]] = [[0]]
    for c in range(parts):
        lo = c * len(middle) // parts
        hi = (c + 1) * len(middle) // parts
        out.append(middle[lo:hi])
    out.append([k - 1])
    return out


def block_groups(
    structure: BlockStructure, level: int
) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Groups of layers moved together at `level`, and the pairs tried together.

    A group is the same layer (offset) in every copy of one class; layers no
    repeat covers are groups of one. Pairs: two offsets of one class, or two
    irregular layers at most two apart.
    """
    groups: list[list[int]] = []
    pairs: list[tuple[int, int]] = []
    for run in structure.irregular():
        first = len(groups)
        groups += [[i] for i in run]
        m = len(run)
        pairs += [(first + a, first + a + d) for d in (1, 2) for a in range(m - d)]
    for rep in structure.repeats:
        for cls in copy_classes(rep, level):
            first = len(groups)
            for o in range(rep.period):
                groups.append([rep.start + r * rep.period + o for r in cls])
            p = rep.period
            pairs += [(first + a, first + b) for a in range(p) for b in range(a + 1, p)]
    return groups, pairs


def _order(groups: Sequence[Sequence[int]]) -> list[int]:
    """Visit groups top layer first (the peak is usually near the top of the chain)."""
    return sorted(range(len(groups)), key=lambda g: -max(groups[g]))
