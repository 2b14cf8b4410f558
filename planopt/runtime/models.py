"""Reference models in plain PyTorch, as chains: MLP, VGG-style CNN, ResNet, GPT.

Each comes in sizes: `tiny` (tests and the CPU run of the GPU study),
`small` (CPU benchmarks) and `gpu` (the GPU study on a user's accelerator).
Dropout sits in the MLP, the VGG classifier and the GPT blocks, and batch
norm in the ResNet, so recomputation is tested against RNG and buffer side
effects. Identical blocks get identical signatures (`module_signature`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.errors import RuntimeOptionError

REFERENCE_MODELS = ("mlp", "vgg", "resnet", "gpt")
SIZES = ("tiny", "small", "gpu")


def classification_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, target)


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy over every position."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


@dataclass(frozen=True)
class ReferenceModel:
    """A chain with its loss and a seeded batch maker."""

    name: str
    size: str
    chain: Chain
    loss_fn: LossFn
    batch_size: int
    make_batch: Callable[[torch.Generator, int], tuple[torch.Tensor, torch.Tensor]]

    def batch(
        self, seed: int = 0, device: torch.device | str = "cpu", batch_size: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(input, target)` drawn from a generator seeded with `seed`."""
        gen = torch.Generator().manual_seed(seed)
        x, y = self.make_batch(gen, batch_size or self.batch_size)
        return x.to(device), y.to(device)


# -- MLP ---------------------------------------------------------------------------


def mlp(in_features: int, width: int, depth: int, classes: int, dropout: float) -> Chain:
    """`depth` blocks Linear-ReLU-Dropout, then a linear head."""
    layers: dict[str, nn.Module] = {}
    for i in range(depth):
        layers[f"fc{i}"] = nn.Sequential(
            nn.Linear(in_features if i == 0 else width, width), nn.ReLU(), nn.Dropout(dropout)
        )
    layers["head"] = nn.Linear(width, classes)
    return Chain.from_modules(layers)


# -- VGG-style CNN -----------------------------------------------------------------


def vgg(
    channels: tuple[int, ...], convs: int, image: int, classes: int, hidden: int, dropout: float
) -> Chain:
    """Stages of `convs` conv-ReLU layers and a max-pool layer; a dropout classifier."""
    layers: dict[str, nn.Module] = {}
    c_in = 3
    for s, c_out in enumerate(channels, start=1):
        for c in range(1, convs + 1):
            layers[f"conv{s}_{c}"] = nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU())
            c_in = c_out
        layers[f"pool{s}"] = nn.MaxPool2d(2)
    side = image // 2 ** len(channels)
    layers["fc1"] = nn.Sequential(
        nn.Flatten(), nn.Linear(c_in * side * side, hidden), nn.ReLU(), nn.Dropout(dropout)
    )
    layers["fc2"] = nn.Linear(hidden, classes)
    return Chain.from_modules(layers)


# -- ResNet ------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """ResNet's basic residual block (two 3x3 convolutions, projection shortcut on change)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + self.shortcut(x))


def resnet(widths: tuple[int, ...], blocks: int, classes: int) -> Chain:
    """A stem, `blocks` residual blocks per stage (the chain's layers), a pooled head."""
    stem = nn.Sequential(
        nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
    )
    body: list[nn.Module] = []
    c_in = widths[0]
    for s, width in enumerate(widths):
        for b in range(blocks):
            body.append(BasicBlock(c_in, width, 2 if s > 0 and b == 0 else 1))
            c_in = width
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, classes))
    return Chain.from_blocks(body, prefix=stem, suffix=head, prefix_name="stem", suffix_name="head")


# -- GPT ---------------------------------------------------------------------------


class Embedding(nn.Module):
    """Token plus learned position embeddings, then dropout."""

    def __init__(self, vocab: int, d: int, seq: int, dropout: float) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.drop(self.tok(ids) + self.pos(positions))


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention written out (no fused kernel: same ops on CPU and GPU)."""

    def __init__(self, d: int, heads: int, seq: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.attn_drop = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = self.attn_drop(torch.softmax(scores, dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    """Pre-norm transformer block with dropout on both residual branches."""

    def __init__(self, d: int, heads: int, seq: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, seq, dropout)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class Head(nn.Module):
    """Final layer norm and the vocabulary projection."""

    def __init__(self, d: int, vocab: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


def gpt(vocab: int, d: int, heads: int, layers: int, seq: int, dropout: float) -> Chain:
    """GPT-style decoder: embedding prefix, `layers` blocks, norm-and-head suffix."""
    blocks = [Block(d, heads, seq, dropout) for _ in range(layers)]
    return Chain.from_blocks(
        blocks,
        prefix=Embedding(vocab, d, seq, dropout),
        suffix=Head(d, vocab),
        block_signature=f"gpt-block(d={d},heads={heads},seq={seq},dropout={dropout})",
        prefix_name="embed",
        suffix_name="head",
    )


# -- catalogue -----------------------------------------------------------------------

_CONFIGS: dict[str, dict[str, dict]] = {
    "mlp": {
        "tiny": dict(in_features=12, width=16, depth=3, classes=5, dropout=0.2, batch=4),
        "small": dict(in_features=256, width=1024, depth=6, classes=10, dropout=0.1, batch=128),
        "gpu": dict(in_features=1024, width=8192, depth=8, classes=1000, dropout=0.1, batch=2048),
    },
    "vgg": {
        "tiny": dict(channels=(4, 8), convs=2, image=8, classes=5, hidden=16, dropout=0.2, batch=2),
        "small": dict(
            channels=(16, 32, 64), convs=2, image=32, classes=10, hidden=128, dropout=0.1, batch=16
        ),
        "gpu": dict(
            channels=(64, 128, 256, 512),
            convs=2,
            image=128,
            classes=1000,
            hidden=1024,
            dropout=0.1,
            batch=64,
        ),
    },
    "resnet": {
        "tiny": dict(widths=(4, 8), blocks=1, image=8, classes=5, batch=2),
        "small": dict(widths=(16, 32, 64), blocks=2, image=32, classes=10, batch=16),
        "gpu": dict(widths=(64, 128, 256, 512), blocks=2, image=128, classes=1000, batch=64),
    },
    "gpt": {
        "tiny": dict(vocab=23, d=16, heads=2, layers=2, seq=8, dropout=0.2, batch=2),
        "small": dict(vocab=512, d=128, heads=4, layers=4, seq=64, dropout=0.1, batch=8),
        "gpu": dict(vocab=8192, d=1024, heads=16, layers=12, seq=512, dropout=0.1, batch=8),
    },
}


def reference_model(name: str, size: str = "tiny", *, seed: int = 0) -> ReferenceModel:
    """One of `REFERENCE_MODELS` at one of `SIZES`, its weights drawn from `seed`."""
    if name not in _CONFIGS:
        raise RuntimeOptionError(
            f"model must be one of {', '.join(REFERENCE_MODELS)}, got {name!r}"
        )
    if size not in _CONFIGS[name]:
        raise RuntimeOptionError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    cfg = dict(_CONFIGS[name][size])
    batch = cfg.pop("batch")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "mlp":
            chain = mlp(**cfg)
            n_in, classes = cfg["in_features"], cfg["classes"]

            def make(gen: torch.Generator, b: int) -> tuple[torch.Tensor, torch.Tensor]:
                x = torch.randn(b, n_in, generator=gen)
                return x, torch.randint(classes, (b,), generator=gen)

            return ReferenceModel(name, size, chain, classification_loss, batch, make)
        if name in ("vgg", "resnet"):
            image = cfg["image"] if name == "vgg" else cfg.pop("image")
            chain = vgg(**cfg) if name == "vgg" else resnet(**cfg)
            classes = cfg["classes"]

            def make(gen: torch.Generator, b: int) -> tuple[torch.Tensor, torch.Tensor]:
                x = torch.randn(b, 3, image, image, generator=gen)
                return x, torch.randint(classes, (b,), generator=gen)

            return ReferenceModel(name, size, chain, classification_loss, batch, make)
        chain = gpt(**cfg)
        vocab, seq = cfg["vocab"], cfg["seq"]

        def make(gen: torch.Generator, b: int) -> tuple[torch.Tensor, torch.Tensor]:
            ids = torch.randint(vocab, (b, seq + 1), generator=gen)
            return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

        return ReferenceModel(name, size, chain, lm_loss, batch, make)
