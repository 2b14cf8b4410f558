"""Rotor's dynamic program in Python, with and without nested recomputation (benchmarks only).

Rotor (Beaumont et al. 2019, as Rockmate 2.0's `solver.c` computes it)
solves `opt[m][a][b]`: the fastest schedule of stages `a .. b` with `m`
memory units, where stage `b` may be the loss. Either stage `a` runs its
forward keeping everything its backward needs (`x̄`, "Fe") and the rest is
solved with that much less memory, or `x_a` is checkpointed, stages `a ..
j-1` run forward without keeping anything ("Fn"), `j .. b` is solved with
`x_j` held, and then `a .. j-1` is solved again with the full memory. That
last subproblem may itself checkpoint and recompute: recomputation *nests*,
a layer may be recomputed more than once.

`rotor_recursive(chain, m, nested=True)` transcribes that recursion (it
must agree with Rockmate's C solver; the tests check it). With
`nested=False` a subproblem being recomputed (`b` below the loss) may only
run "Fe" throughout: every layer is regenerated at most once, the space
planopt's cost model allows. `rotor_flat(chain, m)` computes the same
non-nested optimum vectorised over memory, for chains too long to recurse.
Both use Rotor's memory model (whole units; the chain's input and output
resident), so the pair isolates what nesting buys.
"""

from __future__ import annotations

import math
import sys
from functools import cache

import numpy as np

INF = math.inf


def _arrays(chain):
    fw = [row[0] for row in chain.fw]
    bw = [row[0] for row in chain.bw]
    cbw = [row[0] for row in chain.cbw]
    fwd_tmp = [row[0] for row in chain.fwd_tmp]
    bwd_tmp = [row[0] for row in chain.bwd_tmp]
    return fw, bw, list(chain.cw), cbw, fwd_tmp, bwd_tmp, list(chain.ff_fwd_tmp), list(chain.ff_fw)


def _mmin(cw, ff_tmp, a: int, b: int) -> int:
    """The least memory to run `a .. b` forward without keeping anything (C: `mmin`)."""
    need = cw[a + 1] + ff_tmp[a]
    for j in range(a + 1, b):
        need = max(need, cw[j] + cw[j + 1] + ff_tmp[j])
    return need + cw[b + 1]


def rotor_recursive(chain, slots: int, *, nested: bool = True) -> float:
    """Rotor's optimum for `slots` units (INF when nothing fits), by its own recursion."""
    fw, bw, cw, cbw, fwd_tmp, bwd_tmp, ff_tmp, ff_fw = _arrays(chain)
    ln = chain.ln
    prefix = np.concatenate(([0.0], np.cumsum(ff_fw)))
    sys.setrecursionlimit(max(10_000, 20 * ln))

    @cache
    def opt(m: int, a: int, b: int) -> float:
        if a == b:
            limit = cw[a] + cbw[a + 1] + max(fwd_tmp[a], bwd_tmp[a])
            return fw[a] + bw[a] if m >= limit else INF
        if m < _mmin(cw, ff_tmp, a, b):
            return INF
        best = INF
        if nested or b == ln:  # checkpoint x_a, run forward to j, come back later
            for j in range(a + 1, b + 1):
                if m >= cw[j]:
                    value = prefix[j] - prefix[a] + opt(m - cw[j], j, b) + opt(m, a, j - 1)
                    best = min(best, value)
        limit = max(
            cbw[a + 1], cw[a + 1] + cbw[a + 1] + fwd_tmp[a], cw[a] + cbw[a + 1] + bwd_tmp[a]
        )
        if m >= limit:  # keep what the backward needs and go on
            best = min(best, fw[a] + bw[a] + opt(m - cbw[a + 1], a + 1, b))
        return best

    try:
        return opt(slots, 0, ln)
    finally:
        opt.cache_clear()


def _keep_all_need(cw, cbw, fwd_tmp, bwd_tmp, ff_tmp, b: int) -> np.ndarray:
    """`need[a]`: the least memory to solve `a .. b` keeping everything (Fe throughout)."""
    need = np.zeros(b + 1, dtype=np.int64)
    need[b] = cw[b] + cbw[b + 1] + max(fwd_tmp[b], bwd_tmp[b])
    run_max = -1  # max over j in (a, b) of cw[j] + cw[j+1] + ff_tmp[j]
    for a in range(b - 1, -1, -1):
        if a + 1 < b:
            run_max = max(run_max, cw[a + 1] + cw[a + 2] + ff_tmp[a + 1])
        mmin = max(cw[a + 1] + ff_tmp[a], run_max) + cw[b + 1]
        limit = max(
            cbw[a + 1], cw[a + 1] + cbw[a + 1] + fwd_tmp[a], cw[a] + cbw[a + 1] + bwd_tmp[a]
        )
        need[a] = max(mmin, limit, cbw[a + 1] + need[a + 1])
    return need


def rotor_flat(chain, slots: int) -> float:
    """The non-nested optimum (`rotor_recursive(..., nested=False)`), vectorised over memory."""
    return float(rotor_flat_curve(chain, slots)[slots])


def keep_all_slots(chain) -> int:
    """The least memory at which Rotor's schedule keeping everything fits."""
    _, _, cw, cbw, fwd_tmp, bwd_tmp, ff_tmp, _ = _arrays(chain)
    return int(_keep_all_need(cw, cbw, fwd_tmp, bwd_tmp, ff_tmp, chain.ln)[0])


def rotor_flat_curve(chain, slots: int) -> np.ndarray:
    """The non-nested optimum at every memory `0 .. slots` (INF where nothing fits)."""
    fw, bw, cw, cbw, fwd_tmp, bwd_tmp, ff_tmp, ff_fw = _arrays(chain)
    ln = chain.ln
    prefix = np.concatenate(([0.0], np.cumsum(ff_fw)))
    steps = np.concatenate(([0.0], np.cumsum(np.array(fw) + np.array(bw))))
    memory = np.arange(slots + 1)
    top = [None] * (ln + 1)  # top[a][m] = opt(m, a, ln) without nesting
    top[ln] = np.where(memory >= cw[ln] + cbw[ln + 1] + max(fwd_tmp[ln], bwd_tmp[ln]), 0.0, INF)
    # keep-everything costs of every recomputed segment a .. e (e < ln)
    needs = {e: _keep_all_need(cw, cbw, fwd_tmp, bwd_tmp, ff_tmp, e) for e in range(ln)}
    for a in range(ln - 1, -1, -1):
        best = np.full(slots + 1, INF)
        limit = max(
            cbw[a + 1], cw[a + 1] + cbw[a + 1] + fwd_tmp[a], cw[a] + cbw[a + 1] + bwd_tmp[a]
        )
        shift = cbw[a + 1]
        if shift <= slots:
            kept = np.full(slots + 1, INF)
            kept[shift:] = fw[a] + bw[a] + top[a + 1][: slots + 1 - shift]
            best = np.minimum(best, np.where(memory >= limit, kept, INF))
        for j in range(a + 1, ln + 1):
            if cw[j] > slots:
                continue
            later = np.full(slots + 1, INF)
            later[cw[j] :] = top[j][: slots + 1 - cw[j]]
            segment = steps[j] - steps[a]  # a .. j-1 again, keeping everything
            value = prefix[j] - prefix[a] + segment + later
            best = np.minimum(best, np.where(memory >= needs[j - 1][a], value, INF))
        best = np.where(memory >= _mmin(cw, ff_tmp, a, ln), best, INF)
        top[a] = best
    return top[0]
