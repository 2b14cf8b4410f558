"""A second bound on what the layers above a kept layer save: the DP on a memory grid.

NOTE (why a second bound). `bounds`' Lagrangian relaxation keeps only the
last segment's memory constraint. On the synthetic chains that one binds
and the bound is within a fraction of one forward of the optimum; on
transformer chains the constraints of segments in the middle bind (an
attention's scratch), and the bound lay 22-79% above the optimum on the
bundled nets (gpt-24 at 30%: 0.0256 s against 0.0143 s), so the fronts
hold hundreds of labels and a target one forward below the bound misses.

This bound keeps every segment's constraint and gives up exactness in the
bytes instead: `F[x][b]` is the most forward time a completion from node
index `x` can save when the bytes held below are `b * unit` (a grid of
`cells` steps over the room), every edge's constraint `H + c <= room`
checked at the grid point and every `held` added rounded down. Along any
completion the grid's `H` stays at or below the true one (induction: it
starts there and each step adds no more), so every edge the true
completion takes is allowed on the grid: a relaxation, so `F[x][H //
unit]` bounds the completion of a label holding `H`. Its cost is one cell
per (edge, grid point), so the search builds it only after the first
target missed or the first search spent a few times what the grid costs
(`optimum`). Measured (4,096 steps): 0.8-3% above the optimum on the
bundled transformer nets, built in 0.04-0.4 s.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from solvers.remat.bounds import BoundStopped
from solvers.remat.chain import ChainModel

STEPS = 4096  # grid points over the room (fewer where the cells would pass the caps)
# A grid coarser than this, or than two steps a layer, is not built: every kept
# layer may round its bytes down by up to a step, and with fewer steps than
# layers the rounding can add up to the whole room (the synthetic chain of
# 1,000 layers: 1,024 steps left the bound 12% above the optimum, where the
# Lagrangian one is within 0.1%).
MIN_STEPS = 256
STEPS_PER_LAYER = 2
MAX_CELLS = 500_000_000  # (far edge, grid point) pairs one bound may cost
MAX_TABLE = 32_000_000  # entries of `F` (8 bytes each)
TOPS_PER_BLOCK = 256  # far edges costed at once (bounds the temporary arrays)
# Work units per cell. Measured 0.9 ns a cell on a quiet machine; the label
# search's units (`labels`), fitted on a loaded one, count about twice its
# quiet seconds, and `optimum` weighs the first search's work against the
# grid's cost in one unit, so the grid's is counted the same way.
WORK_PER_CELL = 2e-9


def far_edges(model: ChainModel, tmax: np.ndarray) -> int:
    """How many far edges the search may take: the sum of every node's window of tops."""
    n = model.n
    hi = np.minimum(tmax[: n + 1], n - 2)
    return int(np.maximum(hi - np.arange(-1, n), 0).sum())


def grid_steps(model: ChainModel, tmax: np.ndarray) -> int:
    """The grid's steps under the caps (0: too coarse to be worth building)."""
    edges = max(far_edges(model, tmax) + model.n + 1, 1)
    steps = min(STEPS, MAX_CELLS // edges, MAX_TABLE // (model.n + 1) - 1)
    return steps if steps >= max(MIN_STEPS, STEPS_PER_LAYER * model.n) else 0


class GridBound:
    """`F[x][b]` (see the module note), built by one pass from the top down."""

    def __init__(
        self,
        model: ChainModel,
        room: int,
        tmax: np.ndarray,
        steps: int,
        charge: Callable[[float], None] = lambda units: None,
        expired: Callable[[], bool] = lambda: False,
    ) -> None:
        n = model.n
        self.unit = unit = room // steps + 1  # steps * unit > room: the grid covers it
        self.steps = steps
        grid = np.arange(steps + 1, dtype=np.int64) * unit
        free = room - grid  # what an edge's cost may be at each grid point
        fwd = model.fwd
        f = np.full((n + 1, steps + 1), -np.inf)
        self._buffer = np.empty((TOPS_PER_BLOCK, steps + 1))
        top = int(model.pa[n - 1])  # F_{L-1} holds everything below it and its products
        f[n] = np.where(top <= free, 0.0, -np.inf)
        for x in range(n - 1, -1, -1):
            if x % 64 == 0 and expired():
                raise BoundStopped
            k = x - 1
            row = np.full(steps + 1, -np.inf)
            if tmax[x] >= n - 1:  # a run to the top
                row[int(model.last_cost[x]) <= free] = 0.0
            kept = fwd[x] + f[x + 1, self._shifted(int(model.r_node[x]))]  # keep layer x next
            np.maximum(row, np.where(int(model.near_cost[x]) <= free, kept, -np.inf), out=row)
            last = min(int(tmax[x]), n - 2)
            if last >= k + 1:  # a run k+1 .. t, then keep t+1
                shift = int(model.base[x]) // unit
                for t0 in range(k + 1, last + 1, TOPS_PER_BLOCK):
                    t1 = min(t0 + TOPS_PER_BLOCK - 1, last)
                    self._far_block(
                        row,
                        f,
                        fwd[t0 + 1 : t1 + 2],
                        t0,
                        t1,
                        shift,
                        model.far_costs(k, t0, t1),
                        room,
                    )
                    charge((t1 - t0 + 1) * (steps + 1) * WORK_PER_CELL)
            charge((steps + 1) * WORK_PER_CELL)  # the near edge and the run to the top
            f[x] = row
        self.f = f

    def _far_block(self, row, f, saved, t0: int, t1: int, shift: int, costs, room: int) -> None:
        """`row = max(row, saved_t + F[t+2] at the shifted point)` over tops `t0 .. t1`,
        each only at the grid points where its edge's cost fits."""
        steps = self.steps
        points = (room - costs) // self.unit  # the last grid point each edge fits at (< 0: none)
        if points.max() < 0:
            return
        below = f[t0 + 2 : t1 + 3]  # F at each top's node, read at the shifted point
        reach = self._buffer[: t1 - t0 + 1]  # one buffer: fresh arrays cost page faults
        saved = saved[:, None]
        if shift <= steps:
            np.add(below[:, shift:], saved, out=reach[:, : steps + 1 - shift])
        np.add(below[:, steps : steps + 1], saved, out=reach[:, max(steps + 1 - shift, 0) :])
        for i, point in enumerate(points.tolist()):
            if point < steps:
                reach[i, max(point + 1, 0) :] = -np.inf
        np.maximum(row, reach.max(axis=0), out=row)

    def _shifted(self, held: int) -> np.ndarray:
        """Grid point reached from each point by adding `held`, rounded down (capped)."""
        return np.minimum(np.arange(self.steps + 1) + held // self.unit, self.steps)

    def at(self, x, held: np.ndarray) -> np.ndarray:
        """The bound per label at node index `x` (an int, or an array: one per label)."""
        return self.f[x, np.minimum(held // self.unit, self.steps)]

    def root(self) -> float:
        return float(self.f[0, 0])


def cost_of(model: ChainModel, tmax: np.ndarray, steps: int) -> float:
    """Work units a grid of `steps` costs to build (see `WORK_PER_CELL`)."""
    return (far_edges(model, tmax) + model.n + 1) * (steps + 1) * WORK_PER_CELL
