"""The relaxation's rows (`solvers.model.relaxation`, the PuLP reference) as HiGHS arrays.

`build_model` mirrors the PuLP reference row for row, options included
(cost model v3: per option of a layer's menu a keep and a swap column, after
the whole-layer columns); `solvers.model.relaxation_highs` caches and solves
what it builds. Building costs `BUILD_UNITS_PER_ROW` a row, the cold LP
`LP_UNITS_PER_ROW` a row (charged by the solver module, deterministic).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import highspy
import numpy as np

from solvers.model.relaxation_coefficients import (
    Coefficients,
    OptionCoefficients,
    window_starts,
)

# Building the rows and handing them to HiGHS (measured: about 40k rows a
# second on the reference machine, so ~1e-5 s a row, with room).
BUILD_UNITS_PER_ROW = 2e-5
# A cold LP solve, per row (fitted on chains of 50-2,000 layers, cold dual
# simplex, at `LP_UNITS_PER_ITERATION`-like rates; see bench_certificates).
LP_UNITS_PER_ROW = 4e-5
# ... and per option of a menu (its keep and swap columns): GPT-2's traced
# block with its 8-option menu repeated to 1,000 layers took 2.5 s CPU for a
# cold build and LP against 0.8 s for the same rows with whole layers only,
# about 2e-4 s an option (256 layers: 0.5 s against 0.4 s; charged alike).
LP_UNITS_PER_OPTION = 2e-4
# Rows every net's model has at least, per layer (the action sums, the
# time chains, the copy queues, the held prefix sums): lets a work limit
# refuse a model it cannot pay for before building it.
MIN_ROWS_PER_LAYER = 11
_INF = highspy.kHighsInf


@dataclass(frozen=True)
class Model:
    """The relaxation's arrays for one net; budgets set `mem_upper` via `capacity`."""

    coeffs: Coefficients
    lp: highspy.HighsLp
    integer_cols: np.ndarray  # the actions: 0 .. 3n-1 whole layers, then the options
    mem_rows: np.ndarray  # row indices of the memory checks
    mem_const: np.ndarray  # their fixed parts: upper bound = capacity - const

    @property
    def rows(self) -> int:
        return int(self.lp.num_row_)

    def build_units(self) -> float:
        return BUILD_UNITS_PER_ROW * self.rows

    def lp_units(self) -> float:
        return LP_UNITS_PER_ROW * self.rows + LP_UNITS_PER_OPTION * self.coeffs.option_count

    def memory_upper(self, capacity: float) -> np.ndarray:
        return capacity - self.mem_const


class _Rows:
    """Rows collected as CSR arrays."""

    def __init__(self) -> None:
        self.start = [0]
        self.index: list[int] = []
        self.value: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []

    def add(self, terms: dict[int, float], lower: float, upper: float) -> int:
        for col, val in terms.items():
            if val != 0:
                self.index.append(col)
                self.value.append(val)
        self.start.append(len(self.index))
        self.lower.append(lower)
        self.upper.append(upper)
        return len(self.lower) - 1


class OutOfTime(Exception):
    """The build passed the caller's deadline (wall clock only; a work limit is checked
    before building, from `MIN_ROWS_PER_LAYER`)."""


def build_model(c: Coefficients, deadline: float | None = None) -> Model:
    """The relaxation of `c` as HiGHS arrays, row for row what the PuLP reference builds.

    Raises `OutOfTime` past `deadline` (looked at every 256 layers)."""
    n = c.n

    def check(i: int) -> None:
        if deadline is not None and i % 256 == 0 and time.monotonic() >= deadline:
            raise OutOfTime

    keep, swap, rec = 0, n, 2 * n
    T = 3 * n
    W, U = T + 1, T + 1 + n
    X, H, D, K, S = (T + 1 + 2 * n + j * (n + 1) for j in range(5))
    first_option = T + 1 + 2 * n + 5 * (n + 1)
    # v3: per layer, per option of its menu, a keep column and a swap column.
    options: list[list[tuple[int, int, OptionCoefficients]]] = []
    cols = first_option
    for menu in c.options or ((),) * n:
        options.append([(cols + 2 * k, cols + 2 * k + 1, o) for k, o in enumerate(menu)])
        cols += 2 * len(menu)
    lower = [0.0] * cols
    upper = [1.0] * (3 * n) + [_INF] * (first_option - 3 * n) + [1.0] * (cols - first_option)

    def add(row: dict[int, float], col: int, val: float) -> None:
        row[col] = row.get(col, 0.0) + val

    def with_options(row: dict[int, float], i: int, keep_val, swap_val) -> dict[int, float]:
        """`row` plus layer i's option columns, each with `keep_val(o)` / `swap_val(o)`."""
        for kcol, scol, o in options[i]:
            add(row, kcol, keep_val(o))
            add(row, scol, swap_val(o))
        return row

    lower[T] = c.t_ideal
    for fixed in (W + 0, X + n, H + n, D + n, K + 0, S + 0):
        upper[fixed] = 0.0
    extra_cols: list[int] = []  # the still-held variables, appended after

    def new_col() -> int:
        extra_cols.append(cols + len(extra_cols))
        return extra_cols[-1]

    rows = _Rows()
    for i in range(n):
        row = {keep + i: 1.0, swap + i: 1.0, rec + i: 1.0}
        rows.add(with_options(row, i, lambda o: 1.0, lambda o: 1.0), 1.0, 1.0)
    for t in range(n - 1, -1, -1):
        if t > 0:
            rows.add({W + t: 1.0, W + t - 1: -1.0}, 0.0, _INF)
        if t < n - 1:
            rows.add({U + t: 1.0, U + t + 1: -1.0}, 0.0, _INF)
        row = {X + t: 1.0, X + t + 1: -1.0, rec + t: -c.f[t]}
        regen = with_options(row, t, lambda o: -o.recompute, lambda o: -o.recompute)
        rows.add(regen, 0.0, 0.0)
        rows.add({U + t: 1.0, X + t: -1.0}, 0.0, _INF)
    # The recompute run hanging below B_t (the reference's `hang`; none on long nets).
    hang: dict[int, int] = {}
    for t in range(1, n if c.hang_slope else 1):
        hang[t] = new_col()
        row = {hang[t]: 1.0, rec + t - 1: -c.f[t - 1]}
        if t > 1:
            row[hang[t - 1]] = -1.0
        rows.add(row, -_INF, 0.0)
        rows.add({hang[t]: 1.0, rec + t - 1: -c.f_end[t - 1]}, -_INF, 0.0)
        row = {U + 0: 1.0, U + t: -1.0, X + 0: -1.0, X + t: 1.0, hang[t]: 1.0}
        rows.add(row, 0.0, _INF)
    rows.add({T: 1.0, W + n - 1: -1.0, U + 0: -1.0}, c.forward_total + c.b_upto[n - 1], _INF)
    for t in range(n - 1, -1, -1):
        check(t)
        row = {H + t: 1.0, H + t + 1: -1.0, swap + t: -c.d_in[t]}
        rows.add(with_options(row, t, lambda o: 0.0, lambda o: -o.d_in), 0.0, 0.0)
        row = {D + t: 1.0, D + t + 1: -1.0, swap + t: -c.d_out[t]}
        rows.add(with_options(row, t, lambda o: 0.0, lambda o: -o.d_out), 0.0, 0.0)
        rows.add({U + t: 1.0, H + t: -1.0}, -(c.b_upto[n - 1] - c.b_upto[t]), _INF)
        rows.add({T: 1.0, W + t: -1.0, D + t: -1.0}, c.f_end[t - 1] if t else 0.0, _INF)
        row = {T: 1.0, W + t: -1.0, swap + t: -(c.d_out[t] + c.d_in[t])}
        both = with_options(row, t, lambda o: 0.0, lambda o: -(o.d_out + o.d_in))
        rows.add(both, c.f_end[t] + c.b_upto[t], _INF)
    for i in range(n):
        row = {K + i + 1: 1.0, K + i: -1.0, keep + i: -c.s[i]}
        rows.add(with_options(row, i, lambda o: -o.s, lambda o: 0.0), 0.0, 0.0)
    for i in range(n):
        row = {S + i + 1: 1.0, S + i: -1.0, swap + i: -c.s[i]}
        rows.add(with_options(row, i, lambda o: 0.0, lambda o: -o.s), 0.0, 0.0)

    mem_rows: list[int] = []
    mem_const: list[float] = []

    def held(top: int, rate: float, gap_terms) -> dict[int, float]:
        """The still-held variable's rows (see `relaxation._still_held`); {} if none."""
        if top <= 0 or not math.isfinite(rate):
            return {}
        var = new_col()
        for k in window_starts(top, n):
            const, terms = gap_terms(k)
            row = {var: 1.0, S + top: -1.0}
            row[S + k] = row.get(S + k, 0.0) + 1.0
            for col, val in terms.items():
                row[col] = row.get(col, 0.0) + rate * val
            rows.add(row, -rate * const, _INF)
        return {var: 1.0}

    for i in range(n):
        check(i)
        if c.has_fwd[i] and i > 0:

            def fwd_gap(k: int, i: int = i) -> tuple[float, dict[int, float]]:
                return c.f_end[i - 1] - c.f_end[k], {W + i: 1.0, W + k: -1.0}

            terms = held(i - 1, c.out_rate, fwd_gap)
            add(terms, K + i - 1, 1.0)
            add(terms, keep + i - 1, c.internals[i - 1])
            with_options(terms, i - 1, lambda o: o.internals, lambda o: 0.0)
            mem_rows.append(rows.add(terms, -_INF, 0.0))
            mem_const.append(c.out[i - 1] + c.fwd_fixed[i])
        if c.has_bwd[i]:

            def bwd_gap(k: int, i: int = i) -> tuple[float, dict[int, float]]:
                return c.b_upto[i] - c.b_upto[k], {U + k: 1.0, U + i: -1.0}

            def out_gap(k: int, i: int = i) -> tuple[float, dict[int, float]]:
                const = c.f_end[n - 1] - c.f_end[k] + c.b_upto[n - 1] - c.b_upto[i]
                return const, {W + n - 1: 1.0, W + k: -1.0, U + i: 1.0}

            terms = held(i, c.in_rate, bwd_gap)
            for col, val in held(i, c.out_rate, out_gap).items():
                add(terms, col, val)
            add(terms, K + i, 1.0)
            if c.counts_input_once[i]:
                out = -c.out[i - 1]
                for col in (keep + i - 1, swap + i - 1):
                    add(terms, col, out)
                with_options(terms, i - 1, lambda o, out=out: out, lambda o, out=out: out)
            if c.partial_input and c.partial_input[i]:
                x = c.partial_input[i]  # a partial B_i reads x_i
                with_options(terms, i, lambda o, x=x: x, lambda o, x=x: x)
            if i in hang and c.hang_slope[i] > 0:
                add(terms, hang[i], c.hang_slope[i])
            mem_rows.append(rows.add(terms, -_INF, 0.0))
            mem_const.append(c.backward_fixed[i])

    lp = highspy.HighsLp()
    total = cols + len(extra_cols)
    lp.num_col_ = total
    lp.num_row_ = len(rows.lower)
    cost = np.zeros(total)
    cost[T] = 1.0
    lp.col_cost_ = cost
    lp.col_lower_ = np.array(lower + [0.0] * len(extra_cols))
    lp.col_upper_ = np.array(upper + [_INF] * len(extra_cols))
    lp.row_lower_ = np.array(rows.lower)
    lp.row_upper_ = np.array(rows.upper)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = total
    lp.a_matrix_.num_row_ = len(rows.lower)
    lp.a_matrix_.start_ = np.array(rows.start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(rows.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(rows.value)
    integer = np.array([*range(3 * n), *range(first_option, cols)], dtype=np.int32)
    return Model(c, lp, integer, np.array(mem_rows, dtype=np.int32), np.array(mem_const))
