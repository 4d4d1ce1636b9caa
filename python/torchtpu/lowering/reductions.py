"""Reduction and scan lowerings."""
import torch

from torchtpu import ir
from torchtpu.lowering.core import (
    BIN, BINARY, CONVERT, REDUCE, RED_ALL, RED_ANY, RED_ARGMAX, RED_ARGMIN, RED_MAX, RED_MEAN,
    RED_MIN, RED_PROD, RED_SUM, SCAN, TT_BOOL, TT_I64, aten, convert, lowers, mask_of, norm_dim,
    norm_dims, reshape, scalar, tt, wrap)


def _reduce_h(h, red, dims, keepdim, out_dt):
    rank = len(h.shape)
    if rank == 0:
        h = reshape(h, [1])
        out = ir.reduce(h, op=red, dims_mask=1, keepdim=int(bool(keepdim)), dtype=out_dt)
        return reshape(out, [])
    return ir.reduce(h, op=red, dims_mask=mask_of(dims), keepdim=int(bool(keepdim)), dtype=out_dt)


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    return norm_dims(dim, x.dim()) if x.dim() else []


def _sum_dtype(x, dtype):
    if dtype is not None:
        return dtype
    if x.dtype == torch.bool or not (x.dtype.is_floating_point or x.dtype.is_complex):
        return torch.int64
    return x.dtype


@lowers(aten.sum.default, aten.sum.dim_IntList)
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    out = _sum_dtype(x, dtype)
    h = convert(x._h, tt(out)) if out.is_floating_point and x._h.dtype != tt(out) else x._h
    return wrap(_reduce_h(h, RED_SUM, _dims(x, dim), keepdim, tt(out)))


@lowers(aten.mean.default, aten.mean.dim)
def mean(x, dim=None, keepdim=False, *, dtype=None):
    out = dtype if dtype is not None else x.dtype
    if not (out.is_floating_point or out.is_complex):
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point "
            f"or complex dtype. Got: {str(out).replace('torch.', '').capitalize()}")
    h = convert(x._h, tt(out))
    return wrap(_reduce_h(h, RED_MEAN, _dims(x, dim), keepdim, tt(out)))


@lowers(aten.prod.default, aten.prod.dim_int)
def prod(x, dim=None, keepdim=False, *, dtype=None):
    out = _sum_dtype(x, dtype)
    h = convert(x._h, tt(out)) if out.is_floating_point else x._h
    dims = _dims(x, None if dim is None else [dim])
    return wrap(_reduce_h(h, RED_PROD, dims, keepdim, tt(out)))


def _minmax(red):
    def fn(x, dim=None, keepdim=False):
        dims = _dims(x, dim)
        for d in dims:
            if x.shape[d] == 0:
                raise IndexError(
                    f"{'amax' if red == RED_MAX else 'amin'}(): Expected reduction dim {d} to "
                    "have non-zero size.")
        if x.numel() == 0 and not dims:
            raise RuntimeError("max(): Expected reduction dim to be specified for input.numel() == 0.")
        return wrap(_reduce_h(x._h, red, dims, keepdim, x._h.dtype))
    return fn


lowers(aten.amax.default)(_minmax(RED_MAX))
lowers(aten.amin.default)(_minmax(RED_MIN))


@lowers(aten.max.default)
def max_all(x):
    if x.numel() == 0:
        raise RuntimeError("max(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    return wrap(_reduce_h(x._h, RED_MAX, list(range(x.dim())), False, x._h.dtype))


@lowers(aten.min.default)
def min_all(x):
    if x.numel() == 0:
        raise RuntimeError("min(): Expected reduction dim to be specified for input.numel() == 0. "
                           "Specify the reduction dim with the 'dim' argument.")
    return wrap(_reduce_h(x._h, RED_MIN, list(range(x.dim())), False, x._h.dtype))


def _arg(red):
    def fn(x, dim=None, keepdim=False):
        if x.numel() == 0:
            raise IndexError(f"{'argmax' if red == RED_ARGMAX else 'argmin'}(): Expected reduction "
                             "dim to be specified for input.numel() == 0.")
        if dim is None:
            flat = reshape(x._h, [x.numel()])
            out = ir.reduce(flat, op=red, dims_mask=1, keepdim=0, dtype=TT_I64)
            if keepdim:
                out = reshape(out, [1] * x.dim())
            return wrap(out)
        d = norm_dim(dim, x.dim())
        return wrap(_reduce_h(x._h, red, [d], keepdim, TT_I64))
    return fn


lowers(aten.argmax.default)(_arg(RED_ARGMAX))
lowers(aten.argmin.default)(_arg(RED_ARGMIN))


@lowers(aten.max.dim)
def max_dim(x, dim, keepdim=False):
    d = norm_dim(dim, x.dim())
    return (wrap(_reduce_h(x._h, RED_MAX, [d], keepdim, x._h.dtype)),
            _arg(RED_ARGMAX)(x, dim, keepdim))


@lowers(aten.min.dim)
def min_dim(x, dim, keepdim=False):
    d = norm_dim(dim, x.dim())
    return (wrap(_reduce_h(x._h, RED_MIN, [d], keepdim, x._h.dtype)),
            _arg(RED_ARGMIN)(x, dim, keepdim))


def _anyall(red):
    def fn(x, dim=None, keepdim=False):
        dims = _dims(x, dim)
        out = _reduce_h(x._h, red, dims, keepdim, TT_BOOL)
        if x.dtype == torch.uint8:
            out = ir.convert(out, dtype=tt(torch.uint8))
        return wrap(out)
    return fn


lowers(aten.any.default, aten.any.dim, aten.any.dims)(_anyall(RED_ANY))
lowers(aten.all.default, aten.all.dim, aten.all.dims)(_anyall(RED_ALL))


def _var_h(x, dim, correction, keepdim):
    """(var, mean) handles in x's dtype. bf16/f16 compute in f32, as PyTorch
    does; the divisor is max(N - correction, 0)."""
    dims = _dims(x, dim)
    work = tt(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x._h.dtype
    h = convert(x._h, work)
    if x.dim() == 0:
        h = reshape(h, [1])
        dims = [0]
    mean = ir.reduce(h, op=RED_MEAN, dims_mask=mask_of(dims), keepdim=1, dtype=work)
    d = ir.binary(h, mean, op=BIN["sub"])
    sq = ir.binary(d, d, op=BIN["mul"])
    ss = ir.reduce(sq, op=RED_SUM, dims_mask=mask_of(dims), keepdim=int(keepdim), dtype=work)
    n = 1
    for i in dims:
        n *= h.shape[i]
    c = 1 if correction is None else correction
    var = ir.binary(ss, scalar(h.device, work, max(n - c, 0)), op=BIN["div"])
    if not keepdim:
        mean = reshape(mean, ss.shape)
    if x.dim() == 0:
        var, mean = reshape(var, []), reshape(mean, [])
    return convert(var, x._h.dtype), convert(mean, x._h.dtype)


@lowers(aten.var.correction)
def var(x, dim=None, *, correction=None, keepdim=False):
    if not x.dtype.is_floating_point:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    return wrap(_var_h(x, dim, correction, keepdim)[0])


@lowers(aten.var_mean.correction)
def var_mean(x, dim=None, *, correction=None, keepdim=False):
    if not x.dtype.is_floating_point:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    v, m = _var_h(x, dim, correction, keepdim)
    return wrap(v), wrap(m)


@lowers(aten.var.dim, aten.var.default)
def var_unbiased(x, dim=None, unbiased=True, keepdim=False):
    if isinstance(dim, bool):  # var.default(self, unbiased)
        dim, unbiased = None, dim
    return var(x, dim, correction=int(unbiased), keepdim=keepdim)


@lowers(aten.var_mean.dim, aten.var_mean.default)
def var_mean_unbiased(x, dim=None, unbiased=True, keepdim=False):
    if isinstance(dim, bool):  # var_mean.default(self, unbiased)
        dim, unbiased = None, dim
    return var_mean(x, dim, correction=int(unbiased), keepdim=keepdim)


def _scan(kind):
    def fn(x, dim, *, dtype=None):
        d = norm_dim(dim, x.dim())
        out = _sum_dtype(x, dtype)
        h = convert(x._h, tt(out)) if out.is_floating_point else x._h
        if x.dim() == 0:
            return wrap(convert(h, tt(out)))
        return wrap(ir.scan(h, op=kind, dim=d, dtype=tt(out)))
    return fn


lowers(aten.cumsum.default)(_scan(0))
lowers(aten.cumprod.default)(_scan(1))
_ = RED_SUM
