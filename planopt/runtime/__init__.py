"""planopt's PyTorch runtime (the `torch` extra): measure a real model, run it under a plan.

    chain = Chain.from_blocks(model.blocks, prefix=model.embed, suffix=model.head)
    prof = profile(chain, (x, y), loss_fn, device="cuda")      # -> planopt.Profile
    plan = planopt.solve(prof, "50%").plan
    executor = Executor(chain, plan, profile=prof, loss_fn=loss_fn)
    executor(x, y).backward()                                  # one step under the plan
    measure(chain, plan, (x, y), loss_fn, profile=prof)        # what the plan really costs
    trace_profile(chain, (x, y), loss_fn, gpu="h100-pcie")     # no GPU: fake tensors, roofline

On the model as written (no chain; Hugging Face models, torchvision-style
ResNets, any model with a `ModuleList` of blocks):

    handle = plan_model(model, batch, budget="50%")   # profile in place, solve, apply
    ...the user's own training loop...
    handle.remove()

or step by step: `profile_in_place` -> `solve_pinned` -> `apply`.

`measure` reads memory from outside the executor: the CUDA caching
allocator, or on CPU the live-storage tracker (`LiveMemory`). `check` puts
it beside the prediction (`planopt run-check` on the command line).

The planner never imports this package: `import planopt` works without torch.
"""

from planopt.runtime.apply import (
    GradRegimeError,
    GradRegimeWarning,
    InputShapeWarning,
    PlanHandle,
    apply,
)
from planopt.runtime.applystep import PlanCallError
from planopt.runtime.chain import Chain, module_signature
from planopt.runtime.check import CheckReport, check, format_check
from planopt.runtime.counting import ChainError
from planopt.runtime.executor import Executor, StepStats, check_plan
from planopt.runtime.fake import trace_profile
from planopt.runtime.inplace import InPlaceProfile, profile_in_place
from planopt.runtime.link import measure_cuda_link
from planopt.runtime.measure import Measurement, measure, plain_step_seconds
from planopt.runtime.memory import StaticBytes, static_bytes
from planopt.runtime.modelblocks import BlockError, ModelBlocks, find_model_blocks
from planopt.runtime.models import REFERENCE_MODELS, ReferenceModel, reference_model
from planopt.runtime.planmodel import StepMemory, measure_step, plan_model, solve_pinned
from planopt.runtime.profiler import profile
from planopt.runtime.recompute import RecomputeError
from planopt.runtime.tracker import Category, LiveMemory

__all__ = [
    "REFERENCE_MODELS",
    "BlockError",
    "Category",
    "Chain",
    "ChainError",
    "CheckReport",
    "Executor",
    "GradRegimeError",
    "GradRegimeWarning",
    "InPlaceProfile",
    "InputShapeWarning",
    "LiveMemory",
    "Measurement",
    "ModelBlocks",
    "PlanCallError",
    "PlanHandle",
    "RecomputeError",
    "ReferenceModel",
    "StaticBytes",
    "StepMemory",
    "StepStats",
    "apply",
    "check",
    "check_plan",
    "find_model_blocks",
    "format_check",
    "measure",
    "measure_cuda_link",
    "measure_step",
    "module_signature",
    "plain_step_seconds",
    "plan_model",
    "profile",
    "profile_in_place",
    "reference_model",
    "solve_pinned",
    "static_bytes",
    "trace_profile",
]
