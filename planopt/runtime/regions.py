"""How a model is called and where its blocks sit in its step: the in-place calling conventions.

A step on a user's model, as planopt profiles and plans it in place:

    out = model(**batch)            # a dict (Hugging Face); (x, y): model(x); else model(batch)
    loss = loss_fn(out, batch)      # default: out.loss (a model that computes its loss)
    del out                         # only the loss is held through the backward
    loss.backward()

Its profile layers are regions of that step: the prefix (layer 0, everything
before the first block), the blocks (layers 1 .. B) and the suffix (layer
B+1, everything after the last block, the loss included). A block's output
is the first tensor it returns (decoder layers return a tensor or a tuple
whose first element is the hidden state), its input the hidden state it is
called with (the first positional tensor, else `hidden_states=`).

`Patched` replaces `forward` on module instances and restores each exactly
(an instance attribute is deleted again, one the user had set is put back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from planopt.errors import PlanoptError

Batch = Any
StepLossFn = Callable[[Any, Batch], torch.Tensor]


class CallError(PlanoptError, TypeError):
    """The model, its batch or its loss cannot be run as the in-place step runs them."""


def call_model(model: nn.Module, batch: Batch) -> Any:
    """`model(**batch)` for a mapping; `model(x)` for an `(x, target)` tuple or list (a
    data loader's batch; the loss reads the target from the batch); else `model(batch)`."""
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, tuple | list):
        if not batch:
            raise CallError("batch: an (input, target) tuple must not be empty")
        return model(batch[0])
    return model(batch)


def default_loss(output: Any, batch: Batch) -> torch.Tensor:
    """`output.loss` (or `output["loss"]`): a model that computes its own loss from the batch."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if not isinstance(loss, torch.Tensor):
        raise CallError(
            f"loss_fn: the model output ({type(output).__name__}) must carry a loss (output.loss, "
            "e.g. a Hugging Face model given labels=), or pass loss_fn=(output, batch) -> scalar"
        )
    return loss


def step_loss(model: nn.Module, batch: Batch, loss_fn: StepLossFn | None) -> torch.Tensor:
    """One forward of the step: the scalar loss, the model output dropped."""
    out = call_model(model, batch)
    loss = (loss_fn or default_loss)(out, batch)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise CallError(f"loss_fn: must return a scalar tensor, got {shape}")
    return loss


def batch_tensors(batch: Batch) -> list[torch.Tensor]:
    """Every tensor in a batch (nested dicts, tuples and lists included)."""
    flat, _ = tree_flatten(batch)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def first_tensor(output: Any) -> torch.Tensor | None:
    """A block's output hidden state: the tensor, or the first tensor of a tuple or list."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, tuple | list) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    if isinstance(output, Mapping):
        for value in output.values():
            if isinstance(value, torch.Tensor):
                return value
    return None


def hidden_input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """A block's input hidden state: the first positional argument, else `hidden_states=`."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    value = kwargs.get("hidden_states")
    return value if isinstance(value, torch.Tensor) else None


def with_hidden(args: tuple, kwargs: dict, h: torch.Tensor) -> tuple[tuple, dict]:
    """A call recorded by `without_hidden`, with the hidden state `h` put back in its place."""
    if args and args[0] is _HIDDEN:
        return (h, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": h}


class _Hidden:
    """Where a recorded call's hidden state was (a replay puts its own there)."""


_HIDDEN = _Hidden()


def without_hidden(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call with the hidden state left out, so a replay does not hold it."""
    if args and isinstance(args[0], torch.Tensor):
        return (_HIDDEN, *args[1:]), kwargs
    return args, {k: v for k, v in kwargs.items() if k != "hidden_states"}


def call_tensors(args: tuple, kwargs: dict) -> Iterable[torch.Tensor]:
    flat, _ = tree_flatten((args, kwargs))
    return (t for t in flat if isinstance(t, torch.Tensor))


class Patched:
    """`forward` replaced on module instances; `restore()` puts every one back exactly."""

    _MISSING = object()

    def __init__(self) -> None:
        self._saved: list[tuple[nn.Module, Any]] = []

    def patch(self, module: nn.Module, make: Callable[[Callable[..., Any]], Callable[..., Any]]):
        """Set `module.forward = make(original)`; the original is the bound forward."""
        before = module.__dict__.get("forward", self._MISSING)
        original = module.forward
        module.forward = make(original)
        self._saved.append((module, before))
        return original

    def restore(self) -> None:
        while self._saved:
            module, before = self._saved.pop()
            if before is self._MISSING:
                module.__dict__.pop("forward", None)
            else:
                module.forward = before

    def __len__(self) -> int:
        return len(self._saved)


class UseCacheOff:
    """`model.config.use_cache = False` while planned (a cache holds activations), restored."""

    def __init__(self, model: nn.Module) -> None:
        self.config = getattr(model, "config", None)
        self.before = getattr(self.config, "use_cache", None)

    def __enter__(self) -> UseCacheOff:
        if self.before:
            self.config.use_cache = False
        return self

    def __exit__(self, *exc: object) -> None:
        if self.before:
            self.config.use_cache = self.before
