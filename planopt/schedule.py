"""What the simulator returns: makespan, peak memory, timeline and memory curve.

The timeline is stored as numpy columns (one row per operation) because a
10,000-layer plan has ~30,000 operations and most callers only want the two
headline numbers; `operations()` materialises rows on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np


class Resource(StrEnum):
    """The three queues of the spec's execution model."""

    COMPUTE = "compute"
    D2H = "d2h"
    H2D = "h2d"


class OpKind(StrEnum):
    """Operation kinds on the timeline."""

    FORWARD = "forward"
    RECOMPUTE = "recompute"
    BACKWARD = "backward"
    COPY_OUT = "copy_out"
    COPY_BACK = "copy_back"
    REGENERATE = "regenerate"  # a partial layer's R_i (cost model v3)


OP_KINDS: tuple[OpKind, ...] = tuple(OpKind)
OP_RESOURCE: dict[OpKind, Resource] = {
    OpKind.FORWARD: Resource.COMPUTE,
    OpKind.RECOMPUTE: Resource.COMPUTE,
    OpKind.BACKWARD: Resource.COMPUTE,
    OpKind.COPY_OUT: Resource.D2H,
    OpKind.COPY_BACK: Resource.H2D,
    OpKind.REGENERATE: Resource.COMPUTE,
}


class Operation(NamedTuple):
    """One row of the timeline."""

    resource: Resource
    kind: OpKind
    layer: int
    start: float
    end: float


@dataclass(frozen=True, eq=False)
class Schedule:
    """The simulated execution of one plan on one profile.

    `memory_times`/`memory_bytes` is the device memory as a step curve: the
    level right after each allocation or free, in event order (frees before
    allocations at equal times, per the spec).
    """

    makespan: float
    peak_bytes: int
    peak_time: float
    t_ideal: float
    static_bytes: int
    budget: float | None
    compute_seconds: float
    op_kind: np.ndarray
    op_layer: np.ndarray
    op_start: np.ndarray
    op_end: np.ndarray
    memory_times: np.ndarray
    memory_bytes: np.ndarray

    @property
    def overhead(self) -> float:
        """`T / T_ideal - 1` (0 for an empty-time profile)."""
        return self.makespan / self.t_ideal - 1.0 if self.t_ideal > 0 else 0.0

    @property
    def feasible(self) -> bool:
        """Peak within the budget (always true without a budget)."""
        return self.budget is None or self.peak_bytes <= self.budget

    @property
    def stall_seconds(self) -> float:
        """Time the compute stream waits on copies: makespan minus all compute."""
        return max(0.0, self.makespan - self.compute_seconds)

    @property
    def recompute_seconds(self) -> float:
        return self.compute_seconds - self.t_ideal

    def operations(self) -> list[Operation]:
        """The timeline as rows, sorted by start time then resource."""
        rows = []
        for k, layer, start, end in zip(
            self.op_kind.tolist(),
            self.op_layer.tolist(),
            self.op_start.tolist(),
            self.op_end.tolist(),
            strict=True,
        ):
            kind = OP_KINDS[k]
            rows.append(Operation(OP_RESOURCE[kind], kind, layer, start, end))
        rows.sort(key=lambda op: (op.start, op.resource.value, op.layer))
        return rows

    def to_dict(self, *, timeline: bool = False) -> dict:
        """The headline figures (and optionally the timeline) as plain JSON data."""
        out = {
            "time": self.makespan,
            "peak_bytes": self.peak_bytes,
            "peak_time": self.peak_time,
            "t_ideal": self.t_ideal,
            "overhead": self.overhead,
            "stall_seconds": self.stall_seconds,
            "recompute_seconds": self.recompute_seconds,
            "budget": self.budget,
            "feasible": self.feasible,
        }
        if timeline:
            out["timeline"] = [
                {
                    "resource": op.resource.value,
                    "operation": op.kind.value,
                    "layer": op.layer,
                    "start": op.start,
                    "end": op.end,
                }
                for op in self.operations()
            ]
        return out
