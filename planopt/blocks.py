"""Repeated blocks in a layer chain: `find_blocks(profile)`.

Deep nets repeat themselves (transformer blocks, ResNet bottlenecks). A
block-aware planner solves one copy and reuses the answer, so it needs to
know where the copies are. This module only finds them; planning is in
`solvers.blocks`.

How layers are compared: each layer gets a key. A layer with a `signature`
is keyed by it (the spec: equal signatures mean the same layer). A layer
without one is keyed by its numbers (times, every size, and the two
`saves_*` flags as 0/1): layers whose numbers all agree within a
relative tolerance `rtol` share a key (measured profiles of one block vary
a little from copy to copy).

NOTE (clustering numbers): "within tolerance" is not transitive, so keys
are assigned in one pass in layer order: a layer joins the existing cluster
whose running mean it is closest to (largest relative deviation over its
numbers), when that deviation is at most `rtol`; else it starts a new
cluster. Comparing with the mean rather than with one member halves the
spread that noise adds; the pass is deterministic.

NOTE (chance matches): in long random chains two neighbouring layers agree
within 5% by chance now and then (19 of 400 `random_chain(..., family=
"uniform")` chains of 200 and 1,000 layers had such a pair), two neighbours
in a row practically never. So a repeat found by numbers alone must cover at
least `min_numeric_layers` (default 4) layers; one whose every layer is
keyed by its signature needs only `min_layers` (default 2).

How repeats are found: a *tandem repeat* is a run of `repeats >= 2` equal
consecutive copies of a key string of length `period`. The chain is
segmented greedily: the tandem repeat covering the most layers (ties: the
shorter period, then the earlier start) is taken, and the parts left and
right of it are searched again, recursively. So several distinct repeated
blocks in sequence (ResNet's four stages) are each found; what no repeat
covers is irregular (prefix, suffix, the gaps between stages).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planopt.bundled import resolve_profile
from planopt.errors import InvalidProfileError
from planopt.profile import Profile

DEFAULT_RTOL = 0.05
STOP_STRIDE = 256  # layers (or periods) between two looks at a caller's `stop`


@dataclass(frozen=True)
class Repeat:
    """`repeats` consecutive copies of a block of `period` layers starting at `start`."""

    start: int
    period: int
    repeats: int

    @property
    def stop(self) -> int:
        """One past the last layer of the last copy."""
        return self.start + self.period * self.repeats

    def copy(self, r: int) -> range:
        """Layer indices of copy `r` (0-based)."""
        if not 0 <= r < self.repeats:
            raise IndexError(f"copy must be in [0, {self.repeats - 1}], got {r}")
        first = self.start + r * self.period
        return range(first, first + self.period)

    def layers(self) -> range:
        return range(self.start, self.stop)


@dataclass(frozen=True)
class BlockStructure:
    """The repeated blocks of a chain of `n` layers, in chain order (non-overlapping).

    `keys[i]` is the comparison key of layer `i` (equal keys: same layer).
    """

    n: int
    repeats: tuple[Repeat, ...]
    keys: tuple[int, ...]

    @property
    def found(self) -> bool:
        return bool(self.repeats)

    @property
    def prefix(self) -> range:
        """The irregular layers before the first repeat (the whole chain when none)."""
        return range(0, self.repeats[0].start if self.repeats else self.n)

    @property
    def suffix(self) -> range:
        """The irregular layers after the last repeat (empty when none)."""
        return range(self.repeats[-1].stop if self.repeats else self.n, self.n)

    def irregular(self) -> list[range]:
        """Every maximal run of layers no repeat covers (prefix, gaps, suffix)."""
        out, at = [], 0
        for rep in self.repeats:
            if rep.start > at:
                out.append(range(at, rep.start))
            at = rep.stop
        if at < self.n:
            out.append(range(at, self.n))
        return out

    @property
    def covered(self) -> int:
        """How many layers lie in some copy of some repeated block."""
        return sum(rep.period * rep.repeats for rep in self.repeats)

    def summary(self) -> str:
        """`"1 + 48x13 + 3"`: irregular runs and repeats, in chain order."""
        parts, at = [], 0
        for rep in self.repeats:
            if rep.start > at:
                parts.append(str(rep.start - at))
            parts.append(f"{rep.repeats}x{rep.period}")
            at = rep.stop
        if at < self.n:
            parts.append(str(self.n - at))
        return " + ".join(parts) if parts else "0"


def layer_keys(
    profile: Profile,
    *,
    rtol: float = DEFAULT_RTOL,
    use_signatures: bool = True,
    stop: Callable[[], bool] | None = None,
) -> tuple[int, ...]:
    """A small integer per layer; equal integers mean "same layer" (see the module note).

    `stop`, looked at every `STOP_STRIDE` layers: once it says so, every layer
    not yet compared gets a key of its own (so it joins no repeat).
    """
    rtol = _check_rtol(rtol)
    keys: list[int] = []
    by_signature: dict[str, int] = {}
    clusters = _Clusters(rtol)
    next_key = 0
    for i, layer in enumerate(profile.layers):
        if stop is not None and i % STOP_STRIDE == 0 and stop():
            rest = len(profile.layers) - i
            return (*keys, *range(next_key, next_key + rest))
        if use_signatures and layer.signature is not None:
            if layer.signature not in by_signature:
                by_signature[layer.signature] = next_key
                next_key += 1
            keys.append(by_signature[layer.signature])
            continue
        key = clusters.join(_numbers(layer), next_key)
        if key == next_key:
            next_key += 1
        keys.append(key)
    return tuple(keys)


class _Clusters:
    """Numeric clusters by running mean; `join` finds the closest within `rtol`.

    NOTE (speed): a layer can only join a cluster whose mean forward time and
    mean output size are each within `rtol` of its own (both are among the
    numbers whose largest relative deviation must be at most `rtol`). So
    clusters sit in buckets of their means' logarithms, one `rtol` wide, and
    a layer compares itself, in one vectorised step, only with the clusters
    of its bucket and the neighbouring ones. The choice is the same as
    comparing with every cluster (the closest, ties to the first made):
    20,000 layers took 55 s that way, 100,000 now take a few seconds.
    """

    _AXES = (0, 2)  # fwd, out_bytes: the numbers the buckets use

    def __init__(self, rtol: float) -> None:
        self.rtol = rtol
        self.width = -math.log1p(-rtol) if rtol > 0 else 0.0
        self.sums = np.zeros((16, len(_numbers_fields())))
        self.counts = np.zeros(16)
        self.keys: list[int] = []
        self.where: list[tuple] = []  # each cluster's bucket
        self.buckets: dict[tuple, list[int]] = {}

    def _cell(self, value: float) -> float:
        if value <= 0 or self.width == 0:
            return value  # exact: zero, or every value when rtol is 0
        return float(math.floor(math.log(value) / self.width))

    def _bucket(self, x: np.ndarray) -> tuple:
        return tuple(self._cell(float(x[a])) for a in self._AXES)

    def _neighbours(self, bucket: tuple) -> list[tuple]:
        steps = [
            (c,)
            if isinstance(c, float) and (self.width == 0 or not c.is_integer())
            else (c - 1, c, c + 1)
            for c in bucket
        ]
        return [tuple(cell) for cell in itertools.product(*steps)]

    def join(self, x: np.ndarray, new_key: int) -> int:
        """The key of the cluster `x` joins (`new_key` when it starts one)."""
        home = self._bucket(x)
        ids_list = [c for b in self._neighbours(home) for c in self.buckets.get(b, ())]
        if ids_list:
            ids = np.array(ids_list, dtype=np.int64)
            means = self.sums[ids] / self.counts[ids][:, None]
            scale = np.maximum(np.abs(means), np.abs(x))
            safe = np.where(scale > 0, scale, 1.0)
            worst = np.where(scale > 0, np.abs(means - x) / safe, 0.0).max(axis=1)
            pick = int(np.lexsort((ids, worst))[0])  # closest, then the first made
            if worst[pick] <= self.rtol:
                best = int(ids[pick])
                self.sums[best] += x
                self.counts[best] += 1
                moved = self._bucket(self.sums[best] / self.counts[best])
                if moved != self.where[best]:
                    self.buckets[self.where[best]].remove(best)
                    self.buckets.setdefault(moved, []).append(best)
                    self.where[best] = moved
                return self.keys[best]
        c = len(self.keys)
        if c == self.sums.shape[0]:
            self.sums = np.concatenate((self.sums, np.zeros_like(self.sums)))
            self.counts = np.concatenate((self.counts, np.zeros_like(self.counts)))
        self.sums[c] = x
        self.counts[c] = 1
        self.keys.append(new_key)
        self.where.append(home)
        self.buckets.setdefault(home, []).append(c)
        return new_key


def _numbers_fields() -> tuple[str, ...]:
    return (
        "fwd",
        "bwd",
        "out_bytes",
        "saved_bytes",
        "input_grad_bytes",
        "param_grad_bytes",
        "fwd_work_bytes",
        "bwd_work_bytes",
        "saves_input",
        "saves_output",
    )


def _numbers(layer) -> np.ndarray:
    """Every number of the layer the cost model reads (flags as 0/1: never within rtol)."""
    return np.array([float(getattr(layer, name)) for name in _numbers_fields()])


def _best_repeat(
    keys: np.ndarray,
    numeric: np.ndarray,
    lo: int,
    hi: int,
    min_layers: int,
    min_numeric: int,
    stop: Callable[[], bool] | None = None,
) -> Repeat | None:
    """The tandem repeat in `keys[lo:hi]` covering most layers (ties: shorter period, earlier).

    `numeric[i]`: layer `i` is keyed by its numbers (then the repeat must
    cover `min_numeric` layers). Once `stop` says so, the best found so far.
    """
    best: Repeat | None = None
    best_cover = 0
    seg = keys[lo:hi]
    m = hi - lo
    for p in range(1, m // 2 + 1):
        if m // p * p <= best_cover:
            break  # no repeat of this period or longer can cover more
        if stop is not None and p % STOP_STRIDE == 0 and stop():
            break
        eq = seg[:-p] == seg[p:]
        if not eq.any():
            continue
        # maximal runs of True in eq: a run [s, e) means seg[s : e + p] has period p
        padded = np.concatenate(([False], eq, [False]))
        edges = np.flatnonzero(padded[1:] != padded[:-1])
        for s, e in zip(edges[0::2], edges[1::2], strict=True):
            copies = (int(e - s) + p) // p
            cover = copies * p
            first = lo + int(s)
            need = min_numeric if numeric[first : first + cover].any() else min_layers
            if copies >= 2 and cover >= need and cover > best_cover:
                best = Repeat(lo + int(s), p, copies)
                best_cover = cover
    return best


def find_blocks(
    profile: Profile | str,
    *,
    rtol: float = DEFAULT_RTOL,
    use_signatures: bool = True,
    min_layers: int = 2,
    min_numeric_layers: int = 4,
    stop: Callable[[], bool] | None = None,
) -> BlockStructure:
    """The repeated blocks of `profile` and the irregular layers around them.

    `rtol`: relative tolerance for layers compared by their numbers (those
    without a signature, or all of them with `use_signatures=False`).
    `min_layers`: a repeat must cover at least this many layers, and
    `min_numeric_layers` when some of its layers are compared by numbers
    (see the module note on chance matches). `stop` (a solver's deadline,
    looked at now and then): once it says so, the repeats found so far.
    """
    profile = resolve_profile(profile)
    for what, value in (("min_layers", min_layers), ("min_numeric_layers", min_numeric_layers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise InvalidProfileError(f"find_blocks: {what} must be an integer >= 2, got {value!r}")
    keys = layer_keys(profile, rtol=rtol, use_signatures=use_signatures, stop=stop)
    arr = np.array(keys, dtype=np.int64)
    numeric = np.array(
        [not (use_signatures and layer.signature is not None) for layer in profile.layers]
    )
    found: list[Repeat] = []
    todo = [(0, len(keys))]
    while todo:
        lo, hi = todo.pop()
        if hi - lo < min_layers:
            continue
        if stop is not None and stop():
            break
        rep = _best_repeat(arr, numeric, lo, hi, min_layers, min_numeric_layers, stop)
        if rep is None:
            continue
        found.append(rep)
        todo += [(lo, rep.start), (rep.stop, hi)]
    found.sort(key=lambda r: r.start)
    return BlockStructure(len(keys), tuple(found), keys)


def _check_rtol(rtol: float) -> float:
    if (
        isinstance(rtol, bool)
        or not isinstance(rtol, int | float)
        or not (math.isfinite(rtol) and 0 <= rtol < 1)
    ):
        raise InvalidProfileError(f"find_blocks: rtol must be a number in [0, 1), got {rtol!r}")
    return float(rtol)
