"""What a caller of the runtime API can get wrong: `PlanoptError` subclasses.

Each names the rule, the value and where (the function, the argument, the
layer), as every planopt error does; the runtime raises them instead of
torch's or Python's own errors, which name neither the rule nor the value
(an `IndexError` for a tensor passed where `(x, y)` was meant, "grad can be
implicitly created only for scalar outputs" for a missing loss). They are
also `ValueError`s, as the runtime's argument errors were.
"""

from __future__ import annotations

from planopt.errors import PlanoptError


class RuntimeInputError(PlanoptError, ValueError):
    """An argument of a runtime function breaks its rule."""


class ChainError(RuntimeInputError):
    """A chain is not a `Chain`, is empty, or has a layer the cost model cannot describe."""


class BatchError(RuntimeInputError):
    """A batch is not `(inputs, targets)` of tensors."""


class LossFnError(RuntimeInputError):
    """A loss function is missing or does not return one scalar."""


class RuntimeOptionError(RuntimeInputError):
    """A count, timer, clock or link is out of its range or of the wrong type."""


class DeviceError(RuntimeInputError):
    """A tensor or a parameter is not on the device the step runs on, or the device lacks CUDA."""


class CudaUnavailableError(DeviceError, RuntimeError):
    """A CUDA-only path (streams, a measured link) was asked for where CUDA is not available."""


class StepUsageError(PlanoptError, RuntimeError):
    """A step under a plan is used another way than the plan supports (a second backward)."""
