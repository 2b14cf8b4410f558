"""A model as a chain of layers: the unit the profiler measures and the executor plans.

A chain is what the cost model calls "the network": layers `0 .. L-1`, each
a module that takes one tensor and returns one tensor. Build it from an
`nn.Sequential`, a list of modules, or the repeated part of a model (a
`ModuleList` of transformer blocks) with optional prefix and suffix modules,
which become layers of their own.

A layer with no output of its own (a `Flatten`, an `Identity`, an in-place
`ReLU`) is fused with its neighbour as the chain is built
(`planopt.runtime.fusion`): `conv2d0+relu1` is one layer.

NOTE (the loss): the profiler and the executor fuse the loss into the last
layer (`run_layer` with `loss_fn`), so the tensors the loss saves (the
log-softmax of the logits, for cross-entropy) are part of `s_{L-1}` and the
last layer's output is the scalar loss. Without a `loss_fn` the chain ends at
the model output and the loss lives outside the plan.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from planopt.runtime.errors import ChainError, LossFnError
from planopt.runtime.fusion import fuse_pass_through

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def module_signature(module: nn.Module) -> str:
    """Structural signature: class plus a digest of the module's repr.

    `repr` lists every submodule with its hyper-parameters (sizes, dropout
    rates), so two blocks built alike get the same signature and blocks of a
    different shape do not. The profiler appends the input shape.
    """
    digest = hashlib.sha1(repr(module).encode()).hexdigest()[:12]
    return f"{type(module).__name__}:{digest}"


def _default_name(key: str, module: nn.Module) -> str:
    return f"{type(module).__name__.lower()}{key}" if key.isdigit() else key


class Chain(nn.Module):
    """Layers run one after the other; `names` and `signatures` label them.

    It is an `nn.Module` (its parameters are the layers'), so an optimizer
    and `.to(device)` work on it directly; `forward` is plain PyTorch.
    Pass-through layers (views, in-place results) are fused with a
    neighbour, so `len(chain)` can be less than `len(layers)` and a fused
    layer's name joins its members' names with "+".
    """

    def __init__(
        self,
        layers: Sequence[nn.Module],
        names: Sequence[str] | None = None,
        signatures: Sequence[str | None] | None = None,
    ) -> None:
        super().__init__()
        layers = list(layers)
        if not layers:
            raise ChainError("chain: layers must hold at least one module, got 0")
        for i, layer in enumerate(layers):
            if not isinstance(layer, nn.Module):
                raise ChainError(f"layer {i}: must be an nn.Module, got {type(layer).__name__}")
        names = [str(i) for i in range(len(layers))] if names is None else list(names)
        if len(names) != len(layers):
            raise ChainError(
                f"chain: names must have one entry per layer ({len(layers)}), got {len(names)}"
            )
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if not isinstance(name, str) or not name:
                raise ChainError(f"layer {i}: name must be a non-empty string, got {name!r}")
            if name in seen:
                raise ChainError(
                    f"layer {i}: name must be unique, got {name!r} (also layer {seen[name]})"
                )
            seen[name] = i
        signatures = None if signatures is None else list(signatures)
        if signatures is not None and len(signatures) != len(layers):
            raise ChainError(
                f"chain: signatures must have one entry per layer ({len(layers)}), "
                f"got {len(signatures)}"
            )
        layers, names, signatures = fuse_pass_through(layers, names, signatures)
        if signatures is None:
            signatures = [module_signature(layer) for layer in layers]
        self.layers = nn.ModuleList(layers)
        self.names: tuple[str, ...] = tuple(names)
        self.signatures: tuple[str | None, ...] = tuple(signatures)

    # -- construction -----------------------------------------------------

    @classmethod
    def from_sequential(
        cls, model: nn.Sequential, signatures: Sequence[str | None] | None = None
    ) -> Chain:
        """One layer per child; numeric child keys become `linear0`, `relu1`..."""
        items = list(model.named_children())
        names = [_default_name(key, module) for key, module in items]
        return cls([module for _, module in items], names, signatures)

    @classmethod
    def from_modules(
        cls,
        modules: Sequence[nn.Module] | Mapping[str, nn.Module],
        signatures: Sequence[str | None] | None = None,
    ) -> Chain:
        """From a list (named by position and class) or an ordered name -> module mapping."""
        if isinstance(modules, Mapping):
            return cls(list(modules.values()), list(modules.keys()), signatures)
        modules = list(modules)
        names = [_default_name(str(i), m) for i, m in enumerate(modules)]
        return cls(modules, names, signatures)

    @classmethod
    def from_blocks(
        cls,
        blocks: Sequence[nn.Module],
        *,
        prefix: nn.Module | None = None,
        suffix: nn.Module | None = None,
        block_signature: str | None = None,
        prefix_name: str = "prefix",
        suffix_name: str = "suffix",
        block_name: str = "block",
    ) -> Chain:
        """A model whose repeated part is `blocks` (a transformer's `ModuleList`).

        The prefix (embeddings, a stem) and suffix (final norm and head) are
        layers of their own; blocks are named `block0 ..` and share
        `block_signature` when given (else each gets its structural one).
        """
        blocks = list(blocks)
        layers: list[nn.Module] = []
        names: list[str] = []
        sigs: list[str | None] = []
        if prefix is not None:
            layers.append(prefix)
            names.append(prefix_name)
            sigs.append(module_signature(prefix))
        for i, block in enumerate(blocks):
            layers.append(block)
            names.append(f"{block_name}{i}")
            sigs.append(block_signature or module_signature(block))
        if suffix is not None:
            layers.append(suffix)
            names.append(suffix_name)
            sigs.append(module_signature(suffix))
        return cls(layers, names, sigs)

    # -- running ------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.layers)

    def run_layer(
        self,
        i: int,
        x: torch.Tensor,
        target: torch.Tensor | None = None,
        loss_fn: LossFn | None = None,
    ) -> torch.Tensor:
        """Layer `i`'s forward; the last layer also applies `loss_fn` when given."""
        out = self.layers[i](x)
        if loss_fn is not None and i == len(self.layers) - 1:
            out = loss_fn(out, target)
            if isinstance(out, torch.Tensor) and out.numel() != 1:
                raise LossFnError(
                    f"layer {i} ({self.names[i]}): loss_fn must return a scalar loss, got a "
                    f"tensor of shape {tuple(out.shape)} (reduce it, e.g. reduction='mean')"
                )
        if not isinstance(out, torch.Tensor):
            raise ChainError(
                f"layer {i} ({self.names[i]}): must return one tensor, got {type(out).__name__}"
            )
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, x: torch.Tensor, target: torch.Tensor, loss_fn: LossFn) -> torch.Tensor:
        """Plain PyTorch: `loss_fn(self(x), target)` (the reference the executor matches)."""
        return loss_fn(self(x), target)
