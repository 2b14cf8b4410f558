"""From a network's operators to a spec layer chain (`Profile`).

NOTE (which layer a saved tensor belongs to): PyTorch operators share saved
tensors (ReLU saves its output, the next conv saves the same storage as its
input). Each distinct saved tensor is counted once, in the first layer in
forward order that saves it. That is where the spec's lifetime of `s_i`
(start of `F_i` to end of `B_i`) matches the tensor's real one: the first
saver's backward is the last backward that reads it.

NOTE (scratch): the spec has no term for gradients or for tensors that are
live during an operator but not (yet) saved, so they are the layer's scratch:
- `fwd_work_bytes`: the bytes an operator touches (inputs, outputs,
  temporaries, its saved internals) that no layer at or before this one
  holds in its saved bytes, e.g. a conv's output that the next batch norm
  saves, or the attention scores that softmax reads but does not save.
- `bwd_work_bytes`: incoming output gradients + outgoing input gradients +
  backward temporaries.
A layer made of several operators takes the largest value of its operators.
Tensors that stay live across several layers without being saved (the QKV
projection output until the last head copy) are counted only in the layers
that touch them; the residual input stays live as some earlier layer's saved
tensor, which is exact under keep-all.

NOTE (limits of the chain model, not of the numbers): a layer whose input an
earlier layer already holds (a conv after a ReLU) gets saved bytes 0, and
tensors that a later layer's backward also reads (that ReLU output) are only
waited for at the first saver's own backward. Keep-all memory is exact;
swap and recompute plans on per-operator chains are approximations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planopt.profile import Layer, Profile
from planopt.zoo.roofline import Hardware
from planopt.zoo.tensors import Op, Tensor


@dataclass(frozen=True, slots=True)
class Group:
    """Consecutive operators that form one layer of the chain."""

    name: str
    ops: tuple[Op, ...]
    signature: str | None = None  # default: the operators' signatures joined with '+'

    def layer_signature(self, context: str) -> str:
        """Operator shapes plus `context`: how the layer's inputs and outputs are held.

        Shapes alone are not enough for "equal signatures, equal numbers":
        VGG's conv5_1 (after a pool) saves its input, conv5_2 (after a ReLU
        that saved it) does not, with equal shapes.
        """
        base = self.signature or "+".join(op.signature for op in self.ops)
        return f"{base}|{context}"


def single(op: Op) -> Group:
    """One operator as one layer."""
    return Group(op.name, (op,))


def owners(groups: Sequence[Group]) -> dict[str, int]:
    """Layer index of the first layer that saves each non-static tensor (by key)."""
    owner: dict[str, int] = {}
    for i, group in enumerate(groups):
        for op in group.ops:
            for t in op.saves:
                if not t.static:
                    owner.setdefault(t.key, i)
    return owner


def saved_tensors(groups: Sequence[Group]) -> list[list[Tensor]]:
    """Per layer, the distinct tensors counted in its saved bytes (first-saver rule)."""
    owner = owners(groups)
    result: list[list[Tensor]] = []
    for i, group in enumerate(groups):
        mine: dict[str, Tensor] = {}
        for op in group.ops:
            for t in op.saves:
                if owner.get(t.key) == i:
                    mine.setdefault(t.key, t)
        result.append(list(mine.values()))
    return result


def _touched(op: Op) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for t in (*op.inputs, *op.outputs, *op.scratch, *op.saves):
        if not t.static:
            out.setdefault(t.key, t)
    return out


def _holding(tensors: Sequence[Tensor], owner: dict[str, int], i: int) -> str:
    """One letter per tensor: saved by an (e)arlier layer, by this one (s), a (l)ater one,
    or (t)ransient: saved by none; static tensors are (e)arlier too."""
    letters = []
    for t in tensors:
        at = -1 if t.static else owner.get(t.key)
        letters.append("t" if at is None else "e" if at < i else "s" if at == i else "l")
    return "".join(letters)


def _seconds(hw: Hardware, ops: Sequence[Op], backward: bool) -> float:
    return math.fsum(
        hw.seconds(k.flops, k.nbytes, tensor=k.tensor)
        for op in ops
        for k in (op.bwd if backward else op.fwd)
    )


def layers(groups: Sequence[Group], hw: Hardware) -> tuple[Layer, ...]:
    """The spec layers of `groups` on `hw` (see the module NOTEs for the rules)."""
    owner = owners(groups)
    saved = saved_tensors(groups)
    result = []
    for i, group in enumerate(groups):
        fwd_work = max(
            sum(t.nbytes for key, t in _touched(op).items() if owner.get(key, math.inf) > i)
            for op in group.ops
        )
        bwd_work = max(op.grad_bytes() + op.bwd_scratch_bytes for op in group.ops)
        context = (
            _holding(group.ops[0].inputs, owner, i)
            + ">"
            + _holding(group.ops[-1].outputs, owner, i)
        )
        result.append(
            Layer.v1(
                name=group.name,
                fwd=_round(_seconds(hw, group.ops, backward=False)),
                bwd=_round(_seconds(hw, group.ops, backward=True)),
                saved_bytes=sum(t.nbytes for t in saved[i]),
                fwd_work_bytes=fwd_work,
                bwd_work_bytes=bwd_work,
                signature=group.layer_signature(context),
            )
        )
    return tuple(result)


def _round(seconds: float) -> float:
    """Six significant digits: estimates carry no more, and the JSON stays short."""
    return float(f"{seconds:.6g}")


@dataclass(frozen=True, slots=True)
class Network:
    """A network as layer groups plus what it keeps resident: parameters and the batch."""

    name: str
    description: str
    groups: tuple[Group, ...]
    batch_inputs: tuple[Tensor, ...]  # static tensors: ids, labels, images

    @property
    def params(self) -> int:
        return sum(op.params for g in self.groups for op in g.ops)

    @property
    def buffer_bytes(self) -> int:
        return sum(op.buffer_bytes for g in self.groups for op in g.ops)

    @property
    def batch_bytes(self) -> int:
        return sum(t.nbytes for t in self.batch_inputs)


# NOTE: mixed-precision Adam keeps per parameter fp16 weights (2) and fp16
# gradients (2), fp32 master weights (4) and two fp32 moments (8).
BYTES_PER_PARAM = 16


def static_bytes(net: Network) -> int:
    """Weights, gradients and Adam state (16 B/param), buffers, and the input batch."""
    return BYTES_PER_PARAM * net.params + net.buffer_bytes + net.batch_bytes


def to_profile(net: Network, hw: Hardware, *, name: str) -> Profile:
    """The profile of `net` on `hw`, with a `source` that says how it was estimated."""
    chain = layers(net.groups, hw)
    static = static_bytes(net)
    saved = sum(layer.product_bytes for layer in chain)
    gib = 2**30
    source = (
        f"ESTIMATES, not measurements: planopt.zoo roofline model ({hw.summary()}). "
        f"Network: {net.description}. Mixed precision: fp16 activations and gradients, "
        f"fp32 norm statistics and loss, bool dropout masks; Adam with fp32 master weights and "
        f"moments, 16 B/param. Times: per kernel max(FLOPs/sustained peak, bytes/sustained HBM "
        f"bandwidth) + launch; saved bytes: what PyTorch autograd saves per operator, each "
        f"tensor counted once, in the first layer that saves it. {net.params:,} parameters; "
        f"static {static / gib:.2f} GiB, saved activations {saved / gib:.2f} GiB "
        f"(device memory {hw.memory_bytes / gib:g} GiB). "
        f"Regenerate with `python -m planopt.zoo.build`."
    )
    return Profile(name=name, device=hw.device(), static_bytes=static, layers=chain, source=source)
