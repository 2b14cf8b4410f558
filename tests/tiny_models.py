"""Tiny models of several families, built from configs (no download), with a batch each.

Hugging Face `transformers` (GPT-2, Llama, Qwen2, BERT, GPT-NeoX) and
torchvision's ResNet (`tests/tv_resnet.py`). Dropout stays at the configs'
defaults (GPT-2, BERT: 0.1), so recomputation is tested against RNG.
"""

from __future__ import annotations

import torch

from tests.tv_resnet import resnet18, resnet_bottleneck

VOCAB, SEQ, BATCH = 64, 16, 2
# "act": activations outweigh parameters, so the peak depends on the plan
SIZES = {"tiny": (32, SEQ, BATCH), "act": (32, 64, 8)}
FAMILIES = ("gpt2", "llama", "qwen2", "bert", "neox", "resnet", "resnet-bottleneck")


def _hf(family: str, layers: int, d: int, seq: int):
    import transformers as tf

    common = dict(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if family == "gpt2":
        cfg = tf.GPT2Config(n_embd=d, n_head=2, n_layer=layers, n_positions=seq, **common)
        return tf.GPT2LMHeadModel(cfg)
    if family in ("llama", "qwen2"):
        config = tf.LlamaConfig if family == "llama" else tf.Qwen2Config
        cfg = config(
            hidden_size=d,
            intermediate_size=2 * d,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=layers,
            max_position_embeddings=seq,
            **common,
        )
        return (tf.LlamaForCausalLM if family == "llama" else tf.Qwen2ForCausalLM)(cfg)
    if family == "bert":
        cfg = tf.BertConfig(
            hidden_size=d,
            num_attention_heads=2,
            num_hidden_layers=layers,
            intermediate_size=2 * d,
            max_position_embeddings=seq,
            **common,
        )
        return tf.BertForMaskedLM(cfg)
    if family == "neox":
        cfg = tf.GPTNeoXConfig(
            hidden_size=d,
            num_attention_heads=4,
            num_hidden_layers=layers,
            intermediate_size=2 * d,
            max_position_embeddings=seq,
            **common,
        )
        return tf.GPTNeoXForCausalLM(cfg)
    raise ValueError(family)


def tiny(family: str, layers: int = 4, seed: int = 0, size: str = "tiny"):
    """(model in train mode, batch, loss_fn or None) for `family` at `size` (`SIZES`)."""
    d, seq, batch = SIZES[size]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        if family.startswith("resnet"):
            model = resnet18() if family == "resnet" else resnet_bottleneck()
            side = 32 if size == "tiny" else 64
            x = torch.randn(batch * 2, 3, side, side, generator=gen)
            y = torch.randint(10, (batch * 2,), generator=gen)

            def loss_fn(out, batch):
                return torch.nn.functional.cross_entropy(out, batch[1])

            return model.train(), (x, y), loss_fn
        model = _hf(family, layers, d, seq)
        ids = torch.randint(VOCAB, (batch, seq), generator=gen)
        return model.train(), {"input_ids": ids, "labels": ids}, None
