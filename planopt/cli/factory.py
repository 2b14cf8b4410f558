"""Your own model on the command line: `--model module:factory` and `--model-args JSON`.

`planopt profile-model module:factory` and `planopt run-check ... --model
module:factory` build the model the same way, here. The factory is called
with the keyword arguments of `--model-args` (a JSON object) and returns
either

* a tuple `(chain, (inputs, targets), loss_fn)`, or
* an object with `chain`, `loss_fn` and `batch()` (a
  `planopt.runtime.ReferenceModel`, as `planopt.runtime.models:reference_model`
  and `planopt.runtime.hf:hf_model` return).

`chain` is a `planopt.runtime.Chain` or an `nn.Sequential` (made a chain with
`Chain.from_sequential`, pass-through layers fused). Whatever goes wrong in
the user's code (the module does not import, the factory raises, it returns
something else) is one `ModelFactoryError` naming `--model`: exit 2, no
traceback. torch is imported only when a model is built.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from planopt.errors import PlanoptError

SHAPE = "(chain, (inputs, targets), loss_fn) or an object with chain, loss_fn and batch()"


class ModelFactoryError(PlanoptError, ValueError):
    """`--model` does not name a factory that returns a chain, a batch and a loss."""


class DeviceError(PlanoptError, ValueError):
    """`--device` names no device torch knows or none this machine has."""


def model_kwargs(args_text: str) -> dict[str, Any]:
    """`--model-args`: a JSON object of the factory's keyword arguments."""
    try:
        kwargs = json.loads(args_text)
    except json.JSONDecodeError as exc:
        raise ModelFactoryError(
            f"--model-args must be a JSON object, got {args_text!r}: {exc}"
        ) from None
    if not isinstance(kwargs, dict):
        raise ModelFactoryError(f"--model-args must be a JSON object, got {args_text!r}")
    return kwargs


def load_factory(target: str, what: str = "--model", names: tuple[str, ...] = ()) -> Any:
    """The callable `module:attr` names (its module imported).

    `what` names the argument in messages; `names`, the named models it
    could have been instead (`profile-model NAME`).
    """
    rule = f"{what} must " + (
        f"be one of {', '.join(names)}, or name a factory as module:attr"
        if names
        else "name a factory as module:attr"
    )
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ModelFactoryError(f"{rule}, got {target!r}: target must be 'module:attr'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelFactoryError(f"{rule}, got {target!r}: {exc}") from None
    except Exception as exc:  # the user's module failed while it was imported
        raise ModelFactoryError(
            f"{what} {target}: importing module {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    if not hasattr(module, attr):
        raise ModelFactoryError(
            f"{rule}, got {target!r}: module {module_name!r} has no attribute {attr!r}"
        )
    factory = getattr(module, attr)
    if not callable(factory):
        raise ModelFactoryError(
            f"{what} must name a callable factory, got {target!r} (a {type(factory).__name__})"
        )
    return factory


def load_model(
    target: str, args_text: str, what: str = "--model", names: tuple[str, ...] = ()
) -> tuple[Any, tuple[Any, Any], Any]:
    """`(chain, (inputs, targets), loss_fn)` from the factory `target` names (module doc)."""
    kwargs = model_kwargs(args_text)
    factory = load_factory(target, what, names)
    called = f"{what} {target} with --model-args {args_text}"
    try:
        made = factory(**kwargs)
        if isinstance(made, tuple | list) and len(made) == 3:
            chain, batch, loss_fn = made
        elif all(hasattr(made, a) for a in ("chain", "loss_fn", "batch")):
            chain, batch, loss_fn = made.chain, made.batch(), made.loss_fn
        else:
            got = f"a {type(made).__name__}" + (
                f" of {len(made)}" if isinstance(made, tuple | list) else ""
            )
            raise ModelFactoryError(f"{called}: the factory must return {SHAPE}, got {got}")
    except PlanoptError:
        raise
    except Exception as exc:  # the user's code: one line, exit 2
        raise ModelFactoryError(
            f"{called}: the factory raised {type(exc).__name__}: {exc}"
        ) from None
    return _checked(called, chain, batch, loss_fn)


def _checked(called: str, chain: Any, batch: Any, loss_fn: Any) -> tuple[Any, Any, Any]:
    import torch
    from torch import nn

    from planopt.runtime.chain import Chain

    if isinstance(chain, nn.Sequential) and not isinstance(chain, Chain):
        chain = Chain.from_sequential(chain)
    if not isinstance(chain, Chain):
        raise ModelFactoryError(
            f"{called}: the factory's chain must be a planopt.runtime.Chain or an "
            f"nn.Sequential, got {type(chain).__name__}"
        )
    if not (
        isinstance(batch, tuple | list)
        and len(batch) == 2
        and all(isinstance(t, torch.Tensor) for t in batch)
    ):
        got = type(batch).__name__
        if isinstance(batch, tuple | list):
            got += f"({', '.join(type(t).__name__ for t in batch)})"
        raise ModelFactoryError(
            f"{called}: the factory's batch must be (inputs, targets), two tensors, got {got}"
        )
    if not callable(loss_fn):
        raise ModelFactoryError(
            f"{called}: the factory's loss_fn must be callable (outputs, targets) -> loss, "
            f"got {type(loss_fn).__name__}"
        )
    return chain, (batch[0], batch[1]), loss_fn


def check_device(text: str | None) -> None:
    """`--device` must name a device torch knows and this machine has (checked before the
    model is built, so a typo costs nothing)."""
    if text is None:
        return
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError) as exc:
        raise DeviceError(
            f"--device must be a torch device (cpu, cuda:0), got {text!r}: {exc}"
        ) from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index or 0) >= count:
            raise DeviceError(
                f"--device must be a device this machine has ({count} CUDA device(s)), got {text!r}"
            )
    elif device.type != "cpu":
        backend = getattr(torch, device.type, None)
        available = getattr(backend, "is_available", None)
        if available is None or not available():
            raise DeviceError(f"--device must be a device this machine has, got {text!r}")
