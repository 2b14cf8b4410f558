"""Scaled-dot-product attention as a GPU runs it, for traces made on fake CPU tensors.

NOTE (why): `F.scaled_dot_product_attention` picks its kernel by device, and
what autograd saves depends on the kernel. On CPU (a fake CPU trace included)
it runs the math path whenever dropout is on, which saves the whole attention
matrix (batch x heads x seq x seq); a GPU of compute capability 8.0 or more
(every record in `planopt.hardware`) runs the flash kernel for fp16/bf16
without a mask and head dimension <= 256, and the memory-efficient kernel
otherwise (fp32, or a mask), each saving only the output and the
log-sum-exp (fp32, batch x heads x seq; padded to 32 positions by the
memory-efficient kernel) beside q, k, v. Under `gpu_attention()` the
function calls those kernels' own ATen operators, whose meta kernels give
fake tensors the GPU's shapes and whose autograd saves what the GPU's saves.
The math path (an explicit attention mask of another dtype, a head
dimension over 256 with fp16/bf16 and a mask) is left to PyTorch.

NOTE (dropout): `F.dropout` also picks its kernel by device. On CPU it is
`empty_like`, `bernoulli_`, `div_` and `mul`, and autograd saves the noise in
the input's dtype; on CUDA it is one fused `native_dropout`, which saves a
bool mask (a quarter of an fp32 noise) and is one operator for selective
checkpointing. `gpu_kernels()` makes both functions run the GPU's operators.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

aten = torch.ops.aten
_HALF = (torch.float16, torch.bfloat16)


def gpu_kernel(q: torch.Tensor, attn_mask: torch.Tensor | None) -> str:
    """`flash`, `efficient` or `math`: the kernel a CUDA GPU (sm80+) picks."""
    head_dim = q.shape[-1]
    if attn_mask is None and q.dtype in _HALF and head_dim <= 256 and head_dim % 8 == 0:
        return "flash"
    if attn_mask is None or attn_mask.dtype in (torch.bool, q.dtype):
        return "efficient"
    return "math"


def _expand_kv(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    groups = q.shape[-3] // kv.shape[-3]
    return kv if groups == 1 else kv.repeat_interleave(groups, dim=-3)


def _sdpa_gpu(
    original,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    kernel = gpu_kernel(query, attn_mask)
    if kernel == "flash":
        # The CUDA flash kernel reads grouped k/v heads as they are.
        out = aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale
        )
        return out[0]
    if kernel == "efficient":
        if enable_gqa:
            key, value = _expand_kv(query, key), _expand_kv(query, value)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(
                ~attn_mask, float("-inf")
            )
        if attn_mask is not None:
            attn_mask = attn_mask.expand(
                query.shape[0], query.shape[1], query.shape[2], key.shape[2]
            )
        grad = query.requires_grad or key.requires_grad or value.requires_grad
        out = aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale
        )
        return out[0]
    return original(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )


@contextlib.contextmanager
def gpu_attention() -> Iterator[None]:
    """`F.scaled_dot_product_attention` runs the GPU's kernel (module doc) inside."""
    original = F.scaled_dot_product_attention

    def sdpa(*args, **kwargs) -> torch.Tensor:
        return _sdpa_gpu(original, *args, **kwargs)

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _dropout_gpu(
    original, input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> torch.Tensor:
    # CUDA's condition for the fused kernel (aten/src/ATen/native/Dropout.cpp)
    if training and 0 < p < 1 and input.numel() > 0 and not inplace:
        return torch.native_dropout(input, p, True)[0]
    return original(input, p, training, inplace)


@contextlib.contextmanager
def gpu_kernels() -> Iterator[None]:
    """Attention and dropout run the GPU's operators inside (module doc)."""
    original = F.dropout

    def dropout(*args, **kwargs) -> torch.Tensor:
        return _dropout_gpu(original, *args, **kwargs)

    F.dropout = dropout
    try:
        with gpu_attention():
            yield
    finally:
        F.dropout = original
