"""Constructors for the operators the zoo's networks use, each with its saving rule.

Each constructor's docstring states what PyTorch's autograd saves for the
backward of that operator (from `tools/autograd/derivatives.yaml` and the
module code): that is the `saves` of the `Op`. Weights are saved too but live
in `static_bytes`, so they are not listed; a saved batch tensor (images, ids)
is, as it tells that the layer's backward reads its input. Whether a saved
tensor is a layer's input, output or internal is decided per layer chain in
`planopt.zoo.chain`. Kernels are the forward and backward work in FLOPs and
bytes for the roofline model; activations are fp16.

NOTE (size): a catalogue of 19 independent constructors, one per operator,
each with the autograd rule it encodes; split by theme it would only move
the same functions apart.
"""

from __future__ import annotations

from planopt.zoo.tensors import BOOL, FP16, FP32, INT64, Kernel, Op, Tensor, gemm, stream


def _new(key: str, shape: tuple[int, ...], itemsize: int = FP16) -> Tensor:
    return Tensor(key, tuple(int(d) for d in shape), itemsize)


def conv2d(
    name: str,
    x: Tensor,
    cout: int,
    k: int,
    *,
    stride: int = 1,
    pad: int | None = None,
    bias: bool = False,
) -> Op:
    """Convolution; saves its input `x` (for the weight gradient; the weight is static).

    FLOPs as an implicit GEMM: M = N*Ho*Wo, N = cout, K = cin*k*k, 2*M*N*K.
    Backward is a weight-gradient GEMM plus a data-gradient GEMM of the same
    size, except when `x` is the network input (no data gradient needed).
    No cuDNN workspace is modelled: it depends on the algorithm chosen at run time.
    """
    p = k // 2 if pad is None else pad
    n, cin, h, w = x.shape
    ho = (h + 2 * p - k) // stride + 1
    wo = (w + 2 * p - k) // stride + 1
    out = _new(f"{name}.out", (n, cout, ho, wo))
    m, kk = n * ho * wo, cin * k * k
    w_bytes = FP16 * cout * kk
    flops = 2.0 * m * cout * kk + (m * cout if bias else 0)
    fwd = (Kernel(flops, x.nbytes + w_bytes + out.nbytes, tensor=True),)
    bwd = [Kernel(2.0 * m * cout * kk, out.nbytes + x.nbytes + w_bytes, tensor=True)]
    if not x.static:
        bwd.append(Kernel(2.0 * m * cout * kk, out.nbytes + w_bytes + x.nbytes, tensor=True))
    if bias:
        bwd.append(stream(out.nbytes, out.numel))
    return Op(
        name=name,
        signature=f"conv{k}x{k}/s{stride}[{x.dims}->{out.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=(x,),
        fwd=fwd,
        bwd=tuple(bwd),
        params=cout * kk + (cout if bias else 0),
    )


def relu(name: str, x: Tensor, *, inplace: bool = True) -> Op:
    """ReLU; saves its output (threshold_backward reads the result).

    In place (torchvision's `ReLU(inplace=True)`) the output is the input's storage.
    """
    out = x if inplace else _new(f"{name}.out", x.shape)
    return Op(
        name=name,
        signature=f"relu[{x.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=(out,),
        fwd=(stream(2 * x.nbytes, x.numel),),
        bwd=(stream(3 * x.nbytes, x.numel),),
    )


def batchnorm(name: str, x: Tensor) -> Op:
    """Training-mode batch norm; saves its input plus per-channel mean and invstd (fp32).

    Forward reads `x` twice (statistics, normalisation) and writes the output;
    backward reads the gradient and `x` twice and writes the input gradient.
    Parameters (2C) and running statistics (2C fp32 buffers) are static.
    """
    c = x.shape[1]
    mean = _new(f"{name}.mean", (c,), FP32)
    invstd = _new(f"{name}.invstd", (c,), FP32)
    out = _new(f"{name}.out", x.shape)
    return Op(
        name=name,
        signature=f"bn[{x.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=(x, mean, invstd),
        fwd=(stream(3 * x.nbytes, 8 * x.numel),),
        bwd=(stream(5 * x.nbytes, 10 * x.numel),),
        params=2 * c,
        buffer_bytes=2 * c * FP32,
    )


def maxpool2d(name: str, x: Tensor, k: int, stride: int, pad: int = 0) -> Op:
    """Max pooling; saves its input and the argmax indices (int64, one per output element).

    (`max_pool2d_with_indices` backward takes `self` and `indices`.)
    """
    n, c, h, w = x.shape
    ho = (h + 2 * pad - k) // stride + 1
    wo = (w + 2 * pad - k) // stride + 1
    out = _new(f"{name}.out", (n, c, ho, wo))
    idx = _new(f"{name}.indices", out.shape, INT64)
    return Op(
        name=name,
        signature=f"maxpool{k}x{k}/s{stride}[{x.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=(x, idx),
        fwd=(stream(x.nbytes + out.nbytes + idx.nbytes, k * k * out.numel),),
        # zero-fill the input gradient, then scatter the output gradient into it
        bwd=(stream(2 * x.nbytes + out.nbytes + idx.nbytes),),
    )


def adaptive_avgpool(name: str, x: Tensor, size: int) -> Op:
    """Adaptive average pooling; what it saves depends on the output size.

    To 1x1, ATen computes `x.mean((-1, -2))`, whose backward needs only
    shapes: nothing saved. Otherwise `_adaptive_avg_pool2d` keeps its input
    (`self`), though its backward reads only the shape.
    """
    n, c = x.shape[:2]
    out = _new(f"{name}.out", (n, c, size, size))
    return Op(
        name=name,
        signature=f"avgpool->{size}[{x.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=() if size == 1 else (x,),
        fwd=(stream(x.nbytes + out.nbytes, x.numel),),
        bwd=(stream(x.nbytes + out.nbytes),),
    )


def flatten(x: Tensor) -> Tensor:
    """`x.flatten(1)` is a view: the same storage under a new shape (same key)."""
    n = x.shape[0]
    return Tensor(x.key, (n, x.numel // n), x.itemsize, x.static)


def add(name: str, a: Tensor, b: Tensor) -> Op:
    """Elementwise add (the residual join); saves nothing.

    Its backward passes the gradient to both branches; the accumulation of the
    two gradients at the fork is charged here (read two, write one).
    """
    out = _new(f"{name}.out", a.shape)
    return Op(
        name=name,
        signature=f"add[{a.dims}]",
        inputs=(a, b),
        outputs=(out,),
        saves=(),
        fwd=(stream(3 * out.nbytes, out.numel),),
        bwd=(stream(3 * out.nbytes, out.numel),),
    )


def linear(name: str, x: Tensor, out_features: int, *, bias: bool = True, tied: bool = False) -> Op:
    """Linear layer (addmm); saves its input `x` (the weight is static).

    Forward is one GEMM (M = rows, K = in, N = out; the bias add is fused);
    backward a data-gradient GEMM (skipped for a static input) and a
    weight-gradient GEMM of the same FLOPs, plus the bias-gradient reduction.
    `tied`: the weight belongs to another op (the LM head shares the token
    embedding), so only the bias counts as parameters here.
    """
    fin = x.shape[-1]
    rows = x.numel // fin
    out = _new(f"{name}.out", (*x.shape[:-1], out_features))
    bwd = [gemm(fin, out_features, rows)]  # dW = X^T dY
    if not x.static:
        bwd.append(gemm(rows, fin, out_features))  # dX = dY W
    if bias:
        bwd.append(stream(out.nbytes, out.numel))
    params = (0 if tied else fin * out_features) + (out_features if bias else 0)
    return Op(
        name=name,
        signature=f"linear[{x.dims}->{out_features}]",
        inputs=(x,),
        outputs=(out,),
        saves=(x,),
        fwd=(gemm(rows, out_features, fin),),
        bwd=tuple(bwd),
        params=params,
    )


def layernorm(name: str, x: Tensor) -> Op:
    """Layer norm over the last dim; saves its input plus per-row mean and rstd (fp32)."""
    d = x.shape[-1]
    rows = x.numel // d
    mean = _new(f"{name}.mean", (rows,), FP32)
    rstd = _new(f"{name}.rstd", (rows,), FP32)
    out = _new(f"{name}.out", x.shape)
    stats = mean.nbytes + rstd.nbytes
    return Op(
        name=name,
        signature=f"layernorm[{x.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=(x, mean, rstd),
        fwd=(stream(2 * x.nbytes + stats, 8 * x.numel),),
        # input-gradient kernel (dy, x, stats -> dx) and gamma/beta-gradient kernel (dy, x)
        bwd=(stream(3 * x.nbytes + stats, 10 * x.numel), stream(2 * x.nbytes, 4 * x.numel)),
        params=2 * d,
    )


def gelu(name: str, x: Tensor) -> Op:
    """GELU (native `F.gelu`, tanh or erf); saves its input.

    HF's Python `gelu_new` would save several intermediates; we assume the fused op.
    """
    out = _new(f"{name}.out", x.shape)
    return Op(
        name=name,
        signature=f"gelu[{x.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=(x,),
        fwd=(stream(2 * x.nbytes, 20 * x.numel),),
        bwd=(stream(3 * x.nbytes, 30 * x.numel),),
    )


def dropout(name: str, x: Tensor) -> Op:
    """Dropout (`native_dropout`); saves only its mask, bool, 1 byte per element."""
    out = _new(f"{name}.out", x.shape)
    mask = _new(f"{name}.mask", x.shape, BOOL)
    return Op(
        name=name,
        signature=f"dropout[{x.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=(mask,),
        fwd=(stream(x.nbytes + out.nbytes + mask.nbytes, 2 * x.numel),),
        bwd=(stream(2 * x.nbytes + mask.nbytes, x.numel),),
    )


def dropout_add(name: str, y: Tensor, residual: Tensor) -> Op:
    """`residual + dropout(y)`: dropout saves its bool mask, the add saves nothing.

    The dropout output is a temporary that dies inside the op.
    """
    dropped = _new(f"{name}.dropped", y.shape)
    mask = _new(f"{name}.mask", y.shape, BOOL)
    out = _new(f"{name}.out", y.shape)
    return Op(
        name=name,
        signature=f"dropout-add[{y.dims}]",
        inputs=(y, residual),
        outputs=(out,),
        saves=(mask,),
        scratch=(dropped,),
        fwd=(
            stream(y.nbytes + mask.nbytes + dropped.nbytes, 2 * y.numel),
            stream(3 * out.nbytes, out.numel),
        ),
        # residual-gradient accumulation at the fork, then dropout backward
        bwd=(stream(3 * out.nbytes, out.numel), stream(2 * y.nbytes + mask.nbytes, y.numel)),
    )


def softmax(name: str, x: Tensor) -> Op:
    """Softmax over the last dim; saves its output (softmax_backward reads the result)."""
    out = _new(f"{name}.out", x.shape)
    return Op(
        name=name,
        signature=f"softmax[{x.dims}]",
        inputs=(x,),
        outputs=(out,),
        saves=(out,),
        fwd=(stream(2 * x.nbytes, 5 * x.numel),),
        bwd=(stream(3 * x.nbytes, 3 * x.numel),),
    )


def _heads(qkv: Tensor, heads: int) -> tuple[int, int, int, int]:
    b, s, three_d = qkv.shape
    d = three_d // 3
    return b, s, d, d // heads


def attention_scores(name: str, qkv: Tensor, heads: int, *, causal: bool) -> Op:
    """`mask(q @ k^T / sqrt(dh))` in eager attention; saves the q and k it multiplied.

    q and k are permuted views of the QKV projection; `torch.matmul` folds
    the batch and head dims with a reshape, which copies them, and `bmm` saves
    those copies (b*s*d elements each). The scaling (divide by a Python
    scalar) and the mask (BERT: add of the additive mask; GPT: `where` on a
    bool buffer) save nothing; they make one extra score-sized temporary.
    """
    b, s, _, dh = _heads(qkv, heads)
    q = _new(f"{name}.q", (b, heads, s, dh))
    k = _new(f"{name}.k", (b, heads, s, dh))
    raw = _new(f"{name}.raw", (b, heads, s, s))
    out = _new(f"{name}.out", (b, heads, s, s))
    bmm_flops = 2.0 * b * heads * s * s * dh
    sb = out.nbytes
    return Op(
        name=name,
        signature=f"attn-scores[{qkv.dims},h{heads}{',causal' if causal else ''}]",
        inputs=(qkv,),
        outputs=(out,),
        saves=(q, k),
        scratch=(raw,),
        fwd=(
            stream(2 * q.nbytes),
            stream(2 * k.nbytes),
            Kernel(bmm_flops, q.nbytes + k.nbytes + sb, tensor=True),
            stream(2 * sb, out.numel),
            stream(2 * sb, out.numel),
        ),
        bwd=(
            stream(2 * sb, out.numel),
            stream(2 * sb, out.numel),
            Kernel(bmm_flops, sb + k.nbytes + q.nbytes, tensor=True),  # dq = dS k
            Kernel(bmm_flops, sb + q.nbytes + k.nbytes, tensor=True),  # dk = dS^T q
            stream(2 * (q.nbytes + k.nbytes)),  # into the QKV gradient's layout
        ),
        bwd_scratch_bytes=sb + q.nbytes + k.nbytes,
    )


def attention_context(name: str, probs: Tensor, qkv: Tensor, heads: int) -> Op:
    """`probs @ v`, heads merged back to (b, s, d); saves both bmm operands.

    The operands are the (dropped-out) probabilities and the reshaped copy of
    v (b*s*d elements). The head-layout result is a temporary; the merged
    output is a new contiguous tensor.
    """
    b, s, d, dh = _heads(qkv, heads)
    v = _new(f"{name}.v", (b, heads, s, dh))
    ctx = _new(f"{name}.ctx", (b, heads, s, dh))
    out = _new(f"{name}.out", (b, s, d))
    bmm_flops = 2.0 * b * heads * s * s * dh
    sb = probs.nbytes
    return Op(
        name=name,
        signature=f"attn-context[{qkv.dims},h{heads}]",
        inputs=(probs, qkv),
        outputs=(out,),
        saves=(probs, v),
        scratch=(ctx,),
        fwd=(
            stream(2 * v.nbytes),
            Kernel(bmm_flops, sb + v.nbytes + ctx.nbytes, tensor=True),
            stream(2 * ctx.nbytes),
        ),
        bwd=(
            stream(2 * ctx.nbytes),
            Kernel(bmm_flops, ctx.nbytes + v.nbytes + sb, tensor=True),  # dP = dC v^T
            Kernel(bmm_flops, sb + ctx.nbytes + v.nbytes, tensor=True),  # dV = P^T dC
            stream(2 * v.nbytes),
        ),
        bwd_scratch_bytes=ctx.nbytes + v.nbytes,
    )


def embedding(name: str, ids: Tensor, d: int, tables: tuple[int, ...], *, positions: int) -> Op:
    """Sum of token (and position, token-type) embeddings; saves only the (static) ids.

    (`embedding_backward` takes `indices`: the layer's backward reads its input,
    the batch, which is static.)

    `tables` are the row counts of the per-token tables (word, token type);
    the position table has `positions` rows and is broadcast over the batch.
    The first lookup's result is a temporary of the sum.
    """
    b, s = ids.shape
    out = _new(f"{name}.out", (b, s, d))
    first = _new(f"{name}.tokens", (b, s, d))
    fwd = [stream(2 * out.nbytes + ids.nbytes) for _ in tables]  # gathers
    fwd.append(stream(2 * s * d * FP16))  # position gather
    fwd += [stream(3 * out.nbytes, out.numel) for _ in tables]  # adds (the last: positions)
    # embedding_dense_backward per table: read the gradient and ids, write the table gradient
    bwd = [stream(out.nbytes + ids.nbytes + rows * d * FP16) for rows in (*tables, positions)]
    return Op(
        name=name,
        signature=f"embedding[{ids.dims}->{d},tables={'+'.join(map(str, tables))}+{positions}]",
        inputs=(ids,),
        outputs=(out,),
        saves=(ids,),
        scratch=(first,),
        fwd=tuple(fwd),
        bwd=tuple(bwd),
        params=(sum(tables) + positions) * d,
    )


def cross_entropy(name: str, logits: Tensor) -> Op:
    """Cross-entropy loss, run in fp32 as autocast does; saves the fp32 log-probabilities.

    `log_softmax` saves its result; `nll_loss` saves that same tensor, the
    (static) targets and its 0-dim fp32 `total_weight`. The fp32 copy of the
    logits is a temporary.
    """
    wide = _new(f"{name}.fp32", logits.shape, FP32)
    logp = _new(f"{name}.logp", logits.shape, FP32)
    total_weight = _new(f"{name}.total_weight", (), FP32)
    loss = _new(f"{name}.loss", (), FP32)
    rows = logits.numel // logits.shape[-1]
    return Op(
        name=name,
        signature=f"cross-entropy[{logits.dims}]",
        inputs=(logits,),
        outputs=(loss,),
        saves=(logp, total_weight),
        scratch=(wide,),
        fwd=(
            stream(logits.nbytes + wide.nbytes),  # cast to fp32
            stream(2 * wide.nbytes + logp.nbytes, 5 * logits.numel),  # log_softmax
            stream(rows * (INT64 + FP32)),  # nll gathers one element per row
        ),
        bwd=(
            stream(logp.nbytes),  # nll backward: zero-fill and scatter
            stream(3 * logp.nbytes, 3 * logits.numel),  # log_softmax backward
            stream(logp.nbytes + logits.nbytes),  # cast back to fp16
        ),
        bwd_scratch_bytes=2 * logp.nbytes,
    )


__all__ = [
    "BOOL",
    "FP16",
    "FP32",
    "INT64",
    "adaptive_avgpool",
    "add",
    "attention_context",
    "attention_scores",
    "batchnorm",
    "conv2d",
    "cross_entropy",
    "dropout",
    "dropout_add",
    "embedding",
    "flatten",
    "gelu",
    "layernorm",
    "linear",
    "maxpool2d",
    "relu",
    "softmax",
]
