"""A model's repeated blocks, found where they sit: the unit a plan acts on in place.

`find_model_blocks(model)` returns the blocks a plan keeps, swaps or
recomputes on the model as written:

* the longest `nn.ModuleList` whose children are all of one class (the
  decoder or encoder layers of every Hugging Face family: `model.layers`,
  `transformer.h`, `gpt_neox.layers`, `bert.encoder.layer`, ...), found by
  shape rather than by a table of attribute names;
* otherwise the blocks of torchvision-style stages: consecutive
  `nn.Sequential` children (`layer1 .. layer4`) whose children are residual
  blocks, in order;
* or the modules a user names (`names=["encoder.0", "encoder.1"]`).

Everything the model runs before the first block is the profile's prefix
layer, everything after the last block (and the loss) its suffix layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from planopt.errors import PlanoptError


class BlockError(PlanoptError, ValueError):
    """The model's blocks cannot be found, or the ones given are not usable."""


@dataclass(frozen=True, slots=True)
class ModelBlocks:
    """The blocks of a model in forward order, with their qualified names."""

    names: tuple[str, ...]
    modules: tuple[nn.Module, ...]
    how: str  # "module-list", "stages" or "given"

    def __len__(self) -> int:
        return len(self.modules)


def _same_class_lists(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) >= 2:
            kinds = {type(child) for child in module}
            if len(kinds) == 1:
                found.append((name, module))
    return found


def _stages(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Blocks of the longest run of consecutive `nn.Sequential` children of one block class."""
    best: list[tuple[str, nn.Module]] = []
    for parent_name, parent in model.named_modules():
        run: list[tuple[str, nn.Module]] = []
        for child_name, child in parent.named_children():
            prefix = f"{parent_name}.{child_name}" if parent_name else child_name
            children = list(child.named_children()) if isinstance(child, nn.Sequential) else []
            # A stage holds blocks (modules with children of their own), not layers.
            if children and all(any(True for _ in c.children()) for _, c in children):
                run.extend((f"{prefix}.{n}", c) for n, c in children)
                continue
            if len(run) > len(best):
                best = run
            run = []
        if len(run) > len(best):
            best = run
    return best if len(best) >= 2 else []


def find_model_blocks(model: nn.Module, names: Sequence[str] | None = None) -> ModelBlocks:
    """The model's repeated blocks (see the module docstring); `names` overrides the search."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if names is not None:
        return _given(model, names)
    lists = _same_class_lists(model)
    if lists:
        name, best = max(lists, key=lambda item: len(item[1]))  # first of the longest
        return ModelBlocks(
            tuple(f"{name}.{i}" if name else str(i) for i in range(len(best))),
            tuple(best),
            "module-list",
        )
    stages = _stages(model)
    if stages:
        return ModelBlocks(tuple(n for n, _ in stages), tuple(m for _, m in stages), "stages")
    raise BlockError(
        f"model ({type(model).__name__}): must hold repeated blocks (an nn.ModuleList of at "
        "least 2 modules of one class, or nn.Sequential stages of blocks), found none; pass "
        "blocks=[module names] (e.g. ['encoder.0', 'encoder.1'])"
    )


def _given(model: nn.Module, names: Sequence[str]) -> ModelBlocks:
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise BlockError(f"blocks: must be a list of module names, got {names!r}")
    names = list(names)
    if not names:
        raise BlockError("blocks: must name at least one module, got 0")
    modules = dict(model.named_modules())
    seen: dict[int, str] = {}
    out = []
    for name in names:
        if name not in modules or name == "":
            raise BlockError(
                f"blocks: {name!r} must be the name of a submodule of {type(model).__name__} "
                "(as model.named_modules() lists it)"
            )
        module = modules[name]
        if id(module) in seen:
            raise BlockError(f"blocks: {name!r} is the same module as {seen[id(module)]!r}")
        seen[id(module)] = name
        out.append(module)
    for a in names:
        inner = next((b for b in names if b.startswith(a + ".")), None)
        if inner is not None:
            raise BlockError(f"blocks: {a!r} and {inner!r} must not contain one another")
    return ModelBlocks(tuple(names), tuple(out), "given")
