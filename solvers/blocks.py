"""Block-aware planning (method "blocks"): decide a repeated block once for many copies.

`planopt.find_blocks` finds the repeated blocks; this module turns them into
the search of `solvers.lns`, so that one move decides the same layer in many
copies at once and a round's work grows with the block, not with the net.
The phases, in order (`block_phases`), repeated until nothing improves:

1. Replication: copy each middle copy's plan (from the greedy's start) onto
   every middle copy; keep the best such periodic plan when it is better.
2. Group moves at level 0, where a repeat's copies form three classes: the
   first copy, the middle copies, the last copy (bottom and top of the stack
   see different neighbours: nothing below, or a backward right after their
   forward). Layers no repeat covers (embedding, head, loss) move alone.
3. Block options: one copy solved exactly, over a range of budgets, in a
   steady-state model (`block_front`: the cheapest plan of the copy for each
   cap on the bytes it keeps at the peak, with its copies out fitting in its
   forward time), then every option replayed on the whole chain on the
   middle copies (and on all copies), the best few polished by group moves.
4. Pair moves at level 0, then finer levels: at level `l` the middle copies
   split into `2**l` contiguous classes (lower copies can swap more, their
   copies back have a long backward to hide in; upper ones recompute or
   keep), down to one class per copy. This is the composition step: classes
   take different options, and cross-class budget trades are moves.
5. Kicks of the copy-classes, then exact windows: each middle class solved
   by CP-SAT on one representative copy (the whole chain pinned around it,
   its neighbours the boundary conditions) and the result copied onto the
   class; then the prefix, suffix and gaps with a copy on either side.

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
Measured cost against the proven optimum on small nets of k copies, and
the gap to the lower bound on GPT-12..96: experiments/results/bench_blocks.md.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from planopt.blocks import BlockStructure, Repeat, find_blocks
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action
from planopt.problem import Problem
from planopt.profile import Profile
from planopt.result import SolverOutput
from solvers.lns import (
    Change,
    Incumbent,
    Key,
    Level,
    Phase,
    Window,
    check_options,
    finish,
    greedy_start,
    improve_groups,
    kick_phase,
    layer_phases,
    level_phases,
    relaxation_lower_bound,
    search,
    sliding_windows,
    window_phase,
)


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


def block_levels(structure: BlockStructure) -> list[Level]:
    """Level 0 up to the first level whose classes all hold one copy."""
    widest = max((rep.repeats - 2 for rep in structure.repeats), default=0)
    levels = [block_level(structure, 0)]
    level = 0
    while 2**level < widest:
        level += 1
        levels.append(block_level(structure, level))
    return levels


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


def replicate(inc: Incumbent, structure: BlockStructure) -> bool:
    """Copy each middle copy's plan onto all middle copies; take the best when it improves."""
    improved = False
    for rep in structure.repeats:
        if rep.repeats < 3:
            continue
        p = rep.period
        best = None
        for r in range(1, rep.repeats - 1):
            if inc.out_of_work():
                return improved
            src = rep.start + r * p
            changes: list[Change] = []
            for c in range(1, rep.repeats - 1):
                for o in range(p):
                    i = src + o
                    a = inc.actions[i]
                    if a is SWAP:
                        changes.append((rep.start + c * p + o, a, inc.lead(i), inc.wait_offset(i)))
                    else:
                        changes.append((rep.start + c * p + o, a, None, None))
            key = inc.probe(changes)
            if inc.better(key, inc.key if best is None else best[0]):
                best = (key, changes)
        if best is not None:
            inc.commit(best[1], best[0])
            improved = True
    return improved


# -- block options: one block solved over a range of budgets ---------------------------

# A middle copy may use this share of its own forward time on D2H: above 1 it
# borrows the engine time of copies that swap little (the top ones, the head).
D2H_SHARES = (1.0, 1.15, 1.3)


@dataclass(frozen=True)
class BlockOption:
    """One point of a block's front: its actions, and the steady-state figures
    the option model gave it (bytes kept per copy, seconds added per copy)."""

    actions: tuple[Action, ...]
    kept: int
    seconds: float


def block_front(profile: Profile, rep: Repeat, points: int = 40) -> list[BlockOption]:
    """The Pareto front of one copy of `rep` in steady state, over memory caps.

    NOTE (the steady-state model of a middle copy): its forward keeps the D2H
    engine for `sum(fwd)` seconds, so its copies out must fit in that time
    (or a share of `D2H_SHARES` of it) or they pile up into the peak; its
    backward with recomputation leaves `sum(bwd) + recomputed fwd` seconds
    for its copies back, beyond which the backward stalls; at the peak (the
    turn of the pass, every copy's forward done) it holds its kept tensors.
    So a copy costs `max(recomputed fwd, copy-back time - sum(bwd))` seconds.
    Minimise that with kept bytes <= K, for K from 0 to the whole block in
    `points` steps. Solved exactly: by enumerating all 3**p plans of the copy
    when p <= ENUMERATE_MAX, else one small MIP per cap. The model is only a
    guide: every option is replayed on the whole chain.
    """
    dev = profile.device
    layers = [profile.layers[i] for i in rep.copy(0)]
    s = [x.saved_bytes for x in layers]
    data = _BlockData(
        fwd=[x.fwd for x in layers],
        bwd_total=sum(x.bwd for x in layers),
        saved=s,
        out=[dev.d2h_seconds(x) for x in s],
        back=[dev.h2d_seconds(x) for x in s],
    )
    solve = _front_by_enumeration if len(layers) <= ENUMERATE_MAX else _front_by_mip
    front: list[BlockOption] = []
    for actions in solve(data, D2H_SHARES, [sum(s) * k / points for k in range(points + 1)]):
        if actions is not None and all(opt.actions != actions for opt in front):
            front.append(data.option(actions))
    return sorted(front, key=lambda o: (o.kept, o.seconds))


_FRONTS: dict[tuple[str, int, int], list[BlockOption]] = {}


def cached_front(profile: Profile, rep: Repeat) -> list[BlockOption]:
    """`block_front`, computed once per profile and repeat in this process."""
    key = (profile.fingerprint, rep.start, rep.period)
    if key not in _FRONTS:
        if len(_FRONTS) > 64:
            _FRONTS.clear()
        _FRONTS[key] = block_front(profile, rep)
    return _FRONTS[key]


ENUMERATE_MAX = 13  # 3**13 = 1.6 M plans of one copy, a fraction of a second in numpy


@dataclass(frozen=True)
class _BlockData:
    fwd: list[float]
    bwd_total: float
    saved: list[int]
    out: list[float]
    back: list[float]

    def option(self, actions: tuple[Action, ...]) -> BlockOption:
        rec = sum(f for f, a in zip(self.fwd, actions, strict=True) if a is RECOMPUTE)
        back = sum(t for t, a in zip(self.back, actions, strict=True) if a is SWAP)
        kept = sum(x for x, a in zip(self.saved, actions, strict=True) if a is KEEP)
        return BlockOption(actions, kept, max(rec, back - self.bwd_total))


def _front_by_enumeration(
    data: _BlockData, shares: tuple[float, ...], caps: list[float]
) -> list[tuple[Action, ...] | None]:
    """For each D2H share and cap, the cheapest plan of the copy (ties: least kept,
    lowest code).

    Plans are coded in base 3 (keep 0, swap 1, recompute 2; the first layer
    most significant); each sum over a copy is built as an outer sum, layer
    by layer, so no plan is ever materialised as a row.
    """
    p = len(data.fwd)

    def total(values: list[tuple[float, float, float]]) -> np.ndarray:
        acc = np.zeros(1)
        for v in values:
            acc = (acc[:, None] + np.array(v)[None, :]).ravel()
        return acc

    kept = total([(x, 0.0, 0.0) for x in data.saved])
    out = total([(0.0, x, 0.0) for x in data.out])
    rec = total([(0.0, 0.0, x) for x in data.fwd])
    back = total([(0.0, x, 0.0) for x in data.back])
    cost = np.maximum(rec, back - data.bwd_total)
    # Cheapest first (ties: least kept, lowest code); within a D2H share, the
    # first plan with kept <= cap is where the running minimum of kept first is.
    everything = np.lexsort((kept, cost))
    by_code = (KEEP, SWAP, RECOMPUTE)
    result: list[tuple[Action, ...] | None] = []
    for share in shares:
        order = everything[out[everything] <= share * sum(data.fwd)]
        running = np.minimum.accumulate(kept[order])
        for cap in caps:
            pos = int(np.searchsorted(-running, -cap, side="left"))
            if pos >= order.size:
                result.append(None)
                continue
            code, digits = int(order[pos]), []
            for _ in range(p):
                code, d = divmod(code, 3)
                digits.append(by_code[d])
            result.append(tuple(reversed(digits)))
    return result


def _front_by_mip(
    data: _BlockData, shares: tuple[float, ...], caps: list[float]
) -> list[tuple[Action, ...] | None]:
    """The same as `_front_by_enumeration`, one HiGHS MIP per share and cap (long blocks)."""
    import pulp

    from solvers.highs import solve_with_highs

    p = len(data.fwd)
    out: list[tuple[Action, ...] | None] = []
    for share, cap in itertools.product(shares, caps):
        prob = pulp.LpProblem("block", pulp.LpMinimize)
        k = [pulp.LpVariable(f"k{o}", cat="Binary") for o in range(p)]
        w = [pulp.LpVariable(f"w{o}", cat="Binary") for o in range(p)]
        r = [pulp.LpVariable(f"r{o}", cat="Binary") for o in range(p)]
        cost = pulp.LpVariable("cost", lowBound=0)
        prob += cost
        prob += cost >= pulp.lpSum(data.fwd[o] * r[o] for o in range(p))
        prob += cost >= pulp.lpSum(data.back[o] * w[o] for o in range(p)) - data.bwd_total
        for o in range(p):
            prob += k[o] + w[o] + r[o] == 1
        prob += pulp.lpSum(data.saved[o] * k[o] for o in range(p)) <= cap
        prob += pulp.lpSum(data.out[o] * w[o] for o in range(p)) <= share * sum(data.fwd)
        solve_with_highs(prob)
        if pulp.LpStatus[prob.status] != "Optimal":
            out.append(None)
            continue
        out.append(
            tuple(
                KEEP if k[o].value() > 0.5 else SWAP if w[o].value() > 0.5 else RECOMPUTE
                for o in range(p)
            )
        )
    return out


def lower_hull(front: list[BlockOption]) -> list[BlockOption]:
    """The front's lower convex hull in (kept, seconds), least kept first.

    A multiple-choice knapsack over identical copies (minimise the seconds
    added by all copies with their kept bytes under a cap) has an optimum
    that mixes two adjacent hull points; points above the hull never pay.
    """
    pts: list[BlockOption] = []
    for opt in sorted(front, key=lambda o: (o.kept, o.seconds)):
        if pts and opt.seconds >= pts[-1].seconds:
            continue  # more bytes for no less time: dominated
        while len(pts) >= 2:
            a, b = pts[-2], pts[-1]
            # b lies on or above the segment a -> opt: drop it
            if (b.seconds - a.seconds) * (opt.kept - a.kept) >= (opt.seconds - a.seconds) * (
                b.kept - a.kept
            ):
                pts.pop()
            else:
                break
        pts.append(opt)
    return pts


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


def compose(inc: Incumbent, structure: BlockStructure) -> bool:
    """The composition over blocks: for each repeat, every copy takes a point of the
    block's front, split between two adjacent hull points (the bottom `m`
    copies the one that keeps less), with `m` the smallest that fits by
    binary search; the best split over hull pairs (swaps prefetched one block
    ahead) is taken when it beats the incumbent. Repeats are composed in
    turn, the others held as they are. O(hull size * log(copies))
    simulations a repeat: linear in the number of blocks, whatever the plan
    it starts from.
    """
    improved = False
    for rep in structure.repeats:
        hull = lower_hull(cached_front(inc.problem.profile, rep))
        if not hull:
            continue
        lead = rep.period
        best: tuple[Key, list[Change]] | None = None
        # m = 0 is all `high`, m = copies all `low`: the uniform options are ends
        pairs = list(itertools.pairwise(hull)) or [(hull[0], hull[0])]
        for low, high in pairs:
            if inc.out_of_work():
                break
            lo, hi = 0, rep.repeats  # find the least m whose plan fits
            probed: dict[int, Key] = {}
            while lo < hi:
                mid = (lo + hi) // 2
                probed[mid] = inc.probe(_mix(rep, low, high, mid, lead))
                if probed[mid][0] == 0:
                    hi = mid
                else:
                    lo = mid + 1
            changes = _mix(rep, low, high, lo, lead)
            key = probed[lo] if lo in probed else inc.probe(changes)
            if best is None or inc.better(key, best[0]):
                best = (key, changes)
        if best is not None and inc.better(best[0], inc.key):
            inc.commit(best[1], best[0])
            improved = True
    return improved


def compose_phase(structure: BlockStructure) -> Phase:
    return ("composition", lambda inc: compose(inc, structure))


def options_phase(structure: BlockStructure, polish: int = 5) -> Phase:
    """Try each front option of every repeated block on its middle copies, and on
    all its copies.

    Every option (swaps prefetched one block ahead) is replayed on the whole
    chain; the `polish` most promising (fastest that fit, else smallest peak)
    are then re-optimised by the group search on the copies they changed
    (the middle ones as one class, the first and last copy layer by layer),
    and the best result is kept when it beats the incumbent. Giving the last
    copy the option too matters when the top of the net is a big share of
    the budget (GPT-24 at 30%). Fronts are computed once.
    """
    fronts: dict[int, list[BlockOption]] = {}

    def run(inc: Incumbent) -> bool:
        improved = False
        for idx, rep in enumerate(structure.repeats):
            if rep.repeats < 3 or inc.out_of_work():
                continue
            if idx not in fronts:
                fronts[idx] = cached_front(inc.problem.profile, rep)
            p, k = rep.period, rep.repeats
            middle = [[rep.start + r * p + o for r in range(1, k - 1)] for o in range(p)]
            ends = [[rep.start + r * p + o] for r in (0, k - 1) for o in range(p)]
            tried = []
            for scope, copies in (("middle", range(1, k - 1)), ("all", range(k))):
                for opt in fronts[idx]:
                    if inc.out_of_work():
                        return improved
                    changes: list[Change] = [
                        (
                            rep.start + r * p + o,
                            opt.actions[o],
                            p if opt.actions[o] is SWAP else None,  # lead: one block
                            None,
                        )
                        for r in copies
                        for o in range(p)
                    ]
                    tried.append((inc.probe(changes), len(tried), scope, changes))
            tried.sort(key=lambda t: (t[0], t[1]))
            for _, _, scope, changes in tried[:polish]:
                if inc.out_of_work():
                    break
                saved = inc.snapshot()
                inc.force(changes)
                improve_groups(inc, middle if scope == "middle" else middle + ends)
                if inc.better(inc.key, saved.key):
                    improved = True
                else:
                    inc.restore(saved)
        return improved

    return ("block options", run)


def replicate_phase(structure: BlockStructure) -> Phase:
    return ("replication", lambda inc: replicate(inc, structure))


def block_phases(structure: BlockStructure, window: int, window_seconds: float) -> list[Phase]:
    """Replication, the block options, level 0 singles and pairs, the finer
    levels, kicks of the copy-classes, then the exact windows: most rewarding
    per second first (measured on GPT-12 and GPT-48: on nets of hundreds of layers
    a window costs about 2 s and rarely beats the group search, on small nets the
    windows close the last gaps to the optimum)."""
    levels = block_levels(structure)
    phases: list[Phase] = [
        compose_phase(structure),
        replicate_phase(structure),
        options_phase(structure),
    ]
    phases += level_phases(levels[0])
    for level in levels[1:]:
        phases += level_phases(level)
    phases.append(kick_phase(levels[0], min_members=2))
    if window:
        phases.append(
            window_phase(
                lambda size: block_windows(structure, size), window, structure.n, window_seconds
            )
        )
    return phases


# With repeated blocks the greedy gets this share of the time left.
GREEDY_SHARE_WITH_BLOCKS = 0.3


def blocks(
    problem: Problem,
    *,
    rtol: float = 0.05,
    use_signatures: bool = True,
    window: int = 8,
    window_seconds: float = 2.0,
    max_evals: int | None = None,
    lower_bound: bool = True,
) -> SolverOutput:
    """Plan a net of repeated blocks by deciding each block once for a class of copies.

    `rtol`/`use_signatures`: how layers are compared (`planopt.find_blocks`).
    `window` (0: none) and `window_seconds`: the exact windows. `max_evals`
    caps the simulations. `lower_bound` reports the LP relaxation's bound.
    Without repeats this is `lns` (the message says so).

    NOTE (the start): the best of the greedy (given
    `GREEDY_SHARE_WITH_BLOCKS` of the time left), sqrt-n and the
    minimum-memory plan, then the composition over blocks (`compose`) on top
    of it. On GPT-96 (1,252 layers) the greedy needs 2-10 s; given half of a
    4.5 s limit under load it starved the search and `blocks` lost to the
    standalone greedy.
    """
    max_evals, window, window_seconds = check_options(max_evals, window, window_seconds)
    structure = find_blocks(problem.profile, rtol=rtol, use_signatures=use_signatures)
    share = GREEDY_SHARE_WITH_BLOCKS if structure.found else 0.5
    start, greedy_out = greedy_start(problem, share=share)
    if start is None:
        return greedy_out
    bound = relaxation_lower_bound(problem) if lower_bound else None
    inc = Incumbent(problem, start.plan, max_evals=max_evals)
    if not structure.found:
        report = search(inc, layer_phases(problem.n, window, window_seconds))
        return finish("blocks", inc, start, report, bound, "no repeated blocks found; layer search")
    report = search(inc, block_phases(structure, window, window_seconds))
    return finish("blocks", inc, start, report, bound, f"blocks {structure.summary()}")
