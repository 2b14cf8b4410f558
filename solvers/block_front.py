"""The block front: one copy of a repeated block solved over a range of memory caps.

A steady-state model of a middle copy (see `block_front`'s note) gives, for
each cap on the bytes a copy keeps at the peak, the cheapest plan of the
copy. It is only a guide: the search replays every option on the whole
chain with the simulator (`solvers.search.repeats`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from planopt.blocks import Repeat
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action
from planopt.profile import Profile

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
    s = [x.product_bytes for x in layers]
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

    from solvers.backends.highs import solve_with_highs

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
