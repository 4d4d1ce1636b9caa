"""Smaller lowerings that close fallbacks PyTorch's decompositions leave:
tensor-to-bool predicates (equal, allclose), prims the refs emit (abs, neg,
signbit, fmax, fmin, nextafter), and pairwise distances (cdist, pdist and
their backward passes)."""
import torch

from torchtpu import bridge, ir
from torchtpu.lowering.core import (
    BIN, BINARY, BITCAST, CONVERT, DOT, INDEX_SELECT, REDUCE, RED_ALL, RED_MAX, RED_SUM,
    TRANSPOSE, TT_BOOL, TT_F32, TT_I16, TT_I32, TT_I64, UN, UNARY, WHERE, aten, broadcast,
    device_of, handle, iota, lowers, reshape, result_type, scalar, tt, wrap)

prims = torch.ops.prims


def _u(name, h):
    return ir.unary(h, op=UN[name], alpha=0.0, beta=0.0)


def _b(name, a, b):
    return ir.binary(a, b, op=BIN[name])


# ------------------------------------------------------------ predicates
@lowers(aten.equal.default)
def equal(a, b):
    """A Python bool: the comparison runs on the device, the one result is
    read back (as .item() would)."""
    if tuple(a.shape) != tuple(b.shape):
        return False
    dev = device_of(a, b)
    rt = result_type(a, b)
    eq = _b("eq", handle(a, dev, tt(rt)), handle(b, dev, tt(rt)))
    n = 1
    for s in a.shape:
        n *= s
    if n == 0:
        return True
    allv = ir.reduce(reshape(eq, [n]), op=RED_ALL, dims_mask=1, keepdim=0, dtype=TT_BOOL)
    return bool(bridge.download(allv).item())


def isclose_h(a, b, rtol, atol, equal_nan):
    """|a - b| <= atol + rtol * |b|, equal values (infinities) and, with
    equal_nan, pairs of NaNs."""
    dev = device_of(a, b)
    rt = result_type(a, b)
    ah, bh = handle(a, dev, tt(rt)), handle(b, dev, tt(rt))
    eq = _b("eq", ah, bh)
    if not rt.is_floating_point:
        work = TT_F32 if rt != torch.float64 else 1
        ah, bh = ir.convert(ah, dtype=work), ir.convert(bh, dtype=work)
    dt = ah.dtype
    diff = _u("abs", _b("sub", ah, bh))
    tol = _b("add", scalar(dev, dt, atol), _b("mul", scalar(dev, dt, rtol), _u("abs", bh)))
    close = _b("logical_or", eq, _b("le", diff, tol))
    if equal_nan:
        close = _b("logical_or", close, _b("logical_and", _u("isnan", ah), _u("isnan", bh)))
    return close


@lowers(aten.isclose.default)
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return wrap(isclose_h(a, b, rtol, atol, equal_nan))


@lowers(aten.allclose.default)
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    h = isclose_h(a, b, rtol, atol, equal_nan)
    n = 1
    for s in h.shape:
        n *= s
    if n == 0:
        return True
    allv = ir.reduce(reshape(h, [n]), op=RED_ALL, dims_mask=1, keepdim=0, dtype=TT_BOOL)
    return bool(bridge.download(allv).item())


# ------------------------------------------------------------------ prims
@lowers(prims.abs.default)
def prims_abs(x):
    return wrap(_u("abs", x._h))


@lowers(prims.neg.default)
def prims_neg(x):
    return wrap(_u("neg", x._h))


_INT_OF = {0: TT_I32, 1: TT_I64, 2: TT_I16, 3: TT_I16}  # F32, F64, F16, BF16


def signbit_h(h):
    """The IEEE sign bit (set for -0.0 and negative NaNs too): the bits
    read as a signed integer of the same width are negative."""
    if h.dtype not in _INT_OF:
        return _b("lt", h, scalar(h.device, h.dtype, 0))
    bits = ir.bitcast(h, dtype=_INT_OF[h.dtype], dims=h.shape)
    return _b("lt", bits, scalar(h.device, bits.dtype, 0))


@lowers(prims.signbit.default, aten.signbit.default)
def signbit(x):
    return wrap(signbit_h(x._h))


def _fminmax(name):
    def fn(a, b):
        """fmax/fmin: NaN loses to a number (the other argument wins)."""
        dev = device_of(a, b)
        rt = result_type(a, b)
        ah, bh = handle(a, dev, tt(rt)), handle(b, dev, tt(rt))
        if not rt.is_floating_point:
            return wrap(_b(name, ah, bh))
        m = _b(name, ah, bh)
        m = ir.where(_u("isnan", ah), bh, m)
        return wrap(ir.where(_u("isnan", bh), ah, m))
    return fn


lowers(prims.fmax.default, aten.fmax.default)(_fminmax("maximum"))
lowers(prims.fmin.default, aten.fmin.default)(_fminmax("minimum"))


@lowers(prims.nextafter.default, aten.nextafter.default)
def nextafter(a, b):
    """The next representable value after a towards b, on the bits."""
    dev = device_of(a, b)
    rt = result_type(a, b)
    ah, bh = handle(a, dev, tt(rt)), handle(b, dev, tt(rt))
    shape = list(_b("add", ah, bh).shape)
    ah, bh = broadcast(ah, shape), broadcast(bh, shape)
    it = _INT_OF[ah.dtype]
    bits = ir.bitcast(ah, dtype=it, dims=shape)
    one = scalar(dev, it, 1)
    # Moving away from zero adds 1 to the magnitude bits; towards zero subtracts.
    up = _b("gt", bh, ah)
    neg = signbit_h(ah)
    away = ir.where(neg, _u("logical_not", up), up)
    stepped = ir.where(away, _b("add", bits, one), _b("sub", bits, one))
    res = ir.bitcast(stepped, dtype=ah.dtype, dims=shape)
    # From +-0 the step is the smallest subnormal with b's sign.
    tiny_bits = broadcast(one, shape)
    tiny = ir.bitcast(tiny_bits, dtype=ah.dtype, dims=shape)
    zero = _b("eq", ah, scalar(dev, ah.dtype, 0))
    res = ir.where(zero, ir.where(up, tiny, _u("neg", tiny)), res)
    res = ir.where(_b("eq", ah, bh), bh, res)
    nan = _b("logical_or", _u("isnan", ah), _u("isnan", bh))
    return wrap(ir.where(nan, _b("add", ah, bh), res))


# ---------------------------------------------------------- distances
def _pow_sum(d, p, dim):
    """sum(|d|^p)^(1/p) over dim (p = 0: count of non-zeros; inf: max)."""
    dev, dt = d.device, d.dtype
    a = _u("abs", d)
    mask = 1 << dim
    if p == 0:
        nz = ir.convert(_b("ne", a, scalar(dev, dt, 0)), dtype=dt)
        return ir.reduce(nz, op=RED_SUM, dims_mask=mask, keepdim=0, dtype=dt)
    if p == float("inf"):
        return ir.reduce(a, op=RED_MAX, dims_mask=mask, keepdim=0, dtype=dt)
    if p == 1:
        return ir.reduce(a, op=RED_SUM, dims_mask=mask, keepdim=0, dtype=dt)
    if p == 2:
        return _u("sqrt", ir.reduce(_b("mul", a, a), op=RED_SUM, dims_mask=mask, keepdim=0, dtype=dt))
    s = ir.reduce(_b("pow", a, scalar(dev, dt, p)), op=RED_SUM, dims_mask=mask, keepdim=0, dtype=dt)
    return _b("pow", s, scalar(dev, dt, 1.0 / p))


def _diff(x1, x2):
    """[..., P, 1, M] - [..., 1, R, M]."""
    r = len(x1.shape)
    s1 = list(x1.shape)
    s2 = list(x2.shape)
    a = reshape(x1, s1[:-1] + [1, s1[-1]])
    b = reshape(x2, s2[:-2] + [1] + s2[-2:])
    return _b("sub", a, b), r


def _cdist_mm(x1, x2):
    """Euclidean distances through a matrix product, as ATen's
    _euclidean_dist: sqrt(clamp_min(|a|^2 - 2 a.b + |b|^2, 0))."""
    dev, dt = x1.device, x1.dtype
    r = len(x1.shape)
    batch = list(x1.shape[:-2])
    P, M, R = x1.shape[-2], x1.shape[-1], x2.shape[-2]
    B = 1
    for s in batch:
        B *= s
    n1 = ir.reduce(_b("mul", x1, x1), op=RED_SUM, dims_mask=1 << (r - 1), keepdim=1, dtype=dt)  # [..., P, 1]
    n2 = ir.reduce(_b("mul", x2, x2), op=RED_SUM, dims_mask=1 << (r - 1), keepdim=1, dtype=dt)  # [..., R, 1]
    prod = ir.dot(reshape(x1, [B, P, M]), reshape(x2, [B, R, M]), trans_a=0, trans_b=1)
    prod = reshape(prod, batch + [P, R])
    n2t = reshape(n2, batch + [1, R])
    d2 = _b("add", _b("sub", n1, _b("mul", prod, scalar(dev, dt, 2.0))), n2t)
    d2 = _b("max", d2, scalar(dev, dt, 0.0))
    return _u("sqrt", d2)


def _bcast_batches(h1, h2):
    b1, b2 = list(h1.shape[:-2]), list(h2.shape[:-2])
    r = max(len(b1), len(b2))
    b1, b2 = [1] * (r - len(b1)) + b1, [1] * (r - len(b2)) + b2
    out = []
    for x, y in zip(b1, b2):
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"cdist: batch dimensions {b1} and {b2} do not broadcast")
        out.append(y if x == 1 else x)
    return (broadcast(h1, out + list(h1.shape[-2:])), broadcast(h2, out + list(h2.shape[-2:])))


def _sum_to(h, shape):
    """Sums the broadcast dims of h back to shape."""
    shape = list(shape)
    lead = len(h.shape) - len(shape)
    mask = 0
    for d in range(len(h.shape)):
        if d < lead or (shape[d - lead] == 1 and h.shape[d] != 1):
            mask |= 1 << d
    if mask:
        h = ir.reduce(h, op=RED_SUM, dims_mask=mask, keepdim=1, dtype=h.dtype)
    return reshape(h, shape)


@lowers(aten._cdist_forward.default)
def cdist_forward(x1, x2, p, compute_mode=None):
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    h1, h2 = _bcast_batches(x1._h, x2._h)
    P, R = x1.shape[-2], x2.shape[-2]
    use_mm = p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and
                                                 (P > 25 or R > 25)))
    if use_mm:
        return wrap(_cdist_mm(h1, h2))
    d, r = _diff(h1, h2)
    return wrap(_pow_sum(d, p, r))


def _dist_grad_terms(d, dist, p, grad):
    """grad * d/d(x1) of dist for elementwise differences d = x1 - x2."""
    dev, dt = d.device, d.dtype
    zero = scalar(dev, dt, 0.0)
    if p == 0:
        return broadcast(zero, list(d.shape))
    sign = _u("sign", d)
    if p == 1:
        return _b("mul", sign, grad)
    if p == float("inf"):
        a = _u("abs", d)
        hit = _b("eq", a, dist)
        return ir.where(hit, _b("mul", sign, grad), zero)
    if p == 2:
        t = _b("div", d, dist)
    elif p < 2:
        a = _u("abs", d)
        t = _b("div", _b("mul", sign, _b("pow", a, scalar(dev, dt, p - 1))),
               _b("pow", dist, scalar(dev, dt, p - 1)))
    else:
        a = _u("abs", d)
        t = _b("div", _b("mul", d, _b("pow", a, scalar(dev, dt, p - 2))),
               _b("pow", dist, scalar(dev, dt, p - 1)))
    t = ir.where(_b("eq", dist, zero), zero, t)
    return _b("mul", t, grad)


@lowers(aten._cdist_backward.default)
def cdist_backward(grad, x1, x2, p, cdist):
    h1, h2 = _bcast_batches(x1._h, x2._h)
    d, r = _diff(h1, h2)  # [..., P, R, M]
    dist = reshape(cdist._h, list(cdist.shape) + [1])
    g = reshape(grad._h, list(grad.shape) + [1])
    terms = _dist_grad_terms(d, dist, p, g)
    gx = ir.reduce(terms, op=RED_SUM, dims_mask=1 << (r - 1), keepdim=0, dtype=terms.dtype)
    return wrap(_sum_to(gx, list(x1.shape)))


def _pairs(n):
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


@lowers(aten._pdist_forward.default)
def pdist_forward(x, p=2.0):
    dev = x._h.device
    n = x.shape[0]
    pairs = _pairs(n)
    if not pairs:
        return wrap(broadcast(scalar(dev, x._h.dtype, 0), [0]))
    ii = bridge.upload(torch.tensor([a for a, _ in pairs]), dev)
    jj = bridge.upload(torch.tensor([b for _, b in pairs]), dev)
    d = _b("sub", ir.index_select(x._h, ii, dim=0), ir.index_select(x._h, jj, dim=0))
    return wrap(_pow_sum(d, p, 1))


@lowers(aten._pdist_backward.default)
def pdist_backward(grad, x, p, pdist):
    from torchtpu.lowering.core import INDEX_ADD
    dev, dt = x._h.device, x._h.dtype
    n = x.shape[0]
    pairs = _pairs(n)
    if not pairs:
        return wrap(broadcast(scalar(dev, dt, 0), list(x.shape)))
    ii = bridge.upload(torch.tensor([a for a, _ in pairs]), dev)
    jj = bridge.upload(torch.tensor([b for _, b in pairs]), dev)
    d = _b("sub", ir.index_select(x._h, ii, dim=0), ir.index_select(x._h, jj, dim=0))
    k = len(pairs)
    terms = _dist_grad_terms(d, reshape(pdist._h, [k, 1]), p, reshape(grad._h, [k, 1]))
    zeros = broadcast(scalar(dev, dt, 0), list(x.shape))
    g = ir.index_add(zeros, ii, terms, dim=0)
    return wrap(ir.index_add(g, jj, _u("neg", terms), dim=0))


_ = (TRANSPOSE, TT_F32, iota)


# ---------------------------------------------------------- segment_reduce
def _segment_plan(data, lengths, offsets, axis):
    """(segment id of every position along axis, broadcast to data's shape;
    segment lengths; number of segments). lengths/offsets have data's
    leading dims (those before axis) plus the segment dim."""
    from torchtpu.lowering.core import SCAN, SEARCHSORTED, SLICE, CONCAT
    dev = data._h.device
    r = data.dim()
    ax = axis % r
    if offsets is not None:
        off = ir.convert(offsets._h, dtype=TT_I64)
        k = off.shape[-1]
        lead = list(off.shape[:-1])
        nl = 1
        for s in lead:
            nl *= s
        o2 = reshape(off, [nl, k])
        lens = _b("sub", ir.slice(o2, start=(0, 1), limit=(nl, k), step=(1, 1)), ir.slice(o2, start=(0, 0), limit=(nl, k - 1), step=(1, 1)))
        lens = reshape(lens, lead + [k - 1])
        starts = reshape(ir.slice(o2, start=(0, 0), limit=(nl, k - 1), step=(1, 1)), lead + [k - 1])
    else:
        lens = ir.convert(lengths._h, dtype=TT_I64)
        lead = list(lens.shape[:-1])
        S = lens.shape[-1]
        cum = ir.scan(lens, op=0, dim=len(lead), dtype=TT_I64)
        starts = _b("sub", cum, lens)
    S = lens.shape[-1]
    D = data.shape[ax]
    # seg[j] = (number of starts <= j) - 1, among non-empty segments: search
    # the starts of the segments (right bound) and step back to the last
    # segment starting at or before j.
    pos = iota(dev, D)
    if lead:
        pos = broadcast(reshape(pos, [1] * len(lead) + [D]), lead + [D])
    seg = _b("sub", ir.searchsorted(starts, pos, right=1, dtype=TT_I64), scalar(dev, TT_I64, 1))
    # Positions past their segment's end (past the total length) belong to
    # no segment: they go to a dump segment S that callers drop.
    segc = _b("max", seg, scalar(dev, TT_I64, 0))
    ends = _b("add", starts, lens)
    inside = _b("logical_and", _b("ge", seg, scalar(dev, TT_I64, 0)),
                _b("lt", pos, ir.gather(ends, segc, dim=len(lead))))
    seg = ir.where(inside, segc, scalar(dev, TT_I64, S))
    # Broadcast seg ([lead..., D]) over data's trailing dims.
    shape = list(data.shape)
    seg = reshape(seg, lead + [D] + [1] * (r - ax - 1))
    seg = broadcast(seg, shape)
    return seg, lens, S, ax


def _slice_dim(h, ax, n):
    from torchtpu.lowering.core import SLICE
    r = len(h.shape)
    lim = list(h.shape)
    lim[ax] = n
    return ir.slice(h, start=[0] * r, limit=lim, step=[1] * r)


def _pad_dim(h, ax, n, value):
    from torchtpu.lowering.core import PAD
    r = len(h.shape)
    hi = [0] * r
    hi[ax] = n
    return ir.pad(h, lo=[0] * r, hi=hi, value=float(value))


_SEG_INIT = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


@lowers(aten.segment_reduce.default)
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    from torchtpu.lowering.core import SCATTER_REDUCE, SR_AMAX, SR_AMIN, SR_PROD, SR_SUM
    if reduce not in _SEG_INIT:
        raise RuntimeError(f"segment_reduce: unsupported reduction {reduce}")
    dev, dt = data._h.device, data._h.dtype
    seg, lens, S, ax = _segment_plan(data, lengths, offsets, axis)
    shape = list(data.shape)
    oshape = shape[:ax] + [S] + shape[ax + 1:]
    init = _SEG_INIT[reduce] if initial is None else float(initial)
    code = {"sum": SR_SUM, "mean": SR_SUM, "prod": SR_PROD, "max": SR_AMAX, "min": SR_AMIN}
    if shape[ax]:
        dshape = shape[:ax] + [S + 1] + shape[ax + 1:]
        base = broadcast(scalar(dev, dt, init), dshape)
        out = ir.scatter_reduce(base, seg, data._h, dim=ax, reduce=code[reduce], include_self=1)
        out = _slice_dim(out, ax, S)
    else:
        out = broadcast(scalar(dev, dt, init), oshape)
    if reduce == "mean":
        lshape = list(lens.shape) + [1] * (len(oshape) - len(lens.shape))
        ln = reshape(lens, lshape)
        lf = ir.convert(ln, dtype=dt)
        nonempty = _b("gt", ln, scalar(dev, TT_I64, 0))
        mean = ir.where(_u("isnan", out), out, _b("div", out, lf))
        empty_val = scalar(dev, dt, float("nan") if initial is None else init)
        out = ir.where(nonempty, mean, empty_val)
    return wrap(out)


@lowers(aten._segment_reduce_backward.default)
def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0,
                            initial=None):
    from torchtpu.lowering.core import GATHER, INDEX_ADD, SCATTER_REDUCE, SR_PROD, SR_SUM
    dev, dt = data._h.device, data._h.dtype
    seg, lens, S, ax = _segment_plan(data, lengths, offsets, axis)
    shape = list(data.shape)
    if not shape[ax]:
        return wrap(broadcast(scalar(dev, dt, 0), shape))
    # Gathers read a padded row S (the dump segment): zero gradient there.
    gpad = _pad_dim(grad._h, ax, 1, 0.0)
    g = ir.gather(gpad, seg, dim=ax)          # grad of each element's segment
    if reduce == "sum":
        return wrap(g)
    if reduce == "mean":
        lshape = list(lens.shape) + [1] * (len(shape) - len(lens.shape))
        lf = ir.convert(reshape(lens, lshape), dtype=dt)
        lf = broadcast(lf, list(output.shape))
        lf = _pad_dim(lf, ax, 1, 1.0)
        return wrap(_b("div", g, ir.gather(lf, seg, dim=ax)))
    out_e = ir.gather(_pad_dim(output._h, ax, 1, float("nan")), seg, dim=ax)
    if reduce in ("max", "min"):
        hit = _b("logical_or", _b("eq", data._h, out_e),
                 _b("logical_and", _u("isnan", data._h), _u("isnan", out_e)))
        hf = ir.convert(hit, dtype=dt)
        oshape = list(output.shape)
        oshape[ax] += 1
        cnt = ir.scatter_reduce(broadcast(scalar(dev, dt, 0), oshape), seg, hf, dim=ax, reduce=SR_SUM, include_self=1)
        c_e = ir.gather(cnt, seg, dim=ax)
        return wrap(ir.where(hit, _b("div", g, c_e), scalar(dev, dt, 0)))
    # prod: d out / d x_i = product of the other elements of the segment.
    zero = _b("eq", data._h, scalar(dev, dt, 0))
    oshape = list(output.shape)
    oshape[ax] += 1
    nz = ir.scatter_reduce(broadcast(scalar(dev, dt, 0), oshape), seg, ir.convert(zero, dtype=dt), dim=ax, reduce=SR_SUM, include_self=1)
    safe = ir.where(zero, scalar(dev, dt, 1), data._h)
    prod_nz = ir.scatter_reduce(broadcast(scalar(dev, dt, 1 if initial is None else
                                                    float(initial)), oshape), seg, safe, dim=ax, reduce=SR_PROD, include_self=1)
    nz_e = ir.gather(nz, seg, dim=ax)
    pnz_e = ir.gather(prod_nz, seg, dim=ax)
    others = ir.where(zero, ir.where(_b("eq", nz_e, scalar(dev, dt, 1)), pnz_e, scalar(dev, dt, 0)), ir.where(_b("gt", nz_e, scalar(dev, dt, 0)), scalar(dev, dt, 0), _b("div", pnz_e, safe)))
    _ = INDEX_ADD
    return wrap(_b("mul", g, others))


# ------------------------------------------------------ special functions
# The engine's special functions (tt_special_op_t) by aten name, in code order.
_SP = sorted(ir.ENUMS["special"], key=ir.ENUMS["special"].get)


def special_h(code, a, b):
    """SPECIAL op on two operands broadcast to one shape, computed in the
    promoted float dtype."""
    from torchtpu.lowering.core import SPECIAL, float_type_of
    dev = device_of(a, b)
    rt = float_type_of(result_type(a, b))
    ah, bh = handle(a, dev, tt(rt)), handle(b, dev, tt(rt))
    shape = list(_b("add", ah, bh).shape)
    return ir.special(broadcast(ah, shape), broadcast(bh, shape), op=code)


def _special(code):
    def fn(x, n):
        return wrap(special_h(code, x, n))
    return fn


for _i, _name in enumerate(_SP):
    if _i == 0:
        continue
    _p = getattr(aten, "special_" + _name)
    lowers(*[getattr(_p, ov) for ov in _p.overloads() if "out" not in ov])(_special(_i))

lowers(prims.zeta.default, aten.special_zeta.default)(_special(0))


@lowers(aten.polygamma.default)
def polygamma(n, x):
    """polygamma(0, x) = digamma(x); n >= 1: (-1)^(n+1) n! zeta(n+1, x)."""
    import math
    dev = x._h.device
    from torchtpu.lowering.core import float_type_of
    dt = tt(float_type_of(x.dtype))
    xh = handle(x, dev, dt)
    if n == 0:
        return wrap(_u("digamma", xh))
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    z = ir.special(broadcast(scalar(dev, dt, n + 1.0), list(xh.shape)), xh,
                   op=ir.ENUMS["special"]["zeta"])
    f = (-1.0) ** (n + 1) * math.factorial(n)
    return wrap(_b("mul", z, scalar(dev, dt, f)))
