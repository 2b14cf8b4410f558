"""remat-dp over menus at tight budgets: where the labels come from (issue 24, target (c)).

Run from the repository root (about a minute on the shared box):

    python -m experiments.remat_dp_menus_labels      # results/remat_dp_menus_labels.md

Chain: `experiments.remat_dp_menus.menu_chain(1000)` (the random "mixed" chain
with three options per layer) at 70%, 50% and 30% of its whole-layer keep-all
memory. Per budget: the proven optimum (`remat_dp`), the Lagrangian bound's
root (`MenuGraph.root`, then the finer prices of the subgraph the optimum's
cap allows, `MenuGraph.for_cap`), and one label search (`menu_search.run`)
with the optimum's own seconds as its cap: the best case of
`menu_optimum`'s ladder, no start needed. At the tightest budget also:

- the fronts per 100 layers, and the bound's gap (optimum minus the label's
  seconds minus the bound at its `H`) along the optimal path;
- at one layer, how many of the labels on its fronts have a completion that
  adds at most the cap: the exact rest of each label, from every completion
  above that layer (`tail_fronts`, a backward Pareto search of `(H limit,
  seconds)` over the same edges, pruned by `fw`, the least seconds of any
  path from the root: exact for every plan within the cap);
- the labels of the same search with the bound raised by a share of the
  root's gap (no longer a valid bound: it sizes what a tighter bound of
  the same shape could save, and its answer is not used).

CPU seconds are `time.process_time` of this process on the shared box.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

import planopt
from experiments.remat_dp_menus import menu_chain, whole
from planopt.problem import Problem
from solvers.remat import menu_search
from solvers.remat.menu_graph import OPEN, MenuGraph, forward_least
from solvers.remat.menus import NEG, MenuChain
from solvers.remat.rule import room_cap
from solvers.remat_dp import remat_dp

RESULTS = Path(__file__).parent / "results"
LAYERS = 1000
FRACTIONS = (0.7, 0.5, 0.3)
PROBE = 0.7  # the layer (share of the chain) whose fronts are checked against the exact rest
SHIFTS = (0.5, 0.85, 0.93)  # shares of the root's gap the bound is raised by (sizing only)
TIE = 1e-9  # the search's relative tie slack


def setup(fraction: float):
    """The chain, its room, its graph and the proven optimum's seconds at `fraction`."""
    profile = menu_chain(LAYERS)
    budget = planopt.budget_from_fraction(whole(profile), fraction)
    out = remat_dp(Problem(profile, budget, planopt.min_budget(profile)))
    assert out.status.value == "optimal", out.message
    chain = MenuChain(profile)
    room = room_cap(math.floor(budget) - profile.static_bytes)
    graph = MenuGraph.build(chain, room)
    return chain, room, graph, out.lower_bound - profile.t_ideal


def capped(graph: MenuGraph, cap: float, raise_by: float = 0.0):
    """One search with `cap`; `raise_by` > 0 lifts the bound by that many seconds."""
    tables, bound = graph.for_cap(cap)
    if raise_by:
        bound.margin -= raise_by
    start = time.process_time()
    try:
        done = menu_search.run(graph, cap)
    finally:
        bound.margin += raise_by
    return done, time.process_time() - start, tables, bound


def best_path(graph: MenuGraph, done) -> list[tuple[int, int, float]]:
    """`(node index, H, seconds)` of each label on the best completion's path."""
    store, label, path = done.store, done.best[3], []
    while label >= 0:
        path.append((int(store.node[label]), int(store.h[label]), float(store.s[label])))
        label = int(store.parent[label])
    return path[::-1]


def tail_fronts(tables: list[tuple], cap: float, first: int):
    """For node indices `>= first`: the Pareto front of the completions' `(limit, seconds)`,
    `limit` the most `H` a label there may hold for the completion to fit (`OPEN`: no
    op), seconds ascending. Completions whose seconds plus `fw` pass the cap are
    dropped (no plan within the cap uses them). Returns `(limits, seconds)`: per node
    index, its front as two arrays (empty below `first`)."""
    count = len(tables)
    fw = forward_least(tables)
    limit = cap + TIE * (1.0 + abs(cap))
    lims: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * count
    secs: list[np.ndarray] = [np.zeros(0)] * count
    for x in range(count - 1, first - 1, -1):
        target, top, held, extra, _after, cost = tables[x]
        if not len(target) or fw[x] == math.inf:
            continue
        final = target < 0
        parts_l = [np.where(cost[final] > NEG, top[final], OPEN)]
        parts_s = [extra[final]]
        for e in np.flatnonzero(~final):
            w = int(target[e])
            if len(lims[w]):
                above = np.where(lims[w] >= OPEN, OPEN, lims[w] - held[e])
                parts_l.append(np.minimum(top[e], above))
                parts_s.append(secs[w] + extra[e])
        lim, sec = np.concatenate(parts_l), np.concatenate(parts_s)
        ok = (lim >= 0) & (fw[x] + sec <= limit)
        lim, sec = lim[ok], sec[ok]
        order = np.lexsort((-lim, sec))
        lim, sec = lim[order], sec[order]
        if len(lim):
            keep = np.ones(len(lim), dtype=bool)
            keep[1:] = lim[1:] > np.maximum.accumulate(lim)[:-1]
            lim, sec = lim[keep], sec[keep]
        lims[x], secs[x] = lim, sec
    return lims, secs


def exact_rest(lims: np.ndarray, secs: np.ndarray, held: np.ndarray) -> np.ndarray:
    """The least seconds of a completion that fits above `held` bytes (inf: none)."""
    i = np.searchsorted(lims, held, side="left")
    return np.append(secs, np.inf)[np.minimum(i, len(lims))]


def main() -> None:
    lines = [
        "# remat-dp over menus at tight budgets: where the labels come from",
        "",
        "Made by `python -m experiments.remat_dp_menus_labels` (module doc: what each",
        f"number is). Chain: `random-mixed-n{LAYERS}-seed0-v2-menus`. CPU seconds of one",
        "process on the shared 2-core box (other jobs running: read ratios).",
        "",
        "| budget | optimum adds (s) | root bound, coarse | root bound, cap's subgraph "
        "| gap | labels, cap = optimum | CPU s of that search |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    tight = None
    for fraction in FRACTIONS:
        chain, room, graph, optimum = setup(fraction)
        cap = optimum * (1 + TIE)
        done, seconds, tables, bound = capped(graph, cap)
        fine = bound.root()
        lines.append(
            f"| {fraction:.0%} | {optimum:.5f} | {graph.root():.5f} | {fine:.5f} "
            f"| {(optimum - fine) / optimum:.2%} | {done.store.size:,} | {seconds:.2f} |"
        )
        tight = (fraction, chain, room, graph, optimum, cap, done, tables, bound)
    fraction, chain, room, graph, optimum, cap, done, tables, bound = tight
    store = done.store
    layer_of = np.array([k for k, _a in graph.order])
    nodes = store.node[: store.size]
    per = np.bincount(layer_of[nodes] + 1, minlength=chain.n + 1)
    lines += [
        "",
        f"## At {fraction:.0%}: the fronts, and the bound along the optimal path",
        "",
        "| layers | labels | path's node | H / room | seconds so far | bound's gap there |",
        "|---|---:|---|---:|---:|---:|",
    ]
    path = best_path(graph, done)
    for lo in range(0, chain.n, 100):
        on = [p for p in path if lo <= layer_of[p[0]] < lo + 100]
        x, h, s = on[0] if on else (None, 0, 0.0)
        gap = optimum - s - float(bound.lower(x, np.array([h]))[0]) if on else math.nan
        node = str(graph.order[x]) if on else "–"
        lines.append(
            f"| {lo}-{lo + 99} | {int(per[lo + 1 : lo + 101].sum()):,} | {node} "
            f"| {h / room:.3f} | {s:.5f} | {gap:.5f} |"
        )
    probe = int(PROBE * chain.n)
    first = graph.order.index((probe, 0))
    last = graph.order.index((probe + 20, 0))
    lims, secs = tail_fronts(tables, cap, first)
    total = within = 0
    for x in range(first, last):
        mine = nodes == x
        h, s = store.h[: store.size][mine], store.s[: store.size][mine]
        total += len(h)
        within += int((s + exact_rest(lims[x], secs[x], h) <= cap).sum())
    lines += [
        "",
        f"Layers {probe}-{probe + 19}: {total:,} labels on the fronts, of which {within:,}"
        f" ({within / max(total, 1):.2%}) have a completion within the cap (exact rest"
        f" from {sum(len(v) for v in lims[first:]):,} completion labels above layer {probe}).",
        "",
        "| bound raised by (share of the root's gap) | labels | CPU s |",
        "|---:|---:|---:|",
    ]
    gap = optimum - bound.root()
    for share in SHIFTS:
        shifted, seconds, _t, _b = capped(graph, cap, share * gap)
        lines.append(f"| {share:.0%} | {shifted.store.size:,} | {seconds:.2f} |")
    (RESULTS / "remat_dp_menus_labels.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
