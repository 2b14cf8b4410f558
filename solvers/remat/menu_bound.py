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
"""

from __future__ import annotations

import numpy as np

from solvers.remat.menus import NEG, MenuChain

PRICES = 32  # geometric grid of prices, plus 0
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
    """`F` and `Z` of the NOTE for every node index, on one grid of prices."""

    def __init__(self, chain: MenuChain, tables: list[tuple], room: int) -> None:
        prices = self.prices = price_grid(chain)
        self.room = room
        count = len(tables)
        f = self.f = np.full((count, len(prices)), np.inf)
        z = self.z = np.full(count, np.inf)
        for x in range(count - 1, -1, -1):
            target, _top, held, extra, _after, cost = tables[x]
            if not len(target):
                continue
            final = target < 0
            op = cost > NEG
            costs = cost.astype(np.float64)
            inner = ~final
            z_next = np.where(final, 0.0, z[np.where(final, 0, target)])
            zs = (extra + z_next)[~op]
            if len(zs):
                z[x] = zs.min()
            best = np.full(len(prices), np.inf)
            if inner.any():
                later = extra[inner, None] + np.outer(held[inner], prices) + f[target[inner]]
                best = np.minimum(best, later.min(axis=0))
            if op.any():
                here = extra[op, None] + np.outer(costs[op], prices) + z_next[op, None]
                best = np.minimum(best, here.min(axis=0))
            f[x] = best
        # the priced sums reach about the top price times the room, plus every forward
        self.margin = ROUNDING * (1.0 + float(prices[-1]) * max(room, 0) + sum(chain.fwd))

    def lower(self, x: int, held: np.ndarray) -> np.ndarray:
        """A lower bound on the seconds any completion from node `x` adds above `held` bytes."""
        priced = (held.astype(np.float64) - self.room)[:, None] * self.prices[None, :]
        return np.minimum(self.z[x], (priced + self.f[x][None, :]).max(axis=1))

    def lower_at(self, nodes: np.ndarray, held: np.ndarray) -> np.ndarray:
        """`lower` for pairs (node index, held bytes), one bound each."""
        priced = (held.astype(np.float64) - self.room)[:, None] * self.prices[None, :]
        return np.minimum(self.z[nodes], (priced + self.f[nodes]).max(axis=1))
