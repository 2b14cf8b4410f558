"""remat-dp over menus at one budget: the backward route, then forward targets, then the start.

NOTE (the first target backwards). The first target is searched by
`menu_back`'s route: labels from the chain's end, pruned by a bound on the
prefix below them, a beam's plan as the cap (the beam keeps every label of
a plan within the first target, so a plan it finds there is proven). At 30%
on the random 1,000-layer chain with menus the forward bound lies 2.9%
below the optimum, 4.1 million forward labels passed it with the optimum
itself as cap, and the targets and the start took 40.8 s
(`experiments/results/remat_dp_menus_labels.md`); the route proves it in
about half a second. A forward try of the first target before the route
(within 0.6x the edges' work) settled 70% and 50% there but cost 0.15 s at
30%; without it (best of 3 CPU runs, loaded machine) the 1,000-layer chain
took 0.62/0.74/0.94 s at 70/50/30% against 0.53/0.73/1.09 s, GPT-2's traced
block repeated to 300/600 layers at 70% 0.53/1.63 s against 0.54/1.79 s,
at 50% (256/600) 0.45/7.85 s against 0.46/7.72 s, with the same optima. When
the route stops or finds no plan within the widest target, the forward
targets go on as before.

NOTE (targets before the start). `menu_search` prunes a label when its
seconds plus the Lagrangian bound exceed a cap: the nearer the cap to the
optimum, the fewer labels. The search used to take the whole-layer optimum
as its cap (remat-dp without menus: 0.4-1.5 s alone on the random 1,000-layer
chain), which lay 2.5% of the optimum's seconds above it at 50%. Now the
bound's root value (`MenuBound.root`: the least seconds any plan adds,
0.17% below the optimum there) plus a small step is the first cap, with
no plan behind it: a search that finds a plan within its cap has proven
it optimal (any plan at most as fast keeps every label, `menu_search`'s
NOTE); one that finds none has proven that every plan adds more than the
cap (a lower bound), and the next cap lies above it by `STEP_GROWTH` times
the last step. The edges and the bound are built once for every search.

NOTE (the start, and anytime). The whole-layer optimum is asked for
(`start`, the caller's) only when the targets did not settle it within
their share of work (`TARGET_WORK` times what the edges and bound cost,
a count: deterministic), of the caller's limits (`targets`: `remat_dp`
gives them `TARGET_SHARE` of the work and time left, so that the start is
computed whole when they spend it: GPT-2's block repeated to 256 layers
under 20 units), or the limit came first; then one search with the
start's seconds as its cap runs, as before, and a limit that stops it
returns the faster of the start and the search's best. When the limit
comes inside the targets, `start` is still asked (its own starts run to
the end: `remat_dp`'s NOTE), so a plan comes back whenever one of them fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from solvers.remat.menu_back import route_prices, solve_back
from solvers.remat.menu_graph import MenuGraph
from solvers.remat.menu_search import MenuResult, better, run, stopped_result
from solvers.remat.menus import MenuChain

FIRST_STEP = 2e-3  # the first cap: the root bound plus this share of it and a mean forward
STEP_GROWTH = 4.0  # each missed cap: the next lies above it by this many times the last step
ROUNDS = 4  # caps tried before the start is asked for
TARGET_WORK = 10.0  # the targets' work, in multiples of the edges' and bound's


def solve_menu_room(
    chain: MenuChain,
    room: int,
    start: Callable[[], tuple[float, tuple[str, ...]] | None],
    *,
    charge: Callable[[float], None] = lambda units: None,
    expired: Callable[[], bool] = lambda: False,
    targets: tuple[Callable[[float], None], Callable[[], bool]] | None = None,
) -> tuple[MenuResult, bool]:
    """The menu optimum at `room` and whether `start` (the whole-layer plan: `(seconds,
    actions)` or None) was asked for. `MenuResult` as `solve_menus` gives it.

    `targets`: the charge and the limit of the caps' searches (the caller's share of
    its limits, so that the start still gets the rest: `remat_dp`); when that limit
    comes first (or the label cap), the start is asked for, as when the caps spend
    their `TARGET_WORK`. Default: `charge` and `expired` themselves."""
    target_charge, target_expired = targets if targets is not None else (charge, expired)
    built = 0.0

    def pay(units: float) -> None:
        nonlocal built
        built += units
        charge(units)

    graph = MenuGraph.build(chain, room, charge=pay, expired=expired)
    if graph.stopped:
        return stopped_result(graph, None, start(), 0.0), True
    if graph.empty:
        return MenuResult(None, True, math.inf), False
    lower = graph.root()
    step = FIRST_STEP * (abs(lower) + sum(chain.fwd) / max(chain.n, 1))
    share = TARGET_WORK * built
    spent = 0.0

    def paid(units: float) -> None:
        nonlocal spent
        spent += units
        target_charge(units)

    # The finer bound of the subgraph every cap of the ladder allows (built once):
    # its root bounds the plans within the last cap, and every other plan adds more.
    for _ in range(ROUNDS):
        last = lower + step * sum(STEP_GROWTH**i for i in range(ROUNDS))
        tables, bound = graph.for_cap(last, pay)
        root = bound.root()
        if root <= last:
            lower = max(lower, root)
            break
        lower = last  # no plan within it: the ladder starts above
    # the first target, by the backward route (NOTE, first target): a beam's plan caps
    # the exact search, and a plan within `first` is proven
    first = lower + step
    exact, beam = solve_back(
        graph,
        last,
        first,
        charge=paid,
        expired=target_expired,
        work_cap=share,
        within=(tables, route_prices(bound, len(graph.coarse.prices))),
    )
    if exact.plan is not None:  # the best within the beam's seconds: proven optimal
        return MenuResult(exact.plan, True, exact.plan.makespan), False
    if (exact.stopped or exact.capped) and expired():
        found = stopped_result(graph, None, start(), lower)
        if beam is not None and (found.plan is None or beam.plan.makespan < found.plan.makespan):
            found = MenuResult(beam.plan, False, found.lower)
        return found, True
    for _ in range(ROUNDS):
        cap = lower + step
        done = run(graph, cap, charge=paid, expired=target_expired, work_cap=share - spent)
        if done.stopped and expired():
            return stopped_result(graph, done, start(), lower), True
        if done.stopped or done.capped:  # their share, or the label cap: the start's turn
            break
        if done.best is not None:  # within the cap: proven optimal (module NOTE)
            found = better(graph, done, None)
            return MenuResult(found, True, found.makespan), False
        lower, step = cap, step * STEP_GROWTH
    incumbent = start()
    cap = math.inf if incumbent is None else incumbent[0]
    done = run(graph, cap, charge=charge, expired=expired)
    if done.stopped:
        return stopped_result(graph, done, incumbent, lower), True
    found = better(graph, done, incumbent)
    return MenuResult(found, True, math.inf if found is None else found.makespan), True
