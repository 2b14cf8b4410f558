"""The side-by-side benchmark's models: small `transformers` configs and a torchvision ResNet.

No weights are downloaded: every model is built from a config with a fixed
seed. Sizes are chosen so that one training step takes roughly 0.05-0.3 s
of one CPU thread, with activations the larger part of the peak (so a
memory plan matters), and nothing is tuned to planopt: the same model,
batch and seed go to every method. Dropout stays at the configs' defaults
(GPT-2, BERT: 0.1), so every recomputing method replays RNG.

The ResNet is `tests/tv_resnet.py` (torchvision's published architecture:
BasicBlock stages `layer1 .. layer4`, in-place ReLUs, `out += identity`),
which the `apply` tests already use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

VOCAB = 512


@dataclass(frozen=True)
class Bench:
    """One benchmark model: a fresh model in train mode, its batch and its loss.

    `loss_fn(output, batch)` is None for Hugging Face models (`output.loss`).
    `hf`: the model has `activation_checkpointing_enable`.
    """

    name: str
    model: nn.Module
    batch: Any
    loss_fn: Callable | None
    hf: bool
    config: str


def _common() -> dict:
    return dict(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def _hf_model(family: str, scale: str) -> tuple[nn.Module, str, int, int]:
    import transformers as tf

    small = scale == "tiny"
    layers, d, seq, batch = (4, 32, 64, 4) if small else (6, 128, 256, 4)
    heads = 4
    if family == "gpt2":
        cfg = tf.GPT2Config(n_embd=d, n_head=heads, n_layer=layers, n_positions=seq, **_common())
        model = tf.GPT2LMHeadModel(cfg)
    elif family in ("llama", "qwen2"):
        config = tf.LlamaConfig if family == "llama" else tf.Qwen2Config
        cfg = config(
            hidden_size=d,
            intermediate_size=int(2.75 * d),
            num_attention_heads=heads,
            num_key_value_heads=heads // 2,
            num_hidden_layers=layers,
            max_position_embeddings=seq,
            **_common(),
        )
        model = (tf.LlamaForCausalLM if family == "llama" else tf.Qwen2ForCausalLM)(cfg)
    elif family == "bert":
        cfg = tf.BertConfig(
            hidden_size=d,
            num_attention_heads=heads,
            num_hidden_layers=layers,
            intermediate_size=4 * d,
            max_position_embeddings=seq,
            **_common(),
        )
        model = tf.BertForMaskedLM(cfg)
    else:
        raise ValueError(f"unknown family {family!r}")
    model.config.use_cache = False  # training: no KV cache (what HF checkpointing sets too)
    desc = f"{layers} layers, hidden {d}, seq {seq}, batch {batch}, vocab {VOCAB}"
    return model, desc, seq, batch


def build(name: str, seed: int = 0, scale: str = "bench") -> Bench:
    """A fresh `name` model (gpt2, llama, qwen2, bert, resnet) in train mode, seeded."""
    if scale not in ("bench", "tiny"):
        raise ValueError(f"scale must be 'bench' or 'tiny', got {scale!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        if name == "resnet":
            from tests.tv_resnet import resnet18

            width, side, n = (4, 32, 4) if scale == "tiny" else (16, 96, 32)
            model = resnet18(width=width)
            x = torch.randn(n, 3, side, side, generator=gen)
            y = torch.randint(10, (n,), generator=gen)

            def loss_fn(out, batch):
                return nn.functional.cross_entropy(out, batch[1])

            desc = f"ResNet-18 (BasicBlock [2,2,2,2]), width {width}, {n}x3x{side}x{side}"
            return Bench(name, model.train(), (x, y), loss_fn, False, desc)
        model, desc, seq, batch = _hf_model(name, scale)
        ids = torch.randint(VOCAB, (batch, seq), generator=gen)
        if name == "bert":  # masked LM: 15% of positions carry a label, the rest -100
            mask = torch.rand(batch, seq, generator=gen) < 0.15
            labels = torch.where(mask, ids, torch.full_like(ids, -100))
        else:
            labels = ids
        return Bench(name, model.train(), {"input_ids": ids, "labels": labels}, None, True, desc)


MODELS = ("gpt2", "llama", "qwen2", "bert", "resnet")
