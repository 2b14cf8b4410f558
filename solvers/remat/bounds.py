"""Upper bounds on what the rest of the chain can still keep: the DP's pruning test.

NOTE (the relaxation). From a kept layer `k` holding `H` below it, a
completion keeps layers `k_1 < ... < k_m` above `k`; its value is the
forward time they save, `sum fwd_{k_i}`. Of all its memory constraints
keep only the last segment's, `H + sum of held + c(k_m, L-1) <= cap`, and
let every far edge of `k` reach any top up to the last one whose growing
terms fit (`ChainModel.last_feasible_top`): a relaxation, so its optimum
bounds the true completion from above. Dualising the one constraint with a
price `lam >= 0` per byte gives, for every `lam`,

    completion(k, H) <= lam * (cap - H) + G_k(lam),
    G_k(lam) = max over completions of  sum fwd_{k_i} - lam * (sum held + c_last),

a longest-path DP with no resource at all, computed for a grid of prices at
once. Far edges of `k` share their `held` (`s_k + o_k`), so `G_k` takes the
maximum of `fwd_{t+1} + G_{t+1}` over a window of tops: an incremental
sparse table answers each window in O(1). A completion whose last segment
owns no op of positive duration has no last constraint; its value is
bounded separately (`N_k`, no price). Keeping the top layer ends a path
with a segment that owns nothing; there the constraint kept is the one
`F_{L-1}` implies, `H_{L-1} + p_{L-1} <= cap` (the op holds all of it).

This is the knapsack's Lagrangian bound, and its best price matters: the
bound is convex and piecewise linear in the price, so a coarse grid finds
the neighbourhood and the tangents either side of the grid's best locate
the minimum. On the synthetic chain at 1,000 layers a grid alone left
5.3 ms between bound and optimum, the tangents 1.0 ms (a third of one
layer's forward; 0.7 ms at 3,000 layers, 1.0 ms at 10,000), which is what
cuts the Pareto fronts to tens of labels there. Transformer chains keep a
gap of about half their largest layer's forward (the integrality gap of
a knapsack whose items are many and small), and fronts of hundreds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from solvers.remat.chain import NEG, ChainModel

PRICES = 24  # geometric grid of prices, plus 0
TWIN = 1e-7  # relative step of the twin price that measures the bound's slope
REFINE_SPAN = 1.05  # the second refinement's grid spans this factor each side
SHORT_CHAIN = 128  # chains this short skip the second refinement (a third of the bound's time)
# Multiples of the root's best price the labels are tested with: a label far
# from the optimum's path is cut by a price far from the root's (1,000-layer
# chain: 11 prices over 0.7-1.3 kept fronts of 72 labels, 5 over 0.99-1.01: 185).
LABEL_PRICES = np.array([0.7, 0.85, 0.93, 0.97, 0.99, 1.0, 1.01, 1.03, 1.07, 1.15, 1.3])
WORK_PER_SWEPT_NODE = 2e-5  # work units per node per sweep (see labels)
DIRECT_WINDOW = 64  # windows shorter than this are read row by row
EXPIRY_STRIDE = 512  # nodes swept between two looks at the caller's deadline


class BoundStopped(Exception):
    """The caller's limit came while the bound was being built (long chains: seconds)."""


def price_grid(model: ChainModel) -> np.ndarray:
    """Prices (seconds per byte) spanning every layer's forward per held byte."""
    held = model.base[1:].astype(np.float64)
    ok = (held > 0) & (model.fwd > 0)
    if not ok.any():
        return np.zeros(1)
    ratios = model.fwd[ok] / held[ok]
    return np.concatenate(([0.0], np.geomspace(ratios.min() / 4, ratios.max() * 4, PRICES)))


class _WindowMax:
    """Maximum of row vectors over index windows; rows are added from the top down.

    Short windows read the rows directly; long chains also keep a sparse
    table (level `p`, row `t`: the maximum of rows `t .. t + 2^p - 1`), so a
    window of any length costs two lookups.
    """

    def __init__(self, size: int, width: int) -> None:
        self.rows = np.full((size + 1, width), -np.inf)  # row `size`: padding
        self.levels = max(1, int(size).bit_length()) if size > DIRECT_WINDOW else 1
        self.table = np.full((self.levels, size + 1, width), -np.inf) if self.levels > 1 else None
        self.size = size

    def add(self, t: int, row: np.ndarray) -> None:
        """Set row `t`; every row above `t` must already be set."""
        self.rows[t] = row
        table = self.table
        if table is None:
            return
        table[0, t] = row
        top = self.size
        for p in range(1, self.levels):
            half = 1 << (p - 1)
            table[p, t] = np.maximum(
                np.maximum(row, table[p - 1, min(t + 1, top)]), table[p - 1, min(t + half, top)]
            )

    def query(self, lo: int, hi: int) -> np.ndarray:
        """Row-wise max over `lo .. hi` (inclusive; -inf rows when empty)."""
        if lo > hi:
            return self.rows[self.size]
        if self.table is None or hi - lo < DIRECT_WINDOW:
            return self.rows[lo : hi + 1].max(axis=0)
        p = (hi - lo + 1).bit_length() - 1
        return np.maximum(self.table[p, lo], self.table[p, hi - (1 << p) + 1])


class CompletionBound:
    """`bound(k, H)`: at most how much forward time the layers above kept layer `k` save.

    Built once per (profile, memory room) by one backward pass over the
    nodes. `window(k, t0)` bounds what any far edge of `k` with top `>= t0`
    can still reach (the search's stopping test).
    """

    def __init__(
        self,
        model: ChainModel,
        room: int,
        charge: Callable[[float], None] = lambda units: None,
        expired: Callable[[], bool] = lambda: False,
    ) -> None:
        self._charge = charge
        self._expired = expired  # checked while sweeping: raises BoundStopped
        self.n = model.n
        self.model = model
        self.room = room
        self.tmax = model.last_feasible_top(room)
        # The root's best price, found on a coarse grid and refined twice by the
        # tangents either side of it (the bound is convex and piecewise linear in
        # the price); the labels are tested with prices around it, and 0.
        best = self._refine(price_grid(model))
        if best > 0 and self.n > SHORT_CHAIN:  # short chains: fronts are small anyway
            best = self._refine(best * np.geomspace(1 / REFINE_SPAN, REFINE_SPAN, 9))
        self._sweep(np.concatenate(([0.0], best * LABEL_PRICES)) if best > 0 else np.zeros(1))
        self.use = np.arange(len(self.prices))
        self._prices = self.prices
        self._g = np.ascontiguousarray(self.g)
        # the price `reaches` tries first: the root's best (its multiple 1.0)
        self._center = 1 + int(np.argmin(np.abs(LABEL_PRICES - 1.0))) if best > 0 else 0
        self.grid = None  # `grid.GridBound`, once `optimum` adds it: `reaches` tests both

    def add_grid(self, grid) -> None:
        """Test labels against `grid` too (a `grid.GridBound` of the same model and room)."""
        self.grid = grid

    def _refine(self, prices: np.ndarray) -> float:
        """The price minimising the root bound, estimated from one sweep over `prices`.

        Each price is swept with a twin a hair above it, which gives the
        bound's slope there; the two tangents around the grid's best price
        cross at (or, with more pieces between, near) the minimum.
        """
        prices = prices[prices > 0]
        if len(prices) == 0:
            return 0.0
        self._sweep(np.concatenate((prices, prices * (1 + TWIN))))
        width = len(prices)
        value = self.room * self.prices + self.g[0]
        if not np.isfinite(value).all():
            return float(prices[0])
        f, up = value[:width], value[width:]
        slope = (up - f) / (prices * TWIN)
        i = int(np.argmin(f))
        j = i + 1 if slope[i] < 0 else i - 1
        if not 0 <= j < width or slope[i] == slope[j]:
            return float(prices[i])
        lo, hi = sorted((i, j))
        cross = (f[hi] - f[lo] + slope[lo] * prices[lo] - slope[hi] * prices[hi]) / (
            slope[lo] - slope[hi]
        )
        return float(min(max(cross, prices[lo]), prices[hi]))

    def _best_price(self) -> int:
        root = self.room * self.prices + self.g[0]
        return int(np.argmin(root)) if np.isfinite(root).any() else 0

    def _sweep(self, prices: np.ndarray) -> None:
        """`G` and `N` of every node for these prices: one pass from the top down."""
        model, room, n = self.model, self.room, self.n
        if self._expired():  # before the tables (10^5 layers: hundreds of MB, seconds)
            raise BoundStopped
        self._charge(n * WORK_PER_SWEPT_NODE)
        self.prices = prices
        width = len(prices)
        # rows: node index k + 1 (k = -1 .. n-1); the window's last column: N (no price)
        self.g = np.full((n + 1, width), -np.inf)
        self.free = np.full(n + 1, -np.inf)
        self._x = _WindowMax(max(n - 1, 1), width + 1)  # rows t = 0 .. n-2
        fwd = model.fwd
        for k in range(n - 1, -2, -1):
            if k % EXPIRY_STRIDE == 0 and self._expired():
                raise BoundStopped
            x = k + 1
            g = np.full(width, -np.inf)
            free = -np.inf
            if k <= n - 2 and model.near_cost[x] <= room:  # keep k+1 next
                g = np.maximum(g, fwd[k + 1] + self.g[k + 2] - prices * float(model.r_node[x]))
                free = max(free, fwd[k + 1] + self.free[k + 2])
            hi = min(int(self.tmax[x]), n - 2)
            if hi >= k + 1:  # a run, then a kept layer
                best = self._x.query(k + 1, hi)
                g = np.maximum(g, best[:width] - prices * float(model.base[x]))
                free = max(free, float(best[width]))
            if k == n - 1:
                # Keeping the top layer: its segment owns nothing, but F_{L-1} (when it
                # takes time) holds everything below plus its products.
                if model.pa[n - 1] > NEG:
                    g = np.maximum(g, -prices * float(model.pa[n - 1]))
                else:
                    free = max(free, 0.0)
            elif self.tmax[x] >= n - 1 and model.last_cost[x] <= room:  # a run to the top
                last = int(model.last_cost[x])
                if last > NEG:
                    g = np.maximum(g, -prices * float(last))
                else:
                    free = max(free, 0.0)
            self.g[x] = g
            self.free[x] = free
            if k >= 1:
                self._x.add(k - 1, np.append(fwd[k] + g, fwd[k] + free))

    def bound(self, x: int | np.ndarray, held: np.ndarray) -> np.ndarray:
        """Bound per label at node index `x` (`k + 1`; an array: one per label)."""
        slack = (self.room - held).astype(np.float64)
        priced = (slack[:, None] * self._prices[None, :] + self._g[x]).min(axis=1)
        lagrangian = np.maximum(priced, self.free[x])
        return lagrangian if self.grid is None else np.minimum(lagrangian, self.grid.at(x, held))

    def reaches(self, x, held: np.ndarray, value: np.ndarray, floor: float) -> np.ndarray:
        """Per label, whether `value + bound(x, held) >= floor` (the search's test).

        The same test as `bound`, staged: the root's best price alone cuts
        most labels (1,000-layer chain at 20%: nine in ten), so only the
        survivors pay for the full set of prices.
        """
        slack = (self.room - held).astype(np.float64)
        ok = value + slack * self._prices[self._center] + self._g[x, self._center] >= floor
        ok |= value + self.free[x] >= floor
        if ok.any():
            alive = np.flatnonzero(ok)
            xs = x if np.ndim(x) == 0 else x[alive]
            priced = (slack[alive, None] * self._prices[None, :] + self._g[xs]).min(axis=1)
            ok[alive] = value[alive] + np.maximum(priced, self.free[xs]) >= floor
        if self.grid is not None and ok.any():
            alive = np.flatnonzero(ok)
            xs = x if np.ndim(x) == 0 else x[alive]
            ok[alive] = value[alive] + self.grid.at(xs, held[alive]) >= floor
        return ok

    def window(self, k: int, t0: int, held: np.ndarray, value: np.ndarray) -> float:
        """The best total any label `(held, value)` of node `k` can reach through a
        far edge with a top in `t0 .. L-2` (a run, then a kept layer)."""
        hi = min(int(self.tmax[k + 1]), self.n - 2)
        if t0 > hi:
            return -np.inf
        best = self._x.query(t0, hi)
        width = len(self.prices)
        slack = (self.room - held - int(self.model.base[k + 1])).astype(np.float64)
        priced = (slack[:, None] * self._prices[None, :] + best[self.use]).min(axis=1)
        return float(np.max(value + np.maximum(priced, best[width])))

    def root(self) -> float:
        """The bound at the batch: no plan saves more forward time than this."""
        return float(self.bound(0, np.zeros(1, dtype=np.int64))[0])
