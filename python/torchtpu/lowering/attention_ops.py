"""Scaled dot-product attention as one engine op (TT_OP_ATTENTION forward,
TT_OP_ATTENTION_BWD backward; the kernels are src/kernels/attention.c).

`scaled_dot_product_attention` is CompositeImplicitAutograd. On a device
without a fused kernel PyTorch decomposes it above autograd into about
fifteen recorded ops forward and twenty backward (two batched matmuls, a
scale, a causal mask built and added, a safe softmax, transposes), each a
Python dispatch here and an instruction in the graph. On xla a kernel for
its AutogradXLA key sends an eligible call to
`_scaled_dot_product_flash_attention_for_cpu`, an aten op with its own
derivative (`..._backward`), and both are lowered to the engine ops below.
Every other call (dropout, grouped-query heads, head sizes that differ, a
mask that needs a gradient, ranks other than 4, empty sizes) takes
PyTorch's decomposition exactly as before (`OpOverload.decompose`), so its
errors and results are PyTorch's. A mask together with is_causal applies
both, as CPU's fused kernel does.
`TORCHTPU_FUSED_ATTENTION=0` sends every call there (docs/compiler.md).
"""
import math

import torch

from torchtpu import settings, ir
from torchtpu.lowering.core import (ATTENTION, ATTENTION_BWD, SLICE, aten, lowers,
                                    reshape, wrap)

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _mask4(h):
    """The mask's handle at rank 4 (leading 1s), as the engine op takes it."""
    shape = list(h.shape)
    return reshape(h, [1] * (4 - len(shape)) + shape) if len(shape) < 4 else h


def _scale(scale, e):
    return float(scale) if scale is not None else 1.0 / math.sqrt(e)


def _check(query, key, value, dropout_p, attn_mask):
    if dropout_p != 0.0:
        raise RuntimeError("scaled_dot_product_attention_flash_attention: Currently do not "
                           "support dropout > 0")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise RuntimeError("scaled_dot_product_attention_flash_attention: Accept only 4 dims "
                           "inputs shape of {B, H, T, K}")
    if attn_mask is not None and attn_mask.dtype != query.dtype:
        raise RuntimeError("scaled_dot_product_attention_flash_attention: Attention mask is "
                           "the same data type as query")


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default)
def flash_attention(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None,
                    scale=None):
    _check(query, key, value, dropout_p, attn_mask)
    operands = [query._h, key._h, value._h]
    if attn_mask is not None:
        operands.append(_mask4(attn_mask._h))
    s = _scale(scale, query.shape[-1])
    causal = int(bool(is_causal))
    # The logsumexp is its own node: backward recomputes the probabilities
    # and never reads it, so unless the program does it is dead code.
    out = ir.attention(*operands, causal=causal, lse=0, scale=s)
    lse = ir.attention(*operands, causal=causal, lse=1, scale=s)
    return wrap(out), wrap(lse)


@lowers(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def flash_attention_backward(grad_out, query, key, value, out, logsumexp, dropout_p,
                             is_causal, *, attn_mask=None, scale=None):
    _check(query, key, value, dropout_p, attn_mask)
    # out and logsumexp are not read: the kernel recomputes the
    # probabilities, and rowsum(grad_out * out) as rowsum(p * dp) in f32.
    operands = [grad_out._h, query._h, key._h, value._h]
    if attn_mask is not None:
        operands.append(_mask4(attn_mask._h))
    packed = ir.attention_bwd(*operands, causal=int(bool(is_causal)), scale=_scale(scale, query.shape[-1]))
    grads, start = [], 0
    for t in (query, key, value):
        n = t.numel()
        # Contiguous slices of the packed result read its bytes in place.
        piece = ir.slice(packed, start=(start,), limit=(start + n,), step=(1,))
        grads.append(wrap(reshape(piece, list(t.shape))))
        start += n
    return tuple(grads)


# ------------------------------------------------- the AutogradXLA kernel
def _broadcasts(mask_shape, full):
    if len(mask_shape) > 4:
        return False
    pad = [1] * (4 - len(mask_shape)) + list(mask_shape)
    return all(m == 1 or m == f for m, f in zip(pad, full))


def _fused_ok(query, key, value, attn_mask, dropout_p):
    """Whether the engine op computes this call (grouped-query heads need
    equal head counts here, so enable_gqa changes nothing that passes)."""
    if dropout_p != 0.0 or query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return False
    dt = query.dtype
    if dt not in _FLOATS or key.dtype != dt or value.dtype != dt:
        return False
    B, H, L, E = query.shape
    if tuple(key.shape[:2]) != (B, H) or tuple(value.shape[:2]) != (B, H):
        return False
    S = key.shape[2]
    if key.shape[3] != E or value.shape[3] != E or value.shape[2] != S:
        return False
    if min(B, H, L, S, E) == 0:
        return False
    if not (query.device == key.device == value.device) or query.device.type != "xla":
        return False
    if attn_mask is not None:
        if attn_mask.requires_grad or attn_mask.device != query.device:
            return False
        if attn_mask.dtype != torch.bool and attn_mask.dtype != dt:
            return False
        if not _broadcasts(attn_mask.shape, (B, H, L, S)):
            return False
    return True


_decomposed = aten.scaled_dot_product_attention.default.decompose


def _sdpa_autograd_xla(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                       scale=None, enable_gqa=False):
    if not settings.FUSED_ATTENTION or \
            not _fused_ok(query, key, value, attn_mask, dropout_p):
        return _decomposed(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                           enable_gqa=enable_gqa)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # PyTorch's convert_boolean_attn_mask: True keeps a key, False adds -inf.
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype,
                                device=query.device).masked_fill(attn_mask.logical_not(),
                                                                 float("-inf"))
    return aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, bool(is_causal), attn_mask=attn_mask, scale=scale)[0]


_lib = torch.library.Library("aten", "IMPL")
_lib.impl("scaled_dot_product_attention", _sdpa_autograd_xla, "AutogradXLA")
