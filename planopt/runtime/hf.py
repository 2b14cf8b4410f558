"""Hugging Face `transformers` models as chains (the `models` extra), built from a config.

No weights are downloaded: each model is built from a small config with
random weights, which is all a memory and time profile needs. The chain
cuts the model where its own forward does: an embedding prefix, one layer
per decoder block, the final norm and the vocabulary head as a suffix.
Attention runs through `sdpa` (causal when no mask is given).

    ref = hf_model("gpt2", "tiny")        # a ReferenceModel, like reference_model(...)
    prof = profile(ref.chain, ref.batch(), ref.loss_fn, link=...)

`HF_MODELS` lists the families; `hf_available()` says whether
`transformers` imports.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import nn

from planopt.runtime.chain import Chain
from planopt.runtime.errors import RuntimeOptionError
from planopt.runtime.models import ReferenceModel, lm_loss

HF_MODELS = ("gpt2", "llama")

_CONFIGS: dict[str, dict[str, dict]] = {
    "gpt2": {
        "tiny": dict(vocab=97, d=32, heads=2, layers=2, seq=16, batch=2),
        "small": dict(vocab=512, d=128, heads=4, layers=4, seq=64, batch=8),
    },
    "llama": {
        "tiny": dict(vocab=97, d=32, heads=4, kv_heads=2, layers=2, seq=16, batch=2),
        "small": dict(vocab=512, d=128, heads=4, kv_heads=2, layers=4, seq=64, batch=8),
    },
}


def hf_available() -> bool:
    """Whether `transformers` is installed (the `models` extra)."""
    return importlib.util.find_spec("transformers") is not None


class _Gpt2Embed(nn.Module):
    def __init__(self, wte: nn.Module, wpe: nn.Module, drop: nn.Module) -> None:
        super().__init__()
        self.wte, self.wpe, self.drop = wte, wpe, drop

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.drop(self.wte(ids) + self.wpe(positions))


class _Block(nn.Module):
    """A decoder block called as its model calls it, without cache or mask."""

    def __init__(self, block: nn.Module, rotary: nn.Module | None = None) -> None:
        super().__init__()
        self.block = block
        self.rotary = rotary

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.rotary is None:
            out = self.block(h, use_cache=False)
        else:
            positions = torch.arange(h.shape[1], device=h.device)[None]
            out = self.block(
                h,
                position_ids=positions,
                position_embeddings=self.rotary(h, positions),
                use_cache=False,
            )
        return out[0] if isinstance(out, tuple) else out


class _Head(nn.Module):
    def __init__(self, norm: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.norm, self.head = norm, head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(h))


def gpt2_chain(
    vocab: int, d: int, heads: int, layers: int, seq: int, positions: int | None = None
) -> Chain:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=vocab,
        n_embd=d,
        n_head=heads,
        n_layer=layers,
        n_positions=positions or seq,
        bos_token_id=None,
        eos_token_id=None,
    )
    config._attn_implementation = "sdpa"
    return chain_of_gpt2(
        GPT2LMHeadModel(config), block_signature=f"gpt2-block(d={d},heads={heads},seq={seq})"
    )


def chain_of_gpt2(model: nn.Module, block_signature: str | None = None) -> Chain:
    """The chain of an existing `GPT2LMHeadModel`, over the model's own modules.

    Its parameters are the model's, so an optimizer on `model.parameters()`
    trains what the chain runs, and `chain.loss(ids, targets, lm_loss)` is
    `lm_loss(model(ids).logits, targets)` bitwise (no padding mask).
    """
    body = model.transformer
    config = model.config
    return Chain.from_blocks(
        [_Block(b) for b in body.h],
        prefix=_Gpt2Embed(body.wte, body.wpe, body.drop),
        suffix=_Head(body.ln_f, model.lm_head),
        block_signature=block_signature or f"gpt2-block(d={config.n_embd},heads={config.n_head})",
        prefix_name="embed",
        suffix_name="head",
    )


def llama_chain(
    vocab: int,
    d: int,
    heads: int,
    kv_heads: int,
    layers: int,
    seq: int,
    intermediate: int | None = None,
    tie: bool = False,
    positions: int | None = None,
) -> Chain:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=d,
        intermediate_size=intermediate or 4 * d,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        max_position_embeddings=positions or seq,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=tie,
    )
    config._attn_implementation = "sdpa"
    return chain_of_llama(
        LlamaForCausalLM(config),
        block_signature=f"llama-block(d={d},heads={heads},kv={kv_heads},seq={seq})",
    )


def chain_of_llama(model: nn.Module, block_signature: str | None = None) -> Chain:
    """The chain of an existing `LlamaForCausalLM`, over the model's own modules (as
    `chain_of_gpt2`)."""
    body = model.model
    c = model.config
    return Chain.from_blocks(
        [_Block(b, body.rotary_emb) for b in body.layers],
        prefix=body.embed_tokens,
        suffix=_Head(body.norm, model.lm_head),
        block_signature=block_signature
        or f"llama-block(d={c.hidden_size},heads={c.num_attention_heads},"
        f"kv={c.num_key_value_heads})",
        prefix_name="embed",
        suffix_name="head",
    )


class _Encoder(nn.Module):
    """An encoder layer called as its model calls it, with no attention mask."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = self.layer(h)
        return out[0] if isinstance(out, tuple) else out


class _BertEmbed(nn.Module):
    def __init__(self, embeddings: nn.Module) -> None:
        super().__init__()
        self.embeddings = embeddings

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(input_ids=ids)


def bert_chain(
    vocab: int, d: int, heads: int, layers: int, seq: int, positions: int | None = None
) -> Chain:
    """BERT masked LM: embeddings, one layer per encoder layer, the MLM head (tied decoder)."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=vocab,
        hidden_size=d,
        num_attention_heads=heads,
        num_hidden_layers=layers,
        intermediate_size=4 * d,
        max_position_embeddings=positions or max(512, seq),
    )
    config._attn_implementation = "sdpa"
    model = BertForMaskedLM(config)
    return Chain.from_blocks(
        [_Encoder(layer) for layer in model.bert.encoder.layer],
        prefix=_BertEmbed(model.bert.embeddings),
        suffix=model.cls,
        block_signature=f"bert-layer(d={d},heads={heads},seq={seq})",
        prefix_name="embed",
        suffix_name="head",
    )


def hf_model(name: str, size: str = "tiny", *, seed: int = 0) -> ReferenceModel:
    """One of `HF_MODELS` at `tiny` or `small`, random weights from `seed`."""
    if name not in _CONFIGS:
        raise RuntimeOptionError(f"model must be one of {', '.join(HF_MODELS)}, got {name!r}")
    if size not in _CONFIGS[name]:
        raise RuntimeOptionError(f"size must be one of {', '.join(_CONFIGS[name])}, got {size!r}")
    if not hf_available():
        raise ImportError(
            "hf_model: needs the transformers package (pip install 'planopt[models]')"
        )
    cfg = dict(_CONFIGS[name][size])
    batch = cfg.pop("batch")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        chain = gpt2_chain(**cfg) if name == "gpt2" else llama_chain(**cfg)
    vocab, seq = cfg["vocab"], cfg["seq"]

    def make(gen: torch.Generator, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(vocab, (b, seq + 1), generator=gen)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    return ReferenceModel(f"hf-{name}", size, chain, lm_loss, batch, make)
