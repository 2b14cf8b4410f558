"""Seeded synthetic layer chains for tests and experiments.

`random_chain(n, seed=0, family="mixed")` is deterministic per (n, seed,
family, options): one `numpy.random.default_rng(seed)` drives every draw, in
a fixed order. Layers are named `l0 .. l{n-1}`. Equal signatures always mean
equal numbers unless `noise` > 0, which perturbs times layer by layer the way
measured profiles of repeated blocks vary.

Families (scales are per chain, so chains differ in more than one unit):
- "uniform": iid layers; lognormal times (median ~1 ms) and sizes (median ~32 MiB).
- "cnn": stages whose activations halve while convolution time stays about
  constant (channels double as the resolution halves); each stage repeats a
  unit of one convolution and 1-2 cheap memory-bound ops.
- "transformer": an embedding layer, a block of 4-12 ops repeated, then head
  layers; ops are matmul-like, attention-like (large saved tensors) or elementwise.
- "mixed": 2-3 segments, each drawn from one of the three families above.
`static_bytes` is `static_fraction` (default 0.25) of the summed saved bytes.

`version=2` gives the same chain under cost model version 2: each layer's
drawn size is its output, and it becomes a kind of real layer (linear or
convolution: saves its input; ReLU: saves its output; norm: its input and
statistics; dropout: a mask; attention: its input and 4x its output of
internals; add: nothing), chosen by a hash of (seed, signature) so that
copies of a repeated block agree; its input gradient has the size of its
input. The version-1 draws are unchanged (the kinds use no random draws).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
import zlib
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from planopt.errors import InvalidProfileError, show
from planopt.limits import BYTE_FIELDS, MAX_BYTES, MAX_TOTAL_BYTES
from planopt.profile import Device, Layer, Profile

FAMILIES = ("uniform", "cnn", "transformer", "mixed")
MIB = 2**20

# The A100 preset's host link (planopt.zoo.roofline.A100_PCIE4): sizes of tens
# of MiB then take about as long to copy as a layer takes to compute.
DEFAULT_DEVICE = Device("pcie4-x16", h2d_bandwidth=25e9, d2h_bandwidth=25e9, transfer_latency=1e-5)


def repeated_chain(
    block: Sequence[Layer],
    repeats: int,
    prefix: Sequence[Layer] = (),
    suffix: Sequence[Layer] = (),
) -> tuple[Layer, ...]:
    """`prefix + block * repeats + suffix`; block layers are renamed `b{r}.{name}`.

    A block layer without a signature gets its name as signature, so the
    repetition is visible to block-aware solvers.
    """
    for what, part in (("block", block), ("prefix", prefix), ("suffix", suffix)):
        if isinstance(part, str | bytes) or not isinstance(part, Sequence):
            raise InvalidProfileError(
                f"repeated_chain: {what} must be a sequence of Layer, got {show(part)}"
            )
        for layer in part:
            if not isinstance(layer, Layer):
                raise InvalidProfileError(
                    f"repeated_chain: {what} must hold only Layer, got {show(layer)}"
                )
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
        raise InvalidProfileError(
            f"repeated_chain: repeats must be an integer >= 0, got {repeats!r}"
        )
    if repeats and not block:
        raise InvalidProfileError("repeated_chain: block must hold at least one layer, got 0")
    body = [
        dataclasses.replace(
            layer,
            name=f"b{r}.{layer.name}",
            signature=layer.signature if layer.signature is not None else layer.name,
        )
        for r in range(repeats)
        for layer in block
    ]
    return (*prefix, *body, *suffix)


def _lognormal(rng: np.random.Generator, median: float, sigma: float) -> float:
    return float(rng.lognormal(math.log(median), sigma))


def _bytes(value: float) -> int:
    return max(0, round(value))


def _layer(
    name: str,
    fwd: float,
    bwd: float,
    saved: float,
    fwork: float = 0.0,
    bwork: float = 0.0,
    signature: str | None = None,
) -> Layer:
    return Layer.v1(name, fwd, bwd, _bytes(saved), _bytes(fwork), _bytes(bwork), signature)


def _uniform(rng: np.random.Generator, n: int) -> Iterator[Layer]:
    t_med = _lognormal(rng, 1e-3, 0.3)
    s_med = _lognormal(rng, 32 * MIB, 0.3)
    for i in range(n):
        fwd = _lognormal(rng, t_med, 0.6)
        bwd = fwd * _lognormal(rng, 2.0, 0.3)
        saved = _lognormal(rng, s_med, 0.8)
        fwork = _lognormal(rng, s_med / 4, 0.8) if rng.random() < 0.3 else 0.0
        bwork = _lognormal(rng, s_med / 2, 0.8) if rng.random() < 0.3 else 0.0
        yield _layer(f"u{i}", fwd, bwd, saved, fwork, bwork)


def _split(rng: np.random.Generator, n: int, parts: int) -> list[int]:
    """`n` as `parts` positive lengths (random cut points)."""
    parts = max(1, min(parts, n))
    cuts = []
    if parts > 1:
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, n), parts - 1, replace=False))
    bounds = [0, *cuts, n]
    return [b - a for a, b in itertools.pairwise(bounds)]


def _cnn(rng: np.random.Generator, n: int) -> Iterator[Layer]:
    top = _lognormal(rng, 96 * MIB, 0.4)  # first stage's activation size
    conv_time = _lognormal(rng, 1.5e-3, 0.3)
    stream = 1.2e12  # bytes/s a memory-bound op sustains
    for s, length in enumerate(_split(rng, n, int(rng.integers(3, 6)))):
        size = top / 2**s
        c_fwd = conv_time * float(rng.uniform(0.8, 1.25))
        c_bwd = c_fwd * float(rng.uniform(1.8, 2.2))
        cheap = int(rng.integers(1, 3))
        unit = [_layer(f"s{s}.conv", c_fwd, c_bwd, size, size / 4, 2 * size, f"s{s}.conv")]
        for j in range(cheap):
            t = size / stream + 5e-6
            unit.append(_layer(f"s{s}.op{j}", t, 1.5 * t, size, 0.0, 2 * size, f"s{s}.op{j}"))
        yield from (unit[k % len(unit)] for k in range(length))


def _block_op(rng: np.random.Generator, j: int, scale: float) -> Layer:
    kind = rng.choice(["matmul", "attention", "elementwise"], p=[0.4, 0.2, 0.4])
    if kind == "matmul":
        fwd, saved = _lognormal(rng, 4e-4, 0.3), _lognormal(rng, scale, 0.3)
        work = 2 * saved
    elif kind == "attention":
        fwd, saved = _lognormal(rng, 3e-4, 0.3), _lognormal(rng, 8 * scale, 0.3)
        work = 2 * saved
    else:
        fwd, saved = _lognormal(rng, 6e-5, 0.3), _lognormal(rng, scale, 0.5)
        work = saved
    bwd = fwd * _lognormal(rng, 2.0, 0.2)
    return _layer(f"op{j}", fwd, bwd, saved, work / 2, work, f"blk.op{j}")


def _transformer(rng: np.random.Generator, n: int, noise: float) -> Iterator[Layer]:
    scale = _lognormal(rng, 12 * MIB, 0.3)
    if n < 3:
        yield from [_block_op(rng, j, scale) for j in range(n)]
        return
    k = min(int(rng.integers(4, 13)), n - 2)
    block = [_block_op(rng, j, scale) for j in range(k)]
    repeats, extra = divmod(n - 2, k)
    embed = _layer("embed", 1e-4, 1.5e-4, scale / 2, scale, scale, "embed")
    head = [
        _layer(f"head{j}", 2e-4, 4e-4, 2 * scale, 4 * scale, 4 * scale, f"head{j}")
        for j in range(extra + 1)
    ]
    # As `repeated_chain(block, repeats, [embed], head)`, a layer at a time.
    body = (
        dataclasses.replace(
            layer,
            name=f"b{r}.{layer.name}",
            signature=layer.signature if layer.signature is not None else layer.name,
        )
        for r in range(repeats)
        for layer in block
    )
    for layer in itertools.chain([embed], body, head):
        yield _perturb(rng, layer, noise) if noise > 0 else layer


def _perturb(rng: np.random.Generator, layer: Layer, noise: float) -> Layer:
    f = max(0.1, 1.0 + noise * float(rng.standard_normal()))
    b = max(0.1, 1.0 + noise * float(rng.standard_normal()))
    return dataclasses.replace(layer, fwd=layer.fwd * f, bwd=layer.bwd * b)


def _family(rng: np.random.Generator, family: str, n: int, noise: float) -> Iterator[Layer]:
    """The family's layers, drawn one at a time in the order of the one `rng`."""
    if family == "uniform":
        yield from _uniform(rng, n)
        return
    if family == "cnn":
        yield from _cnn(rng, n)
        return
    if family == "transformer":
        yield from _transformer(rng, n, noise)
        return
    for seg, length in enumerate(_split(rng, n, int(rng.integers(2, 4)))):
        kind = str(rng.choice(["uniform", "cnn", "transformer"]))
        for layer in _family(rng, kind, length, noise):
            sig = None if layer.signature is None else f"seg{seg}.{kind}.{layer.signature}"
            yield dataclasses.replace(layer, signature=sig)


# kind -> (weight, saves_input, saves_output, internals as a fraction of the output)
V2_KINDS: dict[str, tuple[float, bool, bool, float]] = {
    "linear": (0.35, True, False, 0.0),
    "relu": (0.25, False, True, 0.0),
    "norm": (0.15, True, False, 1 / 64),
    "dropout": (0.10, False, False, 0.5),
    "attention": (0.10, True, False, 4.0),
    "add": (0.05, False, False, 0.0),
}


def _v2_kind(seed: int, key: str) -> str:
    """A kind of `V2_KINDS` by weight, from a hash of (seed, key): no random draws."""
    u = zlib.crc32(f"{seed}:{key}".encode()) / 2**32
    acc = 0.0
    for kind, (weight, *_) in V2_KINDS.items():
        acc += weight
        if u < acc:
            return kind
    return "add"


def _as_v2(layers: Iterable[Layer], seed: int) -> Iterator[Layer]:
    """The version-2 reading of drawn layers (see the module doc)."""
    below = 0
    for i, layer in enumerate(layers):
        kind = _v2_kind(seed, layer.signature if layer.signature is not None else f"#{i}")
        _, saves_in, saves_out, inner = V2_KINDS[kind]
        size = layer.out_bytes
        yield dataclasses.replace(
            layer,
            saved_bytes=round(inner * size),
            saves_input=saves_in,
            saves_output=saves_out,
            input_grad_bytes=below if i > 0 else 0,
        )
        below = size


def _within_limits(
    layers: Iterable[Layer], n_layers: int, static_fraction: float
) -> tuple[tuple[Layer, ...], int]:
    """`(layers, static_bytes)`, refused at the first layer that takes the static
    bytes past `planopt.limits.MAX_BYTES` or the sizes past `MAX_TOTAL_BYTES`.

    Both only grow layer by layer, so the first layer past a limit proves the
    chain cannot be made: `random_chain(10**7)` drew for 144 s before the
    profile refused its static bytes; it now stops after the layers that
    pass the limit (about 10^5 at the default static fraction).
    """
    out = []
    products = 0  # the layers' saved sizes, of which static_bytes is a share
    sizes = 0  # every byte field of every layer (planopt.limits.check_total_bytes)
    for i, layer in enumerate(layers):
        out.append(layer)
        products += layer.product_bytes
        sizes += sum(getattr(layer, field) for field in BYTE_FIELDS)
        static = round(static_fraction * products)
        if static > MAX_BYTES or static + sizes > MAX_TOTAL_BYTES:
            what, limit, name = (
                ("static_bytes", "2^40", "MAX_BYTES")
                if static > MAX_BYTES
                else ("static_bytes plus every layer's sizes", "2^53", "MAX_TOTAL_BYTES")
            )
            raise InvalidProfileError(
                f"random_chain: {what} must be at most {limit} bytes "
                f"(planopt.limits.{name}), but the first {i + 1} of n_layers={n_layers} "
                f"layers already pass it (static_fraction={static_fraction!r} of their "
                f"saved sizes is {static} bytes): ask for fewer layers or a smaller "
                f"static_fraction"
            )
    return tuple(out), round(static_fraction * products)


def random_chain(
    n_layers: int,
    *,
    seed: int = 0,
    family: str = "mixed",
    device: Device | None = None,
    static_fraction: float = 0.25,
    noise: float = 0.0,
    version: int = 1,
) -> Profile:
    """A synthetic profile of `n_layers` layers, deterministic per seed (see module doc)."""
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise InvalidProfileError(
            f"random_chain: n_layers must be an integer >= 1, got {n_layers!r}"
        )
    if family not in FAMILIES:
        raise InvalidProfileError(
            f"random_chain: family must be one of {', '.join(FAMILIES)}, got {family!r}"
        )
    for what, value in (("static_fraction", static_fraction), ("noise", noise)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and value >= 0)
        ):
            raise InvalidProfileError(
                f"random_chain: {what} must be finite and >= 0, got {value!r}"
            )
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise InvalidProfileError(f"random_chain: seed must be an integer >= 0, got {show(seed)}")
    if device is not None and not isinstance(device, Device):
        raise InvalidProfileError(
            f"random_chain: device must be a planopt.Device or None, got {show(device)}"
        )
    if isinstance(version, bool) or version not in (1, 2):
        raise InvalidProfileError(f"random_chain: version must be 1 or 2, got {show(version)}")
    rng = np.random.default_rng(seed)
    drawn = _family(rng, family, n_layers, float(noise))
    named = (dataclasses.replace(layer, name=f"l{i}") for i, layer in enumerate(drawn))
    layers, static = _within_limits(
        _as_v2(named, seed) if version == 2 else named, n_layers, static_fraction
    )
    return Profile(
        name=f"random-{family}-n{n_layers}-seed{seed}" + ("-v2" if version == 2 else ""),
        device=DEFAULT_DEVICE if device is None else device,
        static_bytes=static,
        layers=layers,
        source=(
            f"synthetic: planopt.random_chain(n_layers={n_layers}, seed={seed}, "
            f"family={family!r}, static_fraction={static_fraction!r}, noise={noise!r})"
        ),
    )
