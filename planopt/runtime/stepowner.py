"""What a step under a plan reads from the handle that applied it.

`applystep.PlanStep` needs a few things of `apply.PlanHandle`, and `apply`
imports `applystep`: this protocol lets the dependency run one way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from torch import nn

    from planopt.runtime.modelblocks import ModelBlocks
    from planopt.runtime.stepplan import StepPlan
    from planopt.runtime.swap import CopyEngine


class PlanHandle(Protocol):
    """The handle's side of a step (`apply.PlanHandle` is one)."""

    n: int
    blocks: ModelBlocks
    schedule: StepPlan
    run_top: Any

    def engine(self, device: torch.device) -> CopyEngine: ...
    def run_modules(self, first: int, top: int) -> list[nn.Module]: ...
    def policy(self, i: int) -> tuple[int, ...] | None: ...
    def check_input(self, x: torch.Tensor) -> None: ...
    def step_finished(self, step: Any) -> None: ...  # an applystep.PlanStep
