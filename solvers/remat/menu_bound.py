"""A lower bound on the seconds the rest of a menu plan adds, given the bytes held below.

NOTE (the relaxation, and why it is valid). `menu_search` walks labels
`(H, seconds)` over nodes `(k, a)`; from node `x` a completion is a path of
edges `e_1 .. e_m` (segments) to the chain's end, adding `sum extra_e`
seconds, and it fits exactly when every edge with an op (`cost_e > NEG`)
satisfies `H + pre_e + cost_e <= room`, `pre_e` the `held` of the edges
before `e` on the path. Keep only one of those constraints, the one of the
path's last edge with an op, `e*`, and price it with `lam >= 0` seconds a
byte. For a completion that fits, the priced term is `<= 0`, so

    sum extra >= sum extra + lam (H + pre_e* + cost_e* - room)
              >= lam (H - room) + F_x(lam),
    F_x(lam) = min over paths from x with an edge with an op of
               sum extra + lam (pre_e* + cost_e*),

and a completion without any edge with an op adds at least `Z_x`, the
least `sum extra` over such paths. Hence for every `lam` of a grid,

    rest(x, H) >= min(Z_x, max over lam of lam (H - room) + F_x(lam)),

a lower bound that grows with `H` (the search's `rest` is its value at
`lam = 0`, which the grid includes). `F` and `Z` follow the edges backwards
in one pass (every edge leads to a later node): an edge `e` to node `w`
adds `extra_e + lam held_e + F_w(lam)` (the last edge with an op lies
beyond `e`) or, when `e` has an op, `extra_e + lam cost_e + Z_w` (it is
`e*`); a final edge adds `extra_e + lam cost_e` (or `extra_e` to `Z`). A
label whose seconds plus this bound exceed the incumbent's seconds (plus
the search's tie slack and a margin for rounding) has no completion better
than the incumbent: dropping it loses no optimum. It is the whole-layer
DP's Lagrangian bound (`bounds`) on the menu graph, computed on the edges
the search keeps (those that fit `H = 0`: every `H >= 0`, so a real
completion uses only those).

NOTE (prices). Every price gives a valid bound, so any set of prices does;
the set decides how tight. A geometric grid of 32 prices over every
choice's seconds saved per byte held left the root's bound 1.4% below the
optimum on the random 1,000-layer chain with menus at 50% (0.07457 s
against 0.07577 s), and 400 prices near the grid's best 0.17% below
(0.07564 s). So the grid is followed by `FINE`, multiples of its best
price at the root from 0.5 to 2 (a label off the optimum's path is cut
best by a price near the root's, `bounds`' `LABEL_PRICES`), then `FINER`,
multiples of the best of those within 4%: two more passes, on the subgraph
the caller's cap allows (`menu_graph`'s NOTE), and with the optimum as
cap the fronts at 50% held 2.8 times fewer labels than with the grid alone
(0.61 million against 1.73 million), and `FINER` cut the search there from
0.43 s to 0.28 s.
"""

from __future__ import annotations

import numpy as np

from solvers.remat.menus import NEG, MenuChain

PRICES = 32  # geometric grid of prices, plus 0
# Multiples of the coarse grid's best price at the root, added to the grid (NOTE, prices)
FINE = np.array(
    [0.5, 0.7, 0.8, 0.85, 0.9, 0.93, 0.96, 0.98, 0.99, 1.01, 1.02, 1.04, 1.07, 1.1, 1.15, 1.2, 1.3,
     1.5, 2.0]
)  # fmt: skip
FINER = np.array([0.96, 0.97, 0.98, 0.985, 0.99, 0.995, 1.005, 1.01, 1.015, 1.02, 1.03, 1.04])
ROUNDING = 1e-9  # relative margin against float rounding in the priced sums


def price_grid(chain: MenuChain) -> np.ndarray:
    """Prices (seconds per byte) spanning every choice's seconds saved per byte held."""
    ratios = []
    for i in range(chain.n):
        for _name, h, r, _w in chain.choices[i]:
            held = h + chain.o[i]
            if chain.fwd[i] > r and held > 0:
                ratios.append((chain.fwd[i] - r) / held)
    if not ratios:
        return np.zeros(1)
    return np.concatenate(([0.0], np.geomspace(min(ratios) / 4, max(ratios) * 4, PRICES)))


class MenuBound:
    """`F` and `Z` of the NOTE for every node index, on a set of prices."""

    def __init__(self, chain: MenuChain, tables: list[tuple], room: int) -> None:
        self.chain, self.room = chain, room
        self.z = _least_without_op(tables)
        self.prices = price_grid(chain)
        self.f = _priced(tables, self.z, self.prices, _shifts(chain))
        self.margin = self._margin()

    def best_price(self) -> float:
        """The price of the grid whose bound is highest at the root (no bytes held)."""
        return float(self.prices[int(np.argmax(-self.room * self.prices + self.f[0]))])

    def refine(self, tables: list[tuple]) -> MenuBound:
        """This bound with `FINE` prices around `best_price`, then `FINER` around the best
        of those, their `F` (and `Z`) computed on `tables`: a subgraph holding every plan
        the caller's caps let through (`menu_graph.restrict`; NOTE, prices)."""
        out = object.__new__(MenuBound)
        out.chain, out.room = self.chain, self.room
        out.z = np.maximum(self.z, _least_without_op(tables))
        out.prices, out.f = self.prices, self.f
        for multiples in (FINE, FINER):
            best = out.best_price()
            fine = best * multiples if best > 0 else np.zeros(0)
            out.prices = np.concatenate((out.prices, fine))
            out.f = np.concatenate((out.f, _priced(tables, out.z, fine)), axis=1)
        out.margin = out._margin()
        return out

    def _margin(self) -> float:
        # the priced sums reach about the top price times the room, plus every forward
        top = float(self.prices.max())
        return ROUNDING * (1.0 + top * max(self.room, 0) + sum(self.chain.fwd))

    def root(self) -> float:
        """The bound at the empty plan (no bytes held): the least seconds any plan adds."""
        return float(self.lower(0, np.zeros(1, dtype=np.int64))[0])

    def lower(self, x: int, held: np.ndarray) -> np.ndarray:
        """A lower bound on the seconds any completion from node `x` adds above `held` bytes."""
        priced = (held.astype(np.float64) - self.room)[:, None] * self.prices[None, :]
        return np.minimum(self.z[x], (priced + self.f[x][None, :]).max(axis=1))

    def lower_at(self, nodes: np.ndarray, held: np.ndarray) -> np.ndarray:
        """`lower` for pairs (node index, held bytes), one bound each."""
        priced = (held.astype(np.float64) - self.room)[:, None] * self.prices[None, :]
        return np.minimum(self.z[nodes], (priced + self.f[nodes]).max(axis=1))


def _least_without_op(tables: list[tuple]) -> np.ndarray:
    """`Z` of the NOTE per node index: the least seconds of a completion with no op."""
    z = np.full(len(tables), np.inf)
    for x in range(len(tables) - 1, -1, -1):
        target, _top, _held, extra, _after, cost = tables[x]
        if not len(target):
            continue
        final = target < 0
        zs = (extra + np.where(final, 0.0, z[np.where(final, 0, target)]))[cost <= NEG]
        if len(zs):
            z[x] = zs.min()
    return z


def _shifts(chain: MenuChain) -> tuple[np.ndarray, np.ndarray]:
    """Per node index, the node of its layer keeping the fewest bytes (`rep`) and how many
    more it keeps than that one (`shift`): see `_priced`."""
    rep, shift = [0], [0]
    for k in range(chain.n):
        kept = [h for _name, h, _r, _w in chain.choices[k]]
        first = len(rep)
        low = min(range(len(kept)), key=kept.__getitem__)
        rep += [first + low] * len(kept)
        shift += [h - kept[low] for h in kept]
    return np.array(rep, dtype=np.int64), np.array(shift, dtype=np.float64)


def _priced(
    tables: list[tuple],
    z: np.ndarray,
    prices: np.ndarray,
    shared: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """`F` of the NOTE per node index and price, one pass backwards over the edges.

    NOTE (`shared`: one pass per layer). An edge's `cost` and `held` carry
    the held bytes `h` of the kept layer's choice once (`menu_edges`' NOTE),
    and the edges of a choice are those of the layer's choice keeping the
    fewest bytes (`rep`) whose costs still fit with its larger `h` (the
    rows stop, and costs are dropped, by `... + h <= room`): a subset,
    shifted by `shift`. So `F` there is at least `F(rep) + price * shift`,
    which replaces it (a relaxation: the NOTE's proof runs on the larger
    edge set): one pass per layer, not per choice. Only on the whole graph:
    a subgraph of `menu_graph.restrict` keeps edges per node, not per layer.
    """
    f = np.full((len(tables), len(prices)), np.inf)
    if not len(prices):
        return f
    rep, shift = shared if shared is not None else (np.arange(len(tables)), None)
    others: dict[int, list[int]] = {}
    for x, r in enumerate(rep.tolist()):
        if r != x:
            others.setdefault(r, []).append(x)
    for x in range(len(tables) - 1, -1, -1):
        if rep[x] != x:  # set with its layer's representative (every choice from it)
            continue
        _price_node(tables, z, prices, f, x)
        if x in others:
            group = np.array(others[x], dtype=np.int64)
            f[group] = f[x][None, :] + np.outer(shift[group], prices)
    return f


def _price_node(tables, z, prices, f, x: int) -> None:
    target, _top, held, extra, _after, cost = tables[x]
    if not len(target):
        return
    final = target < 0
    op = cost > NEG
    inner = ~final
    best = np.full(len(prices), np.inf)
    if inner.any():  # one array of edges by prices, summed in place
        later = f[target[inner]]
        later += np.multiply.outer(held[inner].astype(np.float64), prices)
        later += extra[inner, None]
        np.minimum(best, later.min(axis=0), out=best)
    if op.any():
        z_next = np.where(final, 0.0, z[np.where(final, 0, target)])[op]
        here = np.multiply.outer(cost[op].astype(np.float64), prices)
        here += (extra[op] + z_next)[:, None]
        np.minimum(best, here.min(axis=0), out=best)
    f[x] = best
