"""Autograd's progress through a chain, as the spec's backward steps.

The spec runs backward steps `L-1, ..., 0`; step `t` is *issued* when the
compute stream finishes the operation before it, and ends when `B_t` ends.
In autograd, the gradient of layer `t`'s output becomes ready exactly when
every node of the layers above has run (the engine runs ready nodes in
reverse creation order, and the nodes of layer `t` depend only on them).
So a hook on each layer output marks "steps above `t` ended, step `t` is
issued", and a callback queued on the engine marks the end of `B_0`.

`reached(b)` advances monotonically: an output without gradient (a layer
below which nothing needs one) or two layers sharing an output tensor only
make several steps end at one instant, in order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

StepFn = Callable[[int], None]


class BackwardSteps:
    """Calls `on_issue(t)` and `on_end(t)` in the spec's order during one backward."""

    def __init__(
        self,
        n: int,
        on_issue: StepFn,
        on_end: StepFn,
        on_finish: Callable[[], None] | None = None,
    ) -> None:
        self.n = n
        self.on_issue = on_issue
        self.on_end = on_end
        self.on_finish = on_finish
        self.current = n  # the step issued last; n: none yet
        self.started = False
        self.finished = False

    def watch(self, i: int, output: torch.Tensor) -> None:
        """Mark step `i`'s issue on the gradient of layer `i`'s output."""
        if output.requires_grad:
            output.register_hook(self._hook(i))

    def _hook(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_grad: torch.Tensor) -> None:
            self.reached(i)

        return hook

    def reached(self, b: int) -> None:
        """The gradient of layer `b`'s output is ready: end steps above `b`, issue `b`."""
        if self.finished:
            return
        if not self.started:
            self.started = True
            torch.autograd.Variable._execution_engine.queue_callback(self._final)
        while self.current > b:
            if self.current < self.n:
                self.on_end(self.current)
            self.current -= 1
            if self.current >= 0:
                self.on_issue(self.current)

    def _final(self) -> None:
        # End of the whole backward: B_0 (and any step autograd never reached) ended.
        self.reached(-1)
        self.finished = True
        if self.on_finish is not None:
            self.on_finish()
