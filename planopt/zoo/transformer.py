"""BERT-base and GPT-2-style decoders (HF layouts, eager attention), one layer per operator.

Every encoder/decoder block contributes the same `BLOCK_OPS` operators with
the same signatures, so repeated blocks show as a period in the chain.
Residual dropout and the residual add are one layer (`dropout-add`).
"""

from __future__ import annotations

from planopt.zoo import ops
from planopt.zoo.chain import Group, Network, single
from planopt.zoo.tensors import INT64, Op, Tensor

BLOCK_OPS = 13  # operators (= layers) per block, BERT and GPT alike


def _tokens(batch: int, seq: int, *extra: str) -> tuple[Tensor, ...]:
    return tuple(Tensor(key, (batch, seq), INT64, static=True) for key in ("ids", "labels", *extra))


def _attention(p: str, x: Tensor, d: int, heads: int, *, causal: bool) -> list[Op]:
    """QKV projection .. output projection (6 ops); the last op's output is the attention output."""
    qkv = ops.linear(f"{p}.qkv", x, 3 * d)
    scores = ops.attention_scores(f"{p}.scores", qkv.out, heads, causal=causal)
    probs = ops.softmax(f"{p}.softmax", scores.out)
    drop = ops.dropout(f"{p}.attn_dropout", probs.out)
    ctx = ops.attention_context(f"{p}.context", drop.out, qkv.out, heads)
    proj = ops.linear(f"{p}.attn_out", ctx.out, d)
    return [qkv, scores, probs, drop, ctx, proj]


def bert_block(p: str, x: Tensor, d: int, heads: int) -> list[Op]:
    """Post-LN encoder block (HF BertLayer): attention, dropout-add, LN, FFN, dropout-add, LN."""
    att = _attention(p, x, d, heads, causal=False)
    res1 = ops.dropout_add(f"{p}.attn_residual", att[-1].out, x)
    ln1 = ops.layernorm(f"{p}.ln1", res1.out)
    up = ops.linear(f"{p}.ffn_up", ln1.out, 4 * d)
    act = ops.gelu(f"{p}.gelu", up.out)
    down = ops.linear(f"{p}.ffn_down", act.out, d)
    res2 = ops.dropout_add(f"{p}.ffn_residual", down.out, ln1.out)
    ln2 = ops.layernorm(f"{p}.ln2", res2.out)
    return [*att, res1, ln1, up, act, down, res2, ln2]


def gpt_block(p: str, x: Tensor, d: int, heads: int) -> list[Op]:
    """Pre-LN decoder block (HF GPT2Block): LN, causal attention, dropout-add, LN, MLP, ..."""
    ln1 = ops.layernorm(f"{p}.ln1", x)
    att = _attention(p, ln1.out, d, heads, causal=True)
    res1 = ops.dropout_add(f"{p}.attn_residual", att[-1].out, x)
    ln2 = ops.layernorm(f"{p}.ln2", res1.out)
    up = ops.linear(f"{p}.mlp_up", ln2.out, 4 * d)
    act = ops.gelu(f"{p}.gelu", up.out)
    down = ops.linear(f"{p}.mlp_down", act.out, d)
    res2 = ops.dropout_add(f"{p}.mlp_residual", down.out, res1.out)
    return [ln1, *att, res1, ln2, up, act, down, res2]


def bert_base(
    batch: int,
    seq: int,
    *,
    blocks: int = 12,
    d: int = 768,
    heads: int = 12,
    vocab: int = 30522,
    positions: int = 512,
) -> Network:
    """BERT-base pre-training with the MLM head on every position (as HF BertForMaskedLM).

    Layers: embeddings (lookups + LN + dropout), `blocks` x 13 operators, then
    the MLM transform (dense, GELU, LN), the decoder to the vocabulary (tied
    to the word embeddings) and the loss.
    """
    ids, labels, types, mask = _tokens(batch, seq, "token_type_ids", "attention_mask")
    emb = ops.embedding("embed", ids, d, (vocab, 2), positions=positions)
    ln = ops.layernorm("embed.ln", emb.out)
    drop = ops.dropout("embed.dropout", ln.out)
    groups = [Group("embed", (emb, ln, drop))]
    x = drop.out
    for b in range(blocks):
        block = bert_block(f"block{b}", x, d, heads)
        groups += [single(op) for op in block]
        x = block[-1].out
    dense = ops.linear("mlm.dense", x, d)
    act = ops.gelu("mlm.gelu", dense.out)
    ln = ops.layernorm("mlm.ln", act.out)
    dec = ops.linear("mlm.decoder", ln.out, vocab, tied=True)
    loss = ops.cross_entropy("loss", dec.out)
    groups += [single(op) for op in (dense, act, ln, dec, loss)]
    return Network(
        name="bert-base",
        description=(
            f"BERT-base ({blocks} blocks, d_model {d}, {heads} heads, vocab {vocab}), batch "
            f"{batch}, sequence {seq}, MLM head on all positions; eager attention, one layer per "
            f"operator (dropout and residual add merged)"
        ),
        groups=tuple(groups),
        batch_inputs=(ids, labels, types, mask),
    )


def gpt(
    blocks: int, batch: int, seq: int, *, d: int = 768, heads: int = 12, vocab: int = 50257
) -> Network:
    """GPT-2-small-like decoder with `blocks` blocks, LM loss on every position.

    Layers: embeddings (token + position, dropout), `blocks` x 13 operators,
    final LN, LM head (tied to the token embeddings) and the loss.
    """
    ids, labels = _tokens(batch, seq)
    emb = ops.embedding("embed", ids, d, (vocab,), positions=seq)
    drop = ops.dropout("embed.dropout", emb.out)
    groups = [Group("embed", (emb, drop))]
    x = drop.out
    for b in range(blocks):
        block = gpt_block(f"block{b}", x, d, heads)
        groups += [single(op) for op in block]
        x = block[-1].out
    ln = ops.layernorm("ln_f", x)
    head = ops.linear("lm_head", ln.out, vocab, bias=False, tied=True)
    loss = ops.cross_entropy("loss", head.out)
    groups += [single(op) for op in (ln, head, loss)]
    return Network(
        name=f"gpt-{blocks}blk",
        description=(
            f"GPT-2-style decoder ({blocks} blocks, d_model {d}, {heads} heads, vocab {vocab}), "
            f"batch {batch}, sequence {seq}, LM loss on all positions; eager causal attention, "
            f"one layer per operator (dropout and residual add merged)"
        ),
        groups=tuple(groups),
        batch_inputs=(ids, labels),
    )
