"""Layers with no output of their own, fused with a neighbour when a chain is built.

The cost model gives every layer an output of its own (`out_bytes`, the
`x_{i+1}` a plan keeps, swaps or recomputes). A `Flatten`, an `Identity`,
an in-place activation (`ReLU(inplace=True)`) or a dropout that returns its
input (`p=0`) returns a view or its input itself: its output is the previous
layer's storage, so it is no layer of the cost model's. Tutorials write
`nn.Sequential` models with such layers, so `Chain` fuses them instead of
refusing them.

The rule: a pass-through layer joins the layer before it (the storage it
returns is that layer's output); leading pass-throughs, which have no layer
before them, join the first layer after them. The fused layer is an
`nn.Sequential` of the members and is named by joining their names with
"+" (`conv2d0+relu1`), so a plan still reads in the model's terms.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn
from torch.nn.modules.dropout import _DropoutNd

_VIEWS = (nn.Identity, nn.Flatten, nn.Unflatten)


def passes_through(module: nn.Module) -> bool:
    """True when `module`'s output is a view of its input or its input changed in place.

    Known by type, without running it: `Identity`, `Flatten`, `Unflatten`,
    any module built with `inplace=True` (activations, dropout), a dropout
    with `p=0` (PyTorch returns the input itself), and an `nn.Sequential`
    made only of these.
    """
    if isinstance(module, _VIEWS) or getattr(module, "inplace", False) is True:
        return True
    if isinstance(module, _DropoutNd) and module.p == 0:
        return True
    if type(module) is nn.Sequential and len(module) > 0:
        return all(passes_through(child) for child in module)
    return False


def fuse_pass_through(
    layers: Sequence[nn.Module],
    names: Sequence[str],
    signatures: Sequence[str | None] | None,
) -> tuple[list[nn.Module], list[str], list[str | None] | None]:
    """`(layers, names, signatures)` with every pass-through layer fused into a neighbour.

    Groups are `[leading pass-throughs] + owner + [pass-throughs after it]`;
    a group of one is left as it is (same module, name and signature). A
    fused group's signature joins its members' given ones with "+"; with no
    signatures given, `Chain` gives each layer its structural one. A chain made
    only of pass-throughs stays one fused layer (the profiler says why it
    cannot be planned).
    """
    groups: list[list[int]] = []
    leading: list[int] = []
    for i, layer in enumerate(layers):
        if passes_through(layer):
            if groups:
                groups[-1].append(i)
            else:
                leading.append(i)
        else:
            groups.append([*leading, i])
            leading = []
    if leading:  # nothing but pass-throughs
        groups.append(leading)
    if all(len(g) == 1 for g in groups):
        return list(layers), list(names), None if signatures is None else list(signatures)
    out_layers: list[nn.Module] = []
    out_names: list[str] = []
    out_sigs: list[str | None] = []
    for group in groups:
        if len(group) == 1:
            out_layers.append(layers[group[0]])
        else:
            out_layers.append(nn.Sequential(*(layers[i] for i in group)))
        out_names.append("+".join(names[i] for i in group))
        if signatures is not None:
            given = [signatures[i] for i in group]
            out_sigs.append("+".join(s for s in given if s is not None) or None)
    return out_layers, out_names, None if signatures is None else out_sigs
