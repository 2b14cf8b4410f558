"""Neighbourhoods for nets of repeated blocks: decide a block once for a class of copies.

`planopt.find_blocks` finds the repeated blocks; the neighbourhoods here tie
the copies of a block together so that one move decides the same layer in
many copies at once and a round's work grows with the block, not with the
net. In the order `block_phases` runs them:

1. Composition (`compose`): every copy takes a point of the block front's
   lower convex hull (`solvers.block_front`), split between two adjacent
   hull points, the split found by binary search under the simulator.
2. Replication (`replicate`): copy each middle copy's plan onto every middle
   copy; keep the best such periodic plan when it is better.
3. Block options (`options_phase`): every front option replayed on the
   middle copies (and on all copies), the best few polished by group moves.
4. Group and pair moves at level 0, where a repeat's copies form three
   classes (the first copy, the middle copies, the last copy: bottom and
   top of the stack see different neighbours), then finer levels: at level
   `l` the middle copies split into `2**l` contiguous classes, down to one
   class per copy. Layers no repeat covers (embedding, head, loss) move
   alone.
5. Kicks of the copy-classes, then exact windows: each middle class solved
   by CP-SAT on one representative copy (the whole chain pinned around it)
   and the result copied onto the class; then the prefix, suffix and gaps
   with a copy on either side.

NOTE (what the decomposition represents, and what not): every candidate is
a plan for the whole chain, scored by the simulator, so a copy back may be
issued blocks above its layer, a recompute run may cross a block boundary,
and every copy's D2H/H2D backlog is accounted exactly; nothing is composed
from per-block estimates. What a level cannot represent is copies of one
class that differ; finer levels remove that, down to per-layer moves. The
steady-state option model ignores the stack's ends and prefetch timing (the
replay and the polish handle those). An exact window sees `window` layers,
prefetch steps up to 16 above it and copy-out waits up to 3 forwards on
(a window over the whole chain: every wait); a longer block is solved in
parts.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable

from planopt.blocks import BlockStructure, Repeat
from planopt.plan import SWAP
from planopt.work import WorkMeter
from solvers.block_front import ENUMERATE_MAX, BlockOption, cached_front, lower_hull
from solvers.search.driver import Phase
from solvers.search.engine import Change, Incumbent, Key
from solvers.search.moves import Level, improve_groups, kick_phase, level_phases
from solvers.search.windows import Window, sliding_windows, window_phase

# What a block front costs to compute, in work units (CPU-seconds of the
# reference machine, measured on GPT and random blocks): the enumeration of
# the 3**p plans of a copy (p <= ENUMERATE_MAX) takes FRONT_UNITS_PER_PLAN a
# plan past a floor of FRONT_FLOOR_UNITS (p=2: 0.3 ms, p=11: 29 ms, p=13:
# 0.23 s); past it, one small MIP per cap, FRONT_MIP_UNITS plus
# FRONT_MIP_UNITS_PER_LAYER a layer (p=14: 0.68 s, p=30: 0.77 s).
FRONT_FLOOR_UNITS = 3e-4
FRONT_UNITS_PER_PLAN = 1.5e-7
FRONT_MIP_UNITS = 0.55
FRONT_MIP_UNITS_PER_LAYER = 7.5e-3
# The fronts a solve has been charged for, per solve meter (see `_front`).
_CHARGED: weakref.WeakKeyDictionary[WorkMeter, set[tuple[int, int]]] = weakref.WeakKeyDictionary()


def front_units(period: int) -> float:
    """Work units a front of a `period`-layer block costs to compute (see above)."""
    if period <= ENUMERATE_MAX:
        return FRONT_FLOOR_UNITS + FRONT_UNITS_PER_PLAN * 3**period
    return FRONT_MIP_UNITS + FRONT_MIP_UNITS_PER_LAYER * period


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
        out.append(middle[c * len(middle) // parts : (c + 1) * len(middle) // parts])
    out.append([k - 1])
    return out


def block_level(structure: BlockStructure, level: int) -> Level:
    """Groups moved together at `level`, the pairs tried together, and the classes.

    A group is one offset in every copy of one class; an uncovered layer is
    a group of one. Pairs: two offsets of one class, or two uncovered layers
    at most two apart. Kick classes: the groups of one copy-class, or eight
    consecutive uncovered layers. Groups are listed biggest first, then top of
    the chain first (the peak is usually near the top, where every kept tensor
    below is still alive).
    """
    groups: list[list[int]] = []
    pairs: list[tuple[int, int]] = []
    classes: list[list[int]] = []
    for run in structure.irregular():
        first = len(groups)
        groups += [[i] for i in run]
        pairs += [(first + a, first + a + d) for d in (1, 2) for a in range(len(run) - d)]
        classes += [
            list(range(first + c, first + min(len(run), c + 8))) for c in range(0, len(run), 8)
        ]
    for rep in structure.repeats:
        p = rep.period
        for cls in copy_classes(rep, level):
            first = len(groups)
            groups += [[rep.start + r * p + o for r in cls] for o in range(p)]
            pairs += [(first + a, first + b) for a in range(p) for b in range(a + 1, p)]
            classes.append(list(range(first, first + p)))
    order = sorted(range(len(groups)), key=lambda g: (-len(groups[g]), -max(groups[g])))
    rank = {g: k for k, g in enumerate(order)}
    classes.sort(key=lambda c: min(rank[g] for g in c))
    return Level(
        f"blocks level {level}",
        [groups[g] for g in order],
        sorted((min(rank[a], rank[b]), max(rank[a], rank[b])) for a, b in pairs),
        [sorted(rank[g] for g in c) for c in classes],
    )


def _finest_level(structure: BlockStructure) -> int:
    """The first level whose classes all hold one copy."""
    widest = max((rep.repeats - 2 for rep in structure.repeats), default=0)
    level = 0
    while 2**level < widest:
        level += 1
    return level


def _deferred_level_phases(structure: BlockStructure, level: int) -> list[Phase]:
    """`level_phases` of one level, the level built when the search first reaches it.

    NOTE: at 10^5 layers each level takes about a second to build and there
    are fifteen; built up front they ran past a 5 s limit before the search
    began. Built on demand, the phases and their order are the same.
    """
    built: list[list[Phase]] = []

    def phase(k: int) -> Callable[[Incumbent], bool]:
        def run(inc: Incumbent) -> bool:
            if not built:
                built.append(level_phases(block_level(structure, level)))
            return built[0][k][1](inc) if k < len(built[0]) else False

        return run

    name = f"blocks level {level}"
    return [(name, phase(0)), (name + " pairs", phase(1))]


def block_windows(structure: BlockStructure, size: int) -> list[Window]:
    """Exact windows: first each middle class of each repeat, solved on one copy
    (its neighbours as boundary conditions) and copied to the class, in parts of
    at most `size` layers; then windows of `size` layers over each uncovered run
    and the copy on either side of it (prefix, suffix, the gaps between
    stages: where plans cross block boundaries), top of the chain first. A net
    of at most `4 * size` layers gets windows over all of it instead."""
    out: list[Window] = []
    for rep in structure.repeats:
        p = rep.period
        for cls in copy_classes(rep, 0):
            if len(cls) < 2:
                continue
            r = cls[len(cls) // 2]
            base = rep.start + r * p
            shifts = tuple((c - r) * p for c in cls)
            out += [Window(base + w.lo, base + w.hi, shifts) for w in sliding_windows(p, size)]
    if structure.n <= 4 * size:
        return out + sliding_windows(structure.n, size)
    spans: list[tuple[int, int]] = []
    for run in structure.irregular():
        lo = max(0, run.start - _period_at(structure, run.start - 1))
        hi = min(structure.n, run.stop + _period_at(structure, run.stop))
        spans.append((lo, hi))
    plain = [
        Window(lo + w.lo, lo + w.hi) for lo, hi in spans for w in sliding_windows(hi - lo, size)
    ]
    return out + sorted(set(plain), key=lambda w: (-w.hi, -w.lo))


def _period_at(structure: BlockStructure, i: int) -> int:
    """The period of the repeat covering layer `i` (0 when none does)."""
    return next((r.period for r in structure.repeats if r.start <= i < r.stop), 0)


def _copy_plan(inc: Incumbent, rep: Repeat, src: int, copies) -> list[Change]:
    """The changes that give every copy in `copies` the plan of the copy at `src`."""
    p = rep.period
    changes: list[Change] = []
    for c in copies:
        for o in range(p):
            i = src + o
            a = inc.actions[i]
            lead, off = (inc.lead(i), inc.wait_offset(i)) if a is SWAP else (None, None)
            changes.append((rep.start + c * p + o, a, lead, off))
    return changes


def replicate(inc: Incumbent, structure: BlockStructure) -> bool:
    """Copy each middle copy's plan onto all middle copies; take the best when it improves."""
    improved = False
    for rep in structure.repeats:
        if rep.repeats < 3 or inc.out_of_work():
            continue
        middle = range(1, rep.repeats - 1)
        sources = [rep.start + r * rep.period for r in middle]
        improved |= inc.take_best(_copy_plan(inc, rep, src, middle) for src in sources)
    return improved


def _mix(rep: Repeat, low: BlockOption, high: BlockOption, m: int, lead: int) -> list[Change]:
    """Copies 0 .. m-1 of `rep` take `low`, the others `high` (swaps with `lead`)."""
    p = rep.period
    out: list[Change] = []
    for r in range(rep.repeats):
        opt = low if r < m else high
        for o in range(p):
            a = opt.actions[o]
            out.append((rep.start + r * p + o, a, lead if a is SWAP else None, None))
    return out


def _front(inc: Incumbent, rep: Repeat) -> list[BlockOption]:
    """The front of `rep`, charged what computing it costs the first time this solve
    asks for it, and nothing after.

    NOTE (issue 25, item 12): fronts are cached per process, so the charge
    cannot follow the cache (it would differ between a first and a second
    solve); it follows the solve's own path instead. The flat 0.1 counts a
    call it replaced made a 300-layer chain of small blocks pay 0.6 units for
    milliseconds of work (0.38 CPU-s a unit), and a 13-layer GPT block 0.1 for
    0.23 s.
    """
    meter = inc.problem.meter
    root = meter
    while root.parent is not None:
        root = root.parent
    charged = _CHARGED.setdefault(root, set())
    if (rep.start, rep.period) not in charged:
        charged.add((rep.start, rep.period))
        meter.charge(meter.raw(front_units(rep.period)))
    return cached_front(inc.problem.profile, rep)


def _least_fitting_split(inc: Incumbent, rep: Repeat, low, high, lead: int) -> list[Change]:
    """The split with the fewest `low` copies whose plan fits, by binary search."""
    lo, hi = 0, rep.repeats
    while lo < hi:
        mid = (lo + hi) // 2
        if inc.probe(_mix(rep, low, high, mid, lead))[0] == 0:
            hi = mid
        else:
            lo = mid + 1
    return _mix(rep, low, high, lo, lead)


def compose(inc: Incumbent, structure: BlockStructure) -> bool:
    """The composition over blocks: for each repeat, every copy takes a point of the
    block's front, split between two adjacent hull points (the bottom `m`
    copies the one that keeps less), with `m` the smallest that fits by
    binary search; the best split over hull pairs (swaps prefetched one block
    ahead) is taken when it beats the incumbent. Repeats are composed in
    turn, the others held as they are. O(hull size * log(copies))
    simulations a repeat: linear in the number of blocks, whatever the plan
    it starts from. (The multiple-choice knapsack over identical copies has
    an optimum that mixes two adjacent hull points.)
    """
    improved = False
    for rep in structure.repeats:
        if inc.out_of_work():
            break
        hull = lower_hull(_front(inc, rep))
        if not hull:
            continue
        # m = 0 is all `high`, m = copies all `low`: the uniform options are ends
        pairs = list(itertools.pairwise(hull)) or [(hull[0], hull[0])]
        splits = (_least_fitting_split(inc, rep, lo, hi, rep.period) for lo, hi in pairs)
        improved |= inc.take_best(splits)
    return improved


def options_phase(structure: BlockStructure, polish: int = 5) -> Phase:
    """Try each front option of every repeated block on its middle copies, and on
    all its copies.

    Every option (swaps prefetched one block ahead) is replayed on the whole
    chain; the `polish` most promising (fastest that fit, else smallest peak)
    are then re-optimised by the group search on the copies they changed
    (the middle ones as one class, the first and last copy layer by layer),
    and the best result is kept when it beats the incumbent. Giving the last
    copy the option too matters when the top of the net is a big share of
    the budget (GPT-24 at 30%).
    """

    def run(inc: Incumbent) -> bool:
        improved = False
        for rep in structure.repeats:
            if rep.repeats < 3 or inc.out_of_work():
                continue
            front = _front(inc, rep)
            p, k = rep.period, rep.repeats
            middle = [[rep.start + r * p + o for r in range(1, k - 1)] for o in range(p)]
            ends = [[rep.start + r * p + o] for r in (0, k - 1) for o in range(p)]
            tried: list[tuple[Key, int, list[list[int]], list[Change]]] = []
            for scope, copies in ((middle, range(1, k - 1)), (middle + ends, range(k))):
                for opt in front:
                    if inc.out_of_work():
                        return improved
                    changes: list[Change] = [
                        (rep.start + r * p + o, a, p if a is SWAP else None, None)
                        for r in copies
                        for o, a in enumerate(opt.actions)
                    ]
                    tried.append((inc.probe(changes), len(tried), scope, changes))
            tried.sort(key=lambda t: (t[0], t[1]))
            for _, _, groups, changes in tried[:polish]:
                if inc.out_of_work():
                    break
                improved |= inc.trial(changes, lambda gs=groups: improve_groups(inc, gs))
        return improved

    return ("block options", run)


def block_phases(structure: BlockStructure, window: int, window_work: float) -> list[Phase]:
    """Composition, replication, the block options, level 0 singles and pairs, the finer
    levels, kicks of the copy-classes, then the exact windows: most rewarding
    per unit of work first (measured on GPT-12 and GPT-48: on nets of hundreds
    of layers a window costs about 2 s and rarely beats the group search, on
    small nets the windows close the last gaps to the optimum)."""
    first = block_level(structure, 0)
    phases: list[Phase] = [
        ("composition", lambda inc: compose(inc, structure)),
        ("replication", lambda inc: replicate(inc, structure)),
        options_phase(structure),
        *level_phases(first),
    ]
    for level in range(1, _finest_level(structure) + 1):
        phases += _deferred_level_phases(structure, level)
    phases.append(kick_phase(first, min_members=2))
    if window:
        phases.append(
            window_phase(
                lambda size: block_windows(structure, size), window, structure.n, window_work
            )
        )
    return phases
