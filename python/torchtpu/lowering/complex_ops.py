"""Complex tensors on xla (complex64) and the discrete Fourier transforms.

A complex64 xla tensor is an engine tensor of dtype TT_C64: interleaved
(real, imaginary) float32 pairs. The engine only moves such elements
(reshape, transpose, slice, concat, flip, index_select, broadcast), views
them as float32 pairs (bitcast: [..] complex64 <-> [.., 2] float32) and
transforms them (TT_OP_FFT); it refuses every other op on them. Complex
arithmetic is therefore lowered here on the float32 pairs, where fusion
and tier 1 treat it as ordinary float work.

dispatch() sends an op here when one of its tensors is complex or it is
asked for a complex dtype; what has no entry below is decomposed by
PyTorch's tables or falls back visibly (aten:: counters), exactly like a
real op without a lowering. complex128 and complex32 are not supported
(TypeError, as for any dtype the engine lacks).
"""
import math
import warnings

import torch

from torchtpu import bridge, ir
from torchtpu.bridge import XlaTensor
from torchtpu.lowering import shape_ops
from torchtpu.lowering.fallback import decompose_or_fallback
from torchtpu.lowering.core import (
    BINARY, BIN, CONCAT, CONVERT, FFT, LOWERINGS, REDUCE, RED_ALL, RED_ANY,
    RED_MEAN, RED_SUM, SLICE, TRANSPOSE, TT_BOOL, TT_C64, TT_F32, UN, UNARY, WHERE, aten,
    broadcast, cpu_operand, lowers, mask_of, norm_dims, reshape, scalar, wrap)

COMPLEX_LOWERINGS = {}

# tt_fft_kind_t (kernels.h)
FFT_C2C_FORWARD, FFT_C2C_INVERSE, FFT_R2C, FFT_C2R = (
    ir.ENUMS["fft"][n] for n in ("c2c_forward", "c2c_inverse", "r2c", "c2r"))


def lowers_complex(*ops):
    def deco(fn):
        for o in ops:
            COMPLEX_LOWERINGS[o] = fn
        return fn
    return deco


# Regular lowerings that only move whole elements through ops the engine
# accepts for complex64: they serve complex tensors unchanged.
for _o in (aten.alias.default, aten.alias_copy.default, aten.detach.default,
           aten.detach_copy.default, aten.clone.default, aten.lift_fresh.default,
           aten.lift_fresh_copy.default, aten.contiguous.default, aten.lift.default,
           aten.resolve_neg.default, aten._propagate_xla_data.default,
           aten.view.default, aten.view_copy.default, aten._unsafe_view.default,
           aten.reshape.default, aten._reshape_copy.default, aten.expand.default,
           aten.expand_copy.default, aten.permute.default, aten.permute_copy.default,
           aten.transpose.int, aten.transpose_copy.int, aten.t.default, aten.t_copy.default,
           aten.squeeze.default, aten.squeeze_copy.default, aten.squeeze.dim,
           aten.squeeze_copy.dim, aten.squeeze.dims, aten.squeeze_copy.dims,
           aten.unsqueeze.default, aten.unsqueeze_copy.default, aten.slice.Tensor,
           aten.slice_copy.Tensor, aten.select.int, aten.select_copy.int,
           aten.split.Tensor, aten.split_copy.Tensor, aten.split_with_sizes.default,
           aten.split_with_sizes_copy.default, aten.unbind.int, aten.unbind_copy.int,
           aten.flip.default, aten.index_select.default, aten._local_scalar_dense.default,
           aten._copy_from.default):
    if _o in LOWERINGS:
        COMPLEX_LOWERINGS[_o] = LOWERINGS[_o]


# --------------------------------------------------------------- routing
def _is_complex_dtype(d):
    return isinstance(d, torch.dtype) and d.is_complex


def involves_complex(args, kwargs):
    """Whether an op call touches a complex tensor or asks for a complex
    dtype (dtype= keyword, or the dtype argument of view.dtype)."""
    if kwargs and _is_complex_dtype(kwargs.get("dtype")):
        return True
    if not bridge.complex_in_use[0]:
        return False
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.dtype.is_complex:
                return True
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor) and b.dtype.is_complex:
                    return True
        elif isinstance(a, complex) or _is_complex_dtype(a):
            return True
    return False


def dispatch_complex(func, args, kwargs):
    fn = COMPLEX_LOWERINGS.get(func)
    if fn is not None:
        return fn(*args, **kwargs)
    return decompose_or_fallback(func, args, kwargs)


def _check_dtype(dt):
    if dt.is_complex and dt != torch.complex64:
        raise TypeError(f"dtype {dt} is not supported on xla devices (complex64 is the "
                        "complex dtype the engine has)")


# ---------------------------------------------------- pairs and handles
def pairs(h):
    """complex64 [..] -> its float32 pairs [.., 2]."""
    return ir.bitcast(h, dtype=TT_F32, dims=(*h.shape, 2))


def from_pairs(p):
    """float32 pairs [.., 2] -> complex64 [..]."""
    return ir.bitcast(p, dtype=TT_C64, dims=tuple(p.shape)[:-1])


def real_to_complex(h):
    """A real handle (any dtype) as complex64 with zero imaginary parts."""
    h = h if h.dtype == TT_F32 else ir.convert(h, dtype=TT_F32)
    col = reshape(h, tuple(h.shape) + (1,))
    r = len(col.shape)
    return from_pairs(ir.pad(col, lo=(0,) * r, hi=(0,) * (r - 1) + (1,), value=0.0))


def as_complex_h(x, dev):
    """x (xla tensor, CPU scalar tensor, or number) as a complex64 handle."""
    if isinstance(x, XlaTensor):
        return x._h if x._h.dtype == TT_C64 else real_to_complex(x._h)
    if isinstance(x, torch.Tensor):
        x = cpu_operand(x)
    v = complex(x)
    re = scalar(dev, TT_F32, v.real)
    im = scalar(dev, TT_F32, v.imag)
    return from_pairs(ir.concat(reshape(re, (1,)), reshape(im, (1,)), dim=0))


def _parts(p):
    """(real, imaginary) of pairs p [.., 2], each [.., 1]."""
    r = len(p.shape)
    lo = [0] * r
    hi = list(p.shape)
    st = [1] * r
    hi_re = hi[:-1] + [1]
    lo_im = lo[:-1] + [1]
    re = ir.slice(p, start=tuple(lo), limit=tuple(hi_re), step=tuple(st))
    im = ir.slice(p, start=tuple(lo_im), limit=tuple(hi), step=tuple(st))
    return re, im


def _join(re, im):
    return from_pairs(ir.concat(re, im, dim=len(re.shape) - 1))


def _b(name, a, b):
    return ir.binary(a, b, op=BIN[name])


def _u(name, a):
    return ir.unary(a, op=UN[name], alpha=0.0, beta=0.0)


def _k(dev, v):
    return scalar(dev, TT_F32, v)


def _dev(*xs):
    for x in xs:
        if isinstance(x, XlaTensor):
            return x._h.device
        if isinstance(x, (list, tuple)):
            for y in x:
                if isinstance(y, XlaTensor):
                    return y._h.device
    return bridge.current_device_index()


def _squeeze_last(h):
    return reshape(h, tuple(h.shape)[:-1])


def _real_h(x):
    re, _ = _parts(pairs(x._h))
    return _squeeze_last(re)


def _cmul(a, b):
    ar, ai = _parts(pairs(a))
    br, bi = _parts(pairs(b))
    re = _b("sub", _b("mul", ar, br), _b("mul", ai, bi))
    im = _b("add", _b("mul", ar, bi), _b("mul", ai, br))
    return _join(re, im)


def _cdiv(a, b, dev):
    ar, ai = _parts(pairs(a))
    br, bi = _parts(pairs(b))
    d = _b("add", _b("mul", br, br), _b("mul", bi, bi))
    re = _b("div", _b("add", _b("mul", ar, br), _b("mul", ai, bi)), d)
    im = _b("div", _b("sub", _b("mul", ai, br), _b("mul", ar, bi)), d)
    return _join(re, im)


def _scale(h, s, dev):
    """complex64 h times a real number s."""
    if s == 1:
        return h
    return from_pairs(_b("mul", pairs(h), _k(dev, s)))


# ------------------------------------------------------- conversions
@lowers_complex(aten.view_as_real.default, aten.view_as_real_copy.default)
def view_as_real(x):
    if not x.dtype.is_complex:
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return wrap(pairs(x._h))


@lowers(aten.view_as_complex.default, aten.view_as_complex_copy.default)
@lowers_complex(aten.view_as_complex.default, aten.view_as_complex_copy.default)
def view_as_complex(x):
    if x.dtype == torch.float64:
        raise TypeError("dtype torch.complex128 is not supported on xla devices (complex64 "
                        "is the complex dtype the engine has)")
    if x.dtype not in (torch.float32,):
        raise RuntimeError("view_as_complex is only supported for float and double tensors, "
                           f"but got a tensor of scalar type: {str(x.dtype).split('.')[-1]}")
    if x.dim() == 0 or x.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    bridge.complex_in_use[0] = True
    return wrap(from_pairs(x._h))


@lowers_complex(aten.real.default)
def real(x):
    return wrap(_real_h(x)) if x.dtype.is_complex else wrap(x._h)


@lowers_complex(aten.imag.default)
def imag(x):
    if not x.dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    _, im = _parts(pairs(x._h))
    return wrap(_squeeze_last(im))


@lowers(aten.complex.default)
@lowers_complex(aten.complex.default)
def complex_(re, im):
    if re.dtype != im.dtype:
        raise RuntimeError(f"Expected object of scalar type {re.dtype} but got scalar type "
                           f"{im.dtype} for second argument")
    if re.dtype == torch.float64:
        _check_dtype(torch.complex128)
    if re.dtype != torch.float32:
        raise RuntimeError("Expected both inputs to be Half, Float or Double tensors but got "
                           f"{re.dtype} and {im.dtype}")
    bridge.complex_in_use[0] = True
    shape = torch.broadcast_shapes(re.shape, im.shape)
    a = reshape(broadcast(re._h, shape), tuple(shape) + (1,))
    b = reshape(broadcast(im._h, shape), tuple(shape) + (1,))
    return wrap(_join(a, b))


@lowers(aten.polar.default)
@lowers_complex(aten.polar.default)
def polar(absval, angle):
    if absval.dtype != torch.float32 or angle.dtype != torch.float32:
        _check_dtype(torch.complex128)
        raise RuntimeError("polar: expected float tensors")
    bridge.complex_in_use[0] = True
    shape = torch.broadcast_shapes(absval.shape, angle.shape)
    a = reshape(broadcast(absval._h, shape), tuple(shape) + (1,))
    t = reshape(broadcast(angle._h, shape), tuple(shape) + (1,))
    return wrap(_join(_b("mul", a, _u("cos", t)), _b("mul", a, _u("sin", t))))


def _convert_to(h, dt, dev):
    """h (any engine dtype) as torch dtype dt, through complex rules."""
    if dt.is_complex:
        _check_dtype(dt)
        return h if h.dtype == TT_C64 else real_to_complex(h)
    if h.dtype == TT_C64:
        warnings.warn("Casting complex values to real discards the imaginary part",
                      UserWarning, stacklevel=4)
        re, _ = _parts(pairs(h))
        h = _squeeze_last(re)
    t = bridge.tt_dtype(dt)
    if dt == torch.bool:
        return h if h.dtype == TT_BOOL else ir.convert(h, dtype=t)
    return h if h.dtype == t else ir.convert(h, dtype=t)


def _to_copy_complex(x, dtype=None, **kwargs):
    if dtype is not None and dtype.is_complex:
        _check_dtype(dtype)
        bridge.complex_in_use[0] = True
    return _to_copy(x, dtype=dtype, **kwargs)


def _complex_convert(h, dtype):
    return _convert_to(h, dtype, h.device)


_to_copy = shape_ops.to_copy_with(_complex_convert)
COMPLEX_LOWERINGS[aten._to_copy.default] = _to_copy_complex
copy = COMPLEX_LOWERINGS[aten.copy.default] = shape_ops.copy_with(_complex_convert)


@lowers_complex(aten.copy_.default)
def copy_inplace(dst, src, non_blocking=False):
    dst._h = copy(dst, src)._h
    return dst


@lowers_complex(aten.cat.default)
def cat(tensors, dim=0):
    ts = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    if not ts:
        return wrap(tensors[0]._h)
    dev = _dev(ts)
    hs = [as_complex_h(t, dev) for t in ts]
    d = norm_dims(dim, ts[0].dim())[0]
    return wrap(hs[0] if len(hs) == 1 else ir.concat(*hs, dim=d))


@lowers_complex(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    dev = x._h.device
    return shape_ops.slice_scatter(XlaTensor(as_complex_h(x, dev)),
                                   XlaTensor(as_complex_h(src, dev)), dim, start, end, step)


@lowers_complex(aten.select_scatter.default)
def select_scatter(x, src, dim, index):
    dev = x._h.device
    return shape_ops.select_scatter(XlaTensor(as_complex_h(x, dev)),
                                    XlaTensor(as_complex_h(src, dev)), dim, index)


def _zeros(dev, shape):
    z = broadcast(scalar(dev, TT_F32, 0.0), tuple(int(s) for s in shape) + (2,))
    return from_pairs(z)


def _full(dev, shape, value):
    v = complex(value)
    re = broadcast(scalar(dev, TT_F32, v.real), tuple(int(s) for s in shape) + (1,))
    im = broadcast(scalar(dev, TT_F32, v.imag), tuple(int(s) for s in shape) + (1,))
    return _join(re, im)


def factory_value(dt, value, dev, shape):
    if dt.is_complex:
        _check_dtype(dt)
        bridge.complex_in_use[0] = True
        return _full(dev, shape, value)
    if isinstance(value, complex):
        value = value.real
    return broadcast(scalar(dev, bridge.tt_dtype(dt), value), shape)


for _o, _v in shape_ops.LIKE_VALUES.items():
    COMPLEX_LOWERINGS[_o] = shape_ops.like_factory(_v, fill=factory_value)
for _o, (_v, _strided) in shape_ops.NEW_FACTORIES.items():
    COMPLEX_LOWERINGS[_o] = shape_ops.new_factory(_v, _strided, fill=factory_value)


@lowers_complex(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    """Pads the real and imaginary parts apart (PAD takes one real value)."""
    dev = x._h.device
    v = complex(value)
    re, im = _parts(pairs(as_complex_h(x, dev)))
    re = shape_ops.constant_pad_nd(XlaTensor(_squeeze_last(re)), pad, v.real)._h
    im = shape_ops.constant_pad_nd(XlaTensor(_squeeze_last(im)), pad, v.imag)._h
    return wrap(_join(reshape(re, tuple(re.shape) + (1,)), reshape(im, tuple(im.shape) + (1,))))


@lowers_complex(aten.fill.Scalar, aten.fill.Tensor)
def fill(x, value):
    if isinstance(value, torch.Tensor):
        if isinstance(value, XlaTensor):
            return wrap(broadcast(as_complex_h(value, x._h.device), x.shape))
        value = value.item()
    return wrap(factory_value(x.dtype, value, x._h.device, x.shape))


@lowers_complex(aten.zero.default)
def zero(x):
    return fill(x, 0)


# ------------------------------------------------------- arithmetic
def _result_is_complex(*xs):
    return any((isinstance(x, torch.Tensor) and x.dtype.is_complex) or isinstance(x, complex)
               for x in xs)


def _binary_complex(name):
    def fn(a, b, alpha=1):
        dev = _dev(a, b)
        if not _result_is_complex(a, b):
            return LOWERINGS[getattr(aten, name).Tensor](a, b, alpha=alpha) if alpha != 1 \
                else LOWERINGS[getattr(aten, name).Tensor](a, b)
        ah, bh = as_complex_h(a, dev), as_complex_h(b, dev)
        if alpha != 1:
            bh = _cmul(bh, as_complex_h(alpha, dev)) if isinstance(alpha, complex) \
                else _scale(bh, alpha, dev)
        return wrap(from_pairs(_b(name, pairs(ah), pairs(bh))))
    return fn


for _n in ("add", "sub"):
    COMPLEX_LOWERINGS[getattr(aten, _n).Tensor] = _binary_complex(_n)
    COMPLEX_LOWERINGS[getattr(aten, _n).Scalar] = _binary_complex(_n)


@lowers_complex(aten.mul.Tensor, aten.mul.Scalar)
def mul(a, b):
    dev = _dev(a, b)
    # complex times real: scale both parts (no cross terms to round).
    for c, r in ((a, b), (b, a)):
        if isinstance(c, XlaTensor) and c.dtype.is_complex and not _result_is_complex(r):
            if isinstance(r, XlaTensor):
                rh = r._h if r._h.dtype == TT_F32 else ir.convert(r._h, dtype=TT_F32)
                rh = reshape(rh, tuple(rh.shape) + (1,))
            else:
                rh = _k(dev, float(cpu_operand(r) if isinstance(r, torch.Tensor) else r))
            return wrap(from_pairs(_b("mul", pairs(c._h), rh)))
    return wrap(_cmul(as_complex_h(a, dev), as_complex_h(b, dev)))


@lowers_complex(aten.div.Tensor, aten.div.Scalar)
def div(a, b):
    dev = _dev(a, b)
    if isinstance(a, XlaTensor) and a.dtype.is_complex and not _result_is_complex(b):
        if isinstance(b, XlaTensor):
            bh = b._h if b._h.dtype == TT_F32 else ir.convert(b._h, dtype=TT_F32)
            bh = reshape(bh, tuple(bh.shape) + (1,))
        else:
            bh = _k(dev, float(cpu_operand(b) if isinstance(b, torch.Tensor) else b))
        return wrap(from_pairs(_b("div", pairs(a._h), bh)))
    return wrap(_cdiv(as_complex_h(a, dev), as_complex_h(b, dev), dev))


@lowers_complex(aten.neg.default)
def neg(x):
    return wrap(from_pairs(_u("neg", pairs(x._h))))


@lowers_complex(aten.conj_physical.default, aten._conj_physical.default, aten._conj.default,
                aten._conj_copy.default)
def conj_physical(x):
    if not x.dtype.is_complex:
        return wrap(x._h)
    re, im = _parts(pairs(x._h))
    return wrap(_join(re, _u("neg", im)))


@lowers_complex(aten.resolve_conj.default)
def resolve_conj(x):
    return wrap(x._h)


@lowers_complex(aten.abs.default)
def abs_(x):
    re, im = _parts(pairs(x._h))
    return wrap(_squeeze_last(_b("hypot", re, im)))


@lowers_complex(aten.angle.default)
def angle(x):
    re, im = _parts(pairs(x._h))
    return wrap(_squeeze_last(_b("atan2", im, re)))


@lowers_complex(aten.sgn.default)
def sgn(x):
    """x / |x|, and 0 where x is 0."""
    dev = x._h.device
    p = pairs(x._h)
    re, im = _parts(p)
    mag = _b("hypot", re, im)
    den = ir.where(_b("eq", mag, _k(dev, 0.0)), _k(dev, 1.0), mag)
    return wrap(from_pairs(_b("div", p, den)))


@lowers_complex(aten.reciprocal.default)
def reciprocal(x):
    dev = x._h.device
    return wrap(_cdiv(as_complex_h(1.0, dev), x._h, dev))


@lowers_complex(aten.exp.default)
def exp(x):
    re, im = _parts(pairs(x._h))
    m = _u("exp", re)
    return wrap(_join(_b("mul", m, _u("cos", im)), _b("mul", m, _u("sin", im))))


def _compare(both):
    def fn(a, b):
        dev = _dev(a, b)
        pa, pb = pairs(as_complex_h(a, dev)), pairs(as_complex_h(b, dev))
        e = _b("eq", pa, pb)
        r = len(e.shape)
        # Both parts equal: an all-reduction over the pair.
        eq = ir.reduce(e, op=RED_ALL, dims_mask=1 << (r - 1), keepdim=0, dtype=TT_BOOL)
        return wrap(eq if both else _u("logical_not", eq))
    return fn


COMPLEX_LOWERINGS[aten.eq.Tensor] = COMPLEX_LOWERINGS[aten.eq.Scalar] = _compare(True)
COMPLEX_LOWERINGS[aten.ne.Tensor] = COMPLEX_LOWERINGS[aten.ne.Scalar] = _compare(False)


@lowers_complex(aten.where.self, torch.ops.prims.where.default)
def where(cond, a, b):
    dev = _dev(cond, a, b)
    pa, pb = pairs(as_complex_h(a, dev)), pairs(as_complex_h(b, dev))
    c = bridge.handle_of(cond) if isinstance(cond, torch.Tensor) and cond.device.type == "xla" \
        else scalar(dev, TT_BOOL, bool(cpu_operand(cond) if isinstance(cond, torch.Tensor)
                                       else cond))
    if c.dtype != TT_BOOL:
        c = ir.convert(c, dtype=TT_BOOL)
    c = reshape(c, tuple(c.shape) + (1,))
    return wrap(from_pairs(ir.where(c, pa, pb)))


@lowers_complex(aten.isnan.default)
def isnan(x):
    p = pairs(x._h)
    n = _u("isnan", p)
    r = len(n.shape)
    return wrap(ir.reduce(n, op=RED_ANY, dims_mask=1 << (r - 1), keepdim=0, dtype=TT_BOOL))


def _reduce(code):
    def fn(x, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None and not dtype.is_complex:
            raise RuntimeError(f"sum(): dtype {dtype} cannot hold a complex result")
        if dtype is not None:
            _check_dtype(dtype)
        p = pairs(x._h)
        r = x.dim()
        dims = norm_dims(dim if dim not in ((), []) else None, r)
        if r == 0 or not dims:
            return wrap(x._h)
        out = ir.reduce(p, op=code, dims_mask=mask_of(dims), keepdim=int(bool(keepdim)), dtype=TT_F32)
        return wrap(from_pairs(out))
    return fn


for _o in (aten.sum.default, aten.sum.dim_IntList):
    COMPLEX_LOWERINGS[_o] = _reduce(RED_SUM)
COMPLEX_LOWERINGS[aten.mean.dim] = _reduce(RED_MEAN)
COMPLEX_LOWERINGS[aten.mean.default] = (
    lambda x, *, dtype=None: _reduce(RED_MEAN)(x, None, False, dtype=dtype))


# ------------------------------------------------------ Fourier transforms
def _norm_scale(normalization, n):
    """ATen's fft_norm_mode: 0 none, 1 by 1/sqrt(n), 2 by 1/n."""
    if normalization == 1:
        return 1.0 / math.sqrt(n)
    if normalization == 2:
        return 1.0 / n
    return 1.0


def _along(h, dim, kind, n, scale):
    """One transform of handle h along dim (moved last and back)."""
    r = len(h.shape)
    if dim == r - 1:
        return ir.fft(h, kind=kind, n=n, scale=scale)
    perm = list(range(r))
    perm[dim], perm[r - 1] = perm[r - 1], perm[dim]
    t = ir.transpose(h, perm=tuple(perm))
    y = ir.fft(t, kind=kind, n=n, scale=scale)
    return ir.transpose(y, perm=tuple(perm))


def _fft_dims(x, dim):
    dims = norm_dims(list(dim), x.dim())
    if not dims:
        raise RuntimeError("fft: at least one dim is needed")
    return dims


def _real_input(x):
    if x.dtype == torch.float64:
        _check_dtype(torch.complex128)
    if x.dtype != torch.float32:
        raise RuntimeError(f"Unsupported dtype {str(x.dtype).split('.')[-1].capitalize()}")
    return x._h


@lowers(aten._fft_r2c.default)
def fft_r2c(x, dim, normalization, onesided):
    h = _real_input(x)
    bridge.complex_in_use[0] = True
    dims = _fft_dims(x, dim)
    total = 1
    for d in dims:
        total *= x.shape[d]
    if total == 0:
        shape = list(x.shape)
        if onesided:
            shape[dims[-1]] = shape[dims[-1]] // 2 + 1
        return wrap(_zeros(x._h.device, shape))
    scale = _norm_scale(normalization, total)
    last = dims[-1]
    if onesided:
        c = _along(h, last, FFT_R2C, x.shape[last], 1.0)
        rest = dims[:-1]
    else:
        c = real_to_complex(h)
        rest = dims
    for d in rest:
        c = _along(c, d, FFT_C2C_FORWARD, x.shape[d], 1.0)
    return wrap(_scale(c, scale, x._h.device) if scale != 1.0 else c)


@lowers(aten._fft_c2c.default)
@lowers_complex(aten._fft_c2c.default)
def fft_c2c(x, dim, normalization, forward):
    h = x._h if x.dtype.is_complex else real_to_complex(x._h)
    dims = _fft_dims(x, dim)
    total = 1
    for d in dims:
        total *= x.shape[d]
    if total == 0:
        return wrap(h)
    kind = FFT_C2C_FORWARD if forward else FFT_C2C_INVERSE
    for d in dims:
        h = _along(h, d, kind, x.shape[d], 1.0)
    return wrap(_scale(h, _norm_scale(normalization, total), x._h.device))


@lowers(aten._fft_c2r.default)
@lowers_complex(aten._fft_c2r.default)
def fft_c2r(x, dim, normalization, last_dim_size):
    h = x._h
    dims = _fft_dims(x, dim)
    n = int(last_dim_size)
    if n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    total = n
    for d in dims[:-1]:
        total *= x.shape[d]
    for d in dims[:-1]:
        h = _along(h, d, FFT_C2C_INVERSE, x.shape[d], 1.0)
    y = _along(h, dims[-1], FFT_C2R, n, _norm_scale(normalization, total))
    return wrap(y)


COMPLEX_LOWERINGS[aten._fft_r2c.default] = fft_r2c



# torch.conj() is a view that sets the conjugate bit. On xla it is computed
# instead (conj_physical: a negation of the imaginary parts, which fusion
# folds into its consumer). Besides sparing every op a conjugate-bit check,
# this avoids a PyTorch hazard: under functionalization, backward formulas
# that read a conjugate view's sizes through an ArrayRef and then create a
# tensor (fft_r2c_backward behind ihfft, stft) read the new tensor's sizes.
def _conj_autograd_xla(x):
    return torch.conj_physical(x) if x.is_complex() else x


_lib = torch.library.Library("aten", "IMPL")
_lib.impl("_conj", _conj_autograd_xla, "AutogradXLA")
