"""The label search of remat-dp over menus: the fastest keep/option/recompute plan that fits.

`solvers.remat.menus` states the theorem (each segment's cost and what a
kept layer holds below the segments above it); this module walks its
resource-constrained path exactly: labels `(H, seconds)` per node `(k, a)`,
Pareto-pruned, with two proven prunings (see `solve_menus`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from solvers.remat.menus import DEAD, NEG, MenuChain, MenuPlan


def solve_menus(
    chain: MenuChain,
    room: int,
    *,
    incumbent: tuple[float, tuple[str, ...]] | None = None,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
) -> MenuResult:
    """The fastest keep/option/recompute plan whose peak is within `static + room`.

    A `MenuResult`: proven, the optimum (or no plan when none fits); cut short
    by the limit, the best plan known (the incumbent, or a completed label)
    with a lower bound on the optimum's makespan. Labels `(H, seconds,
    back-pointer)` per node `(k, a)`, Pareto-pruned; nodes in layer order, so a label is final when
    its node is expanded. Two proven prunings: a label whose `H` plus the
    least any completion needs (`need`, a backward pass) exceeds the room, and
    one whose seconds plus a lower bound on the rest (`rest`: the cheapest
    completion with `H` ignored) exceed the incumbent's (`incumbent`: seconds
    beyond `T_ideal` and actions of a known fitting plan without options, or
    the best completed label). Work: one unit per 10^6 segment-cost terms.
    """
    n = chain.n
    if chain.pg_from[0] > room:
        return MenuResult(None, True, math.inf)
    order = [(-1, 0)] + [(k, a) for k in range(n) for a in range(len(chain.choices[k]))]
    edges, evaluated = _edges(chain, order, room, expired)
    charge(evaluated * 1e-6)
    if edges is None:
        return _stopped(chain, None, incumbent, 0.0)
    need, rest = _lookahead(chain, order, edges)
    lower = rest[(-1, 0)]
    best_seconds = math.inf if incumbent is None else incumbent[0]
    slack = 1e-9 * (1.0 + abs(best_seconds)) if best_seconds < math.inf else 0.0
    # labels[(k, a)] = list of (H, seconds, parent label, (k, a), t)
    start = (0, 0.0, None, (-1, 0), -1)
    labels: dict[tuple[int, int], list[tuple]] = {(-1, 0): [start]}
    best: tuple | None = None
    for node in order:
        here = _pareto(labels.pop(node, []))
        if not here:
            continue
        if expired():
            return _stopped(chain, best, incumbent, lower)
        for t, b, cost, held, extra in edges[node]:
            nxt = (t + 1, b)
            ahead = need.get(nxt, NEG)
            after = rest.get(nxt, 0.0)
            for label in here:
                if cost > NEG and label[0] + cost > room:
                    break  # labels are by H ascending: none after fits either
                h_new = label[0] + held
                s_new = label[1] + extra
                if ahead > NEG and h_new + ahead > room:
                    continue
                if s_new + after > best_seconds + slack:
                    continue
                new = (h_new, s_new, label, nxt, t)
                if t + 1 < n:
                    labels.setdefault(nxt, []).append(new)
                elif best is None or (s_new, h_new) < (best[1], best[0]):
                    best = new
                    if s_new < best_seconds:
                        best_seconds = s_new
                        slack = 1e-9 * (1.0 + abs(best_seconds))
    found = _better(chain, best, incumbent)
    return MenuResult(found, True, math.inf if found is None else found.makespan)


@dataclass(frozen=True)
class MenuResult:
    """The search's answer: a plan (or None), whether it is proven optimal (or that none
    fits), and a lower bound on the optimum's makespan (`T_ideal` + seconds)."""

    plan: MenuPlan | None
    proven: bool
    lower: float


def _better(chain: MenuChain, best: tuple | None, incumbent) -> MenuPlan | None:
    """The faster of the best completed label and the incumbent (None if neither)."""
    if best is not None and (incumbent is None or best[1] < incumbent[0]):
        return _plan(chain, best)
    if incumbent is None:
        return None
    actions, options = incumbent[1], (None,) * chain.n
    makespan = chain.profile.t_ideal + incumbent[0]
    return MenuPlan(actions, options, makespan, chain.peak(actions, options))


def _stopped(chain: MenuChain, best: tuple | None, incumbent, lower: float) -> MenuResult:
    return MenuResult(_better(chain, best, incumbent), False, chain.profile.t_ideal + lower)


def _edges(chain: MenuChain, order, room: int, expired: Callable[[], bool]):
    """Every segment that fits an empty `H` from each node: (t, b, cost, held, seconds);
    None when the limit came first."""
    n = chain.n
    edges: dict[tuple[int, int], list[tuple]] = {}
    evaluated = 0
    for node in order:
        if expired():
            return None, evaluated
        k, a = node
        out = []
        recompute = 0.0
        last_t = k
        for t, b, cost, held, grown in chain.row(k, a):
            if t != last_t:
                recompute += chain.fwd[t]
                last_t = t
            evaluated += 1
            if cost <= room:
                extra = recompute + (chain.choices[t + 1][b][2] if t + 1 < n else 0.0)
                out.append((t, b, cost, held, extra))
            if grown > room and t > k:
                break  # every longer run from (k, a) holds these terms too
        edges[node] = out
    return edges, evaluated


def _lookahead(chain: MenuChain, order, edges):
    """Per node: `need`, the least `H`-relative peak any completion has (NEG: none has
    an op), and `rest`, the least seconds any completion adds with `H` ignored."""
    n = chain.n
    need: dict[tuple[int, int], int] = {}
    rest: dict[tuple[int, int], float] = {}
    for node in reversed(order):
        best_need, best_rest = None, math.inf
        for t, b, cost, held, extra in edges[node]:
            if t + 1 < n:
                nxt = (t + 1, b)
                if nxt not in rest or rest[nxt] == math.inf:
                    continue
                later = need[nxt]
                total = max(cost, held + later if later > NEG else NEG)
                seconds = extra + rest[nxt]
            else:
                total, seconds = cost, extra
            best_need = total if best_need is None else min(best_need, total)
            best_rest = min(best_rest, seconds)
        # A node no completion leaves fits nothing: its need is beyond any room.
        need[node] = DEAD if best_rest == math.inf else (NEG if best_need is None else best_need)
        rest[node] = best_rest
    return need, rest


def _pareto(labels: list[tuple]) -> list[tuple]:
    """Labels not dominated in (H, seconds), by H ascending (ties: the first)."""
    labels.sort(key=lambda lab: (lab[0], lab[1]))
    out: list[tuple] = []
    best = math.inf
    for label in labels:
        if label[1] < best:
            out.append(label)
            best = label[1]
    return out


def _plan(chain: MenuChain, final: tuple) -> MenuPlan:
    n = chain.n
    actions = ["recompute"] * n
    options: list[str | None] = [None] * n
    label = final
    seconds = final[1]
    while label[2] is not None:
        parent = label[2]
        k, a = parent[3]
        if k >= 0:
            actions[k] = "keep"
            options[k] = chain.choices[k][a][0]
        label = parent
    makespan = chain.profile.t_ideal + seconds
    return MenuPlan(
        tuple(actions), tuple(options), makespan, chain.peak(tuple(actions), tuple(options))
    )
