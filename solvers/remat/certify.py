"""What the DP claims about a plan, in a form a test can check without the DP.

A `Certificate` lists the plan's segments with the bytes held below each
and each segment's largest op above that (`chain`'s theorem), the peak they
add up to, and the makespan the plan's recomputations give. Its claims are
checked against `planopt.simulate` (peak and makespan) and, on small
chains, against enumeration (the optimum and the space's minimum budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from solvers.remat.chain import NEG, ChainModel
from solvers.remat.pychain import PyChain


@dataclass(frozen=True)
class Segment:
    """Kept layer `kept` (-1: the batch), the run `kept+1 .. top` above it, `held`
    bytes below it and `cost` bytes its largest op of positive duration adds
    (None: it owns no such op)."""

    kept: int
    top: int
    held: int
    cost: int | None

    @property
    def peak_above_static(self) -> int | None:
        return None if self.cost is None else self.held + self.cost


@dataclass(frozen=True)
class Certificate:
    """A plan's decomposition: its segments, peak, makespan and the optimum's bound.

    `upper_saved` is the most forward time any recompute-only plan can save
    at this budget (the root bound, or the plan's own saving when proven);
    `min_budget` is the recompute-only space's minimum budget when it was
    computed (None otherwise).
    """

    segments: tuple[Segment, ...]
    peak: int
    makespan: float
    recomputed: tuple[int, ...]
    proven: bool
    upper_saved: float
    lower_makespan: float
    min_budget: int | None = None

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(s.kept for s in self.segments if s.kept >= 0)


def certify(
    model: ChainModel | PyChain,
    kept: tuple[int, ...],
    *,
    proven: bool,
    upper_saved: float,
    min_budget: int | None = None,
) -> Certificate:
    """The certificate of the plan keeping `kept` (every other layer recomputed)."""
    held = 0
    segments = []
    for k, t in model.segments(list(kept)):
        cost = model.cost(k, t)
        segments.append(Segment(k, t, held, None if cost <= NEG else cost))
        if k >= 0:
            held += model.held(k, t)
    peaks = [s.peak_above_static for s in segments if s.cost is not None]
    peak = model.static + max([model.pg_total, *peaks])
    keep = set(kept)
    recomputed = tuple(i for i in range(model.n) if i not in keep)
    t_ideal = model.profile.t_ideal
    makespan = t_ideal + math.fsum(float(model.fwd[i]) for i in recomputed)
    total = math.fsum(float(f) for f in model.fwd)
    lower = t_ideal + max(0.0, total - upper_saved)
    return Certificate(
        tuple(segments), peak, makespan, recomputed, proven, upper_saved, lower, min_budget
    )
