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
from collections.abc import Sequence

import numpy as np

from planopt.errors import InvalidProfileError, show
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


def _uniform(rng: np.random.Generator, n: int) -> list[Layer]:
    t_med = _lognormal(rng, 1e-3, 0.3)
    s_med = _lognormal(rng, 32 * MIB, 0.3)
    out = []
    for i in range(n):
        fwd = _lognormal(rng, t_med, 0.6)
        bwd = fwd * _lognormal(rng, 2.0, 0.3)
        saved = _lognormal(rng, s_med, 0.8)
        fwork = _lognormal(rng, s_med / 4, 0.8) if rng.random() < 0.3 else 0.0
        bwork = _lognormal(rng, s_med / 2, 0.8) if rng.random() < 0.3 else 0.0
        out.append(_layer(f"u{i}", fwd, bwd, saved, fwork, bwork))
    return out


def _split(rng: np.random.Generator, n: int, parts: int) -> list[int]:
    """`n` as `parts` positive lengths (random cut points)."""
    parts = max(1, min(parts, n))
    cuts = []
    if parts > 1:
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, n), parts - 1, replace=False))
    bounds = [0, *cuts, n]
    return [b - a for a, b in itertools.pairwise(bounds)]


def _cnn(rng: np.random.Generator, n: int) -> list[Layer]:
    top = _lognormal(rng, 96 * MIB, 0.4)  # first stage's activation size
    conv_time = _lognormal(rng, 1.5e-3, 0.3)
    stream = 1.2e12  # bytes/s a memory-bound op sustains
    out: list[Layer] = []
    for s, length in enumerate(_split(rng, n, int(rng.integers(3, 6)))):
        size = top / 2**s
        c_fwd = conv_time * float(rng.uniform(0.8, 1.25))
        c_bwd = c_fwd * float(rng.uniform(1.8, 2.2))
        cheap = int(rng.integers(1, 3))
        unit = [_layer(f"s{s}.conv", c_fwd, c_bwd, size, size / 4, 2 * size, f"s{s}.conv")]
        for j in range(cheap):
            t = size / stream + 5e-6
            unit.append(_layer(f"s{s}.op{j}", t, 1.5 * t, size, 0.0, 2 * size, f"s{s}.op{j}"))
        out += [unit[k % len(unit)] for k in range(length)]
    return out


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


def _transformer(rng: np.random.Generator, n: int, noise: float) -> list[Layer]:
    scale = _lognormal(rng, 12 * MIB, 0.3)
    if n < 3:
        return [_block_op(rng, j, scale) for j in range(n)]
    k = min(int(rng.integers(4, 13)), n - 2)
    block = [_block_op(rng, j, scale) for j in range(k)]
    repeats, extra = divmod(n - 2, k)
    embed = _layer("embed", 1e-4, 1.5e-4, scale / 2, scale, scale, "embed")
    head = [
        _layer(f"head{j}", 2e-4, 4e-4, 2 * scale, 4 * scale, 4 * scale, f"head{j}")
        for j in range(extra + 1)
    ]
    chain = list(repeated_chain(block, repeats, [embed], head))
    if noise > 0:
        chain = [_perturb(rng, layer, noise) for layer in chain]
    return chain


def _perturb(rng: np.random.Generator, layer: Layer, noise: float) -> Layer:
    f = max(0.1, 1.0 + noise * float(rng.standard_normal()))
    b = max(0.1, 1.0 + noise * float(rng.standard_normal()))
    return dataclasses.replace(layer, fwd=layer.fwd * f, bwd=layer.bwd * b)


def _family(rng: np.random.Generator, family: str, n: int, noise: float) -> list[Layer]:
    if family == "uniform":
        return _uniform(rng, n)
    if family == "cnn":
        return _cnn(rng, n)
    if family == "transformer":
        return _transformer(rng, n, noise)
    out: list[Layer] = []
    for seg, length in enumerate(_split(rng, n, int(rng.integers(2, 4)))):
        kind = str(rng.choice(["uniform", "cnn", "transformer"]))
        for layer in _family(rng, kind, length, noise):
            sig = None if layer.signature is None else f"seg{seg}.{kind}.{layer.signature}"
            out.append(dataclasses.replace(layer, signature=sig))
    return out


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


def _as_v2(layers: Sequence[Layer], seed: int) -> tuple[Layer, ...]:
    """The version-2 reading of drawn layers (see the module doc)."""
    out = []
    below = 0
    for i, layer in enumerate(layers):
        kind = _v2_kind(seed, layer.signature if layer.signature is not None else f"#{i}")
        _, saves_in, saves_out, inner = V2_KINDS[kind]
        size = layer.out_bytes
        out.append(
            dataclasses.replace(
                layer,
                saved_bytes=round(inner * size),
                saves_input=saves_in,
                saves_output=saves_out,
                input_grad_bytes=below if i > 0 else 0,
            )
        )
        below = size
    return tuple(out)


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
    layers = tuple(dataclasses.replace(layer, name=f"l{i}") for i, layer in enumerate(drawn))
    if version == 2:
        layers = _as_v2(layers, seed)
    static = round(static_fraction * sum(layer.product_bytes for layer in layers))
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
