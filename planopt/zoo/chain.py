"""From a network's operators to a spec layer chain (`Profile`, cost model v2).

A layer is a group of consecutive operators. Its output `x_{i+1}` is its
last operator's (first) output; its input `x_i` is the previous layer's
output (for layer 0, its first operator's first input: the batch).

NOTE (where each saved tensor goes): a tensor that an operator of layer `i`
saves for backward is, in this order of checks,
- `x_{i+1}`: `saves_output` (checked first: an in-place op's output is its
  input's storage, and autograd saves the result);
- `x_i`: `saves_input`;
- static (weights, the batch): in `static_bytes`, nothing here;
- created inside the layer: an internal, in `saved_bytes` (a norm's
  statistics, a dropout mask, the q/k/v copies of attention; in a block, the
  inner activations its operators save);
- a product of an earlier layer `k` (the downsample conv of a per-operator
  ResNet saves the block input): already counted there; it must be an
  internal of `k` or an output that `B_k` or `B_{k+1}` reads, whose backward
  runs after `B_i`, so the model holds it as long as autograd does. Anything
  else cannot be held by the chain model and is refused.
So each tensor is counted once, in the layer that creates it: a ReLU output
that the next conv saves is the ReLU's `out_bytes` with `saves_output` on the
ReLU and `saves_input` on the conv.

NOTE (gradients): `input_grad_bytes` is the gradient of `x_i`, the shape and
dtype of `x_i` (0 for layer 0, whose input is the batch). Parameter
gradients are in `static_bytes` (16 B/param with the Adam state), so
`param_grad_bytes` is 0.

NOTE (scratch): the bytes live during one operator that the chain does not
hold are the layer's scratch (the largest over its operators):
- `fwd_work_bytes`: tensors an operator touches (inputs, outputs,
  temporaries, saves) that the model does not hold during `F_i`. It holds
  `x_i`, layer `i`'s products, earlier layers' internals and earlier outputs
  that a backward reads (as keep-all does). Scratch is, e.g., the QKV
  projection's output that the context op reads four layers later (no
  backward reads it), the unmasked attention scores, or inside a bottleneck
  block the third batch norm's output that only the residual add reads.
- `bwd_work_bytes`: gradients other than those of `x_i` and `x_{i+1}` (which
  the chain models: `input_grad_bytes` of layers `i` and `i+1`), e.g. inner
  gradients of a block or the residual branch's, plus backward temporaries.
  The last layer's incoming gradient (of the loss) has no layer above to
  carry it and stays here.

NOTE (limits of the chain model, not of the numbers): an in-place operator
on a per-operator chain (ResNet's ReLUs) writes into its input's storage,
but the chain gives each layer its own output, so that storage counts twice
during that operator's forward (the input, read by no backward, is freed at
its end). A per-operator chain's branch (the downsample conv) reads the
block input, not the previous layer's output, and tensors live across
layers without a backward reader (the QKV output) count only in the layers
that touch them. A grouped layer's backward holds both boundary gradients
(`g_i`, `g_{i+1}`) for its whole duration, beside its inner gradients, so
it needs more than the per-operator chain of the same operators: VGG-16's
conv1_2+ReLU backward holds five 411 MB tensors (input, output, three
gradients) where PyTorch holds four at once. Keep-all memory counts every
saved tensor once over its whole life; swap and recompute plans on
per-operator chains are approximations.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from planopt.errors import InvalidProfileError, where
from planopt.profile import Layer, Profile
from planopt.zoo.roofline import ZOO_DTYPE, Hardware
from planopt.zoo.tensors import Op, Tensor


@dataclass(frozen=True, slots=True)
class Group:
    """Consecutive operators that form one layer of the chain."""

    name: str
    ops: tuple[Op, ...]
    signature: str | None = None  # default: the operators' signatures joined with '+'

    def layer_signature(self, context: str) -> str:
        """Operator shapes plus `context`: how the chain holds the tensors they touch.

        Shapes alone are not enough for "equal signatures, equal numbers":
        whether each tensor is the layer's input, output, internal, held by an
        earlier layer or scratch changes its numbers (a first conv on the
        static batch has no input gradient; a conv after another has).
        """
        base = self.signature or "+".join(op.signature for op in self.ops)
        return f"{base}|{context}"


def single(op: Op) -> Group:
    """One operator as one layer."""
    return Group(op.name, (op,))


@dataclass(frozen=True, slots=True)
class Products:
    """Layer `i` as tensors: its input and output, its internals, what its backward reads."""

    input: Tensor  # x_i: the previous layer's output (layer 0: the batch)
    output: Tensor  # x_{i+1}
    internals: tuple[Tensor, ...]
    saves_input: bool
    saves_output: bool

    @property
    def saved_bytes(self) -> int:
        return sum(t.nbytes for t in self.internals)


def _touched(op: Op) -> Iterator[Tensor]:
    yield from op.inputs
    yield from op.outputs
    yield from op.scratch
    yield from op.saves


def _creators(groups: Sequence[Group]) -> dict[str, int]:
    """Layer index where each non-static tensor (by key) first appears: its creator."""
    creator: dict[str, int] = {}
    for i, group in enumerate(groups):
        for op in group.ops:
            for t in _touched(op):
                if not t.static:
                    creator.setdefault(t.key, i)
    return creator


def products(groups: Sequence[Group]) -> tuple[Products, ...]:
    """Each layer's products and flags (the module NOTE's rule); refuses what no chain holds."""
    outputs = [group.ops[-1].out for group in groups]
    inputs = [groups[0].ops[0].inputs[0], *outputs[:-1]]
    creator = _creators(groups)
    internals: list[dict[str, Tensor]] = [{} for _ in groups]
    saves_in = [False] * len(groups)
    saves_out = [False] * len(groups)
    earlier: list[tuple[int, Op, Tensor]] = []
    for i, group in enumerate(groups):
        for op in group.ops:
            for t in op.saves:
                if t.key == outputs[i].key:
                    saves_out[i] = True
                elif t.key == inputs[i].key:
                    saves_in[i] = True
                elif t.static:
                    continue
                elif creator[t.key] == i:
                    internals[i].setdefault(t.key, t)
                else:
                    earlier.append((i, op, t))
    held_from = _read_outputs(outputs, saves_in, saves_out)
    held_from.update({key: k for k, mine in enumerate(internals) for key in mine})
    for i, op, t in earlier:
        if held_from.get(t.key, math.inf) >= i:
            raise InvalidProfileError(
                f"{where(i, groups[i].name)}: operator {op.name} saves {t.key}, made by layer "
                f"{creator[t.key]}, which is neither an internal there nor an output a backward "
                f"reads: the layer chain cannot hold it until this layer's backward"
            )
    return tuple(
        Products(inputs[i], outputs[i], tuple(internals[i].values()), saves_in[i], saves_out[i])
        for i in range(len(groups))
    )


def _read_outputs(
    outputs: Sequence[Tensor], saves_in: Sequence[bool], saves_out: Sequence[bool]
) -> dict[str, int]:
    """Key -> first layer whose output it is and some backward reads (`B_i` or `B_{i+1}`)."""
    read: dict[str, int] = {}
    n = len(outputs)
    for i, out in enumerate(outputs):
        if saves_out[i] or (i + 1 < n and saves_in[i + 1]):
            read.setdefault(out.key, i)
    return read


@dataclass(frozen=True, slots=True)
class _Holding:
    """How the model holds each tensor while a layer's forward runs (keep-all)."""

    chain: tuple[Products, ...]
    internal_at: dict[str, int]  # key -> the layer it is an internal of
    read_out_at: dict[str, int]  # key -> the first layer whose output it is and a backward reads

    @classmethod
    def of(cls, chain: tuple[Products, ...]) -> _Holding:
        internal_at = {t.key: i for i, p in enumerate(chain) for t in p.internals}
        read_out = _read_outputs(
            [p.output for p in chain],
            [p.saves_input for p in chain],
            [p.saves_output for p in chain],
        )
        return cls(chain, internal_at, read_out)

    def letter(self, i: int, t: Tensor) -> str:
        """b: static; i/o: layer i's input/output; n: its internal; h: an earlier product
        the model still holds; t: transient, held by no layer (scratch)."""
        p = self.chain[i]
        if t.static:
            return "b"
        if t.key == p.output.key:
            return "o"
        if t.key == p.input.key:
            return "i"
        at = self.internal_at.get(t.key, self.read_out_at.get(t.key, math.inf))
        return "n" if at == i else "h" if at < i else "t"


def _seconds(hw: Hardware, ops: Sequence[Op], backward: bool) -> float:
    return math.fsum(
        hw.seconds(k.flops, k.nbytes, dtype=ZOO_DTYPE if k.tensor else None)
        for op in ops
        for k in (op.bwd if backward else op.fwd)
    )


def _fwd_work(op: Op, i: int, holding: _Holding) -> int:
    """Bytes `op` touches that the model does not hold during `F_i` (each tensor once)."""
    scratch = {t.key: t for t in _touched(op) if holding.letter(i, t) == "t"}
    return sum(t.nbytes for t in scratch.values())


def _bwd_work(ops: Sequence[Op], p: Products, first: bool, last: bool) -> int:
    """The largest gradients + temporaries of one operator's backward, less `g_i`, `g_{i+1}`.

    NOTE (in place): a key names a storage, not a gradient. When an operator
    writes a tensor in place (the ReLU after a conv), the gradient of the
    layer's output is that of its LAST writer's output, and the gradient of
    its input is that of the readers up to its FIRST in-place writer; the
    same key elsewhere is an inner gradient, scratch.
    """
    out_key, in_key = p.output.key, p.input.key
    writers = [j for j, op in enumerate(ops) if any(t.key == out_key for t in op.outputs)]
    last_writer = writers[-1] if writers and not last else None
    inner_from = next(
        (j + 1 for j, op in enumerate(ops) if any(t.key == in_key for t in op.outputs)), len(ops)
    )
    return max(
        op.grad_bytes(
            skip_output=out_key if j == last_writer else None,
            skip_input=in_key if not first and j < inner_from else None,
        )
        + op.bwd_scratch_bytes
        for j, op in enumerate(ops)
    )


def layers(groups: Sequence[Group], hw: Hardware) -> tuple[Layer, ...]:
    """The spec layers of `groups` on `hw` (see the module NOTEs for the rules)."""
    chain = products(groups)
    holding = _Holding.of(chain)
    last = len(groups) - 1
    result = []
    for i, (group, p) in enumerate(zip(groups, chain, strict=True)):
        context = ";".join("".join(holding.letter(i, t) for t in _touched(op)) for op in group.ops)
        result.append(
            Layer(
                name=group.name,
                fwd=_round(_seconds(hw, group.ops, backward=False)),
                bwd=_round(_seconds(hw, group.ops, backward=True)),
                out_bytes=p.output.nbytes,
                saved_bytes=p.saved_bytes,
                saves_input=p.saves_input,
                saves_output=p.saves_output,
                input_grad_bytes=p.input.nbytes if i > 0 else 0,
                param_grad_bytes=0,
                fwd_work_bytes=max(_fwd_work(op, i, holding) for op in group.ops),
                bwd_work_bytes=_bwd_work(group.ops, p, first=i == 0, last=i == last),
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


def backward_read_bytes(chain: Sequence[Layer]) -> int:
    """Bytes of the products some backward reads: every saved activation, each once.

    Internals, plus each output read by its own backward (`saves_output`) or
    the next one's (`saves_input`): what keep-all holds when the forward ends.
    """
    n = len(chain)
    return sum(
        layer.saved_bytes
        + (layer.out_bytes if layer.saves_output or (i + 1 < n and chain[i + 1].saves_input) else 0)
        for i, layer in enumerate(chain)
    )


def to_profile(net: Network, hw: Hardware, *, name: str) -> Profile:
    """The profile of `net` on `hw`, with a `source` that says how it was estimated."""
    chain = layers(net.groups, hw)
    static = static_bytes(net)
    saved = backward_read_bytes(chain)
    gib = 2**30
    source = (
        f"ESTIMATES, not measurements: planopt.zoo roofline model ({hw.summary()}). "
        f"Network: {net.description}. Mixed precision: fp16 activations and gradients, "
        f"fp32 norm statistics and loss, bool dropout masks; Adam with fp32 master weights and "
        f"moments, 16 B/param. Times: per kernel max(FLOPs/sustained peak, bytes/sustained HBM "
        f"bandwidth) + launch. Memory (cost model v2), from what PyTorch autograd saves per "
        f"operator, each tensor counted once, in the layer that creates it: out_bytes is the "
        f"layer's output; saves_input/saves_output say whether its backward reads its "
        f"input/output; saved_bytes are the other tensors its backward reads (internals: norm "
        f"statistics, dropout masks, attention's operand copies, a block's inner activations); "
        f"input_grad_bytes is the gradient of its input (fp16); param_grad_bytes is 0: parameter "
        f"gradients are in static_bytes. {net.params:,} parameters; static {static / gib:.2f} "
        f"GiB, activations read by backward {saved / gib:.2f} GiB "
        f"(device memory {hw.memory_bytes / gib:g} GiB). "
        f"Regenerate with `python -m planopt.zoo.build`."
    )
    return Profile(name=name, device=hw.device(), static_bytes=static, layers=chain, source=source)
