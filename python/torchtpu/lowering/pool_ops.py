"""Pooling and resampling lowerings beyond the 2-D kernels: adaptive max
pooling (1-D/2-D/3-D) and its backward, 3-D average/max pooling, and the
backward passes of nearest and (bi/tri)linear upsampling.

Adaptive windows are gathered: along each spatial dim the window of
output i is [floor(i*I/O), ceil((i+1)*I/O)), padded to the longest window by
repeating its last element (which changes neither the max nor the first
argmax). Upsampling backward is separable: along each dim the gradient is
summed into its source positions with INDEX_ADD, with the same source index
and weight arithmetic (float32) as ATen's CPU kernels."""
import math

import torch

from torchtpu import ir
from torchtpu.lowering.core import (
    BIN, BINARY, CONVERT, INDEX_ADD, INDEX_SELECT, REDUCE, RED_ARGMAX, RED_MAX, SCATTER,
    TRANSPOSE, TT_F32, TT_I64, UN, UNARY, GATHER, aten, broadcast, iota, lowers, reshape,
    scalar, wrap)


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _const_i64(dev, values):
    """A small I64 vector built from iota arithmetic-free values: uploaded
    once as device data (sizes are static, so the graph shape is too)."""
    from torchtpu import bridge
    return bridge.upload(torch.tensor(values, dtype=torch.int64), dev)


def _adaptive_windows(I, O):
    starts = [(i * I) // O for i in range(O)]
    ends = [-((-(i + 1) * I) // O) for i in range(O)]
    K = max(e - s for s, e in zip(starts, ends)) if O else 0
    idx = [[min(s + k, e - 1) for k in range(K)] for s, e in zip(starts, ends)]
    return idx, K


def _adaptive_max(x, output_size, nd):
    dev = x._h.device
    spatial = list(x.shape[-nd:])
    lead = list(x.shape[:-nd])
    out = [int(o) if o is not None else spatial[i] for i, o in enumerate(output_size)]
    for i, s in enumerate(spatial):
        if s == 0 and out[i] > 0:
            raise RuntimeError("adaptive_max_pool: input spatial size must be non-zero")
    h = x._h
    r0 = len(lead)
    wins = []
    # Gather each spatial dim into [O, K] (kept as adjacent dims).
    shape = lead + spatial
    for d in range(nd):
        idx, K = _adaptive_windows(spatial[d], out[d])
        wins.append((idx, K))
        dim = r0 + 2 * d  # dims before d were each split into (O, K)
        flat = [v for row in idx for v in row]
        h = ir.index_select(h, _const_i64(dev, flat), dim=dim)
        shape = shape[:dim] + [out[d], K] + shape[dim + 1:]
        h = reshape(h, shape)
    # [lead, O1, K1, O2, K2, ...] -> [lead, O1, O2, ..., K1*K2*...]
    perm = list(range(r0)) + [r0 + 2 * d for d in range(nd)] + [r0 + 2 * d + 1 for d in range(nd)]
    h = ir.transpose(h, perm=perm)
    ks = [w[1] for w in wins]
    h = reshape(h, lead + out + [_numel(ks)])
    last = len(lead) + nd
    vals = ir.reduce(h, op=RED_MAX, dims_mask=1 << last, keepdim=0, dtype=h.dtype)
    arg = ir.reduce(h, op=RED_ARGMAX, dims_mask=1 << last, keepdim=0, dtype=TT_I64)
    # Flat index (within the spatial plane) of every window element.
    strides = [_numel(spatial[d + 1:]) for d in range(nd)]
    flat = None
    for d in range(nd):
        idx, K = wins[d]
        shp = [1] * (2 * nd)
        shp[d], shp[nd + d] = out[d], K
        t = reshape(_const_i64(dev, [v * strides[d] for row in idx for v in row]), [out[d], K])
        # place as [O_d at d, K_d at nd+d]
        t = reshape(t, [out[d] if i == d else 1 for i in range(nd)] +
                    [K if i == d else 1 for i in range(nd)])
        flat = t if flat is None else ir.binary(flat, t, op=BIN["add"])
    flat = reshape(broadcast(flat, out + ks), out + [_numel(ks)])
    flat = broadcast(reshape(flat, [1] * len(lead) + out + [_numel(ks)]), lead + out + [_numel(ks)])
    picked = ir.gather(flat, reshape(arg, lead + out + [1]), dim=last)
    return wrap(vals), wrap(reshape(picked, lead + out))


def _adaptive_max_fn(nd):
    def fn(x, output_size):
        if x.dim() not in (nd + 1, nd + 2):
            raise RuntimeError(f"adaptive_max_pool{nd}d(): Expected {nd + 1}D or {nd + 2}D "
                               f"tensor, but got: {list(x.shape)}")
        return _adaptive_max(x, list(output_size), nd)
    return fn


lowers(aten.adaptive_max_pool2d.default)(_adaptive_max_fn(2))
lowers(aten.adaptive_max_pool3d.default)(_adaptive_max_fn(3))


def _max_unpool_backward(nd):
    """Backward of max pooling given flat-in-plane indices: the gradient
    goes back to the argmax positions (summed where windows share one)."""
    def fn(grad, x, indices):
        dev, dt = grad._h.device, grad._h.dtype
        spatial = list(x.shape[-nd:])
        lead = list(x.shape[:-nd])
        nl = _numel(lead)
        P = _numel(spatial)
        Q = _numel(grad.shape[-nd:])
        g = reshape(grad._h, [nl, Q])
        i = reshape(indices._h, [nl, Q])
        zeros = broadcast(scalar(dev, dt, 0), [nl, P])
        return wrap(reshape(ir.scatter(zeros, i, g, dim=1, reduce=1), list(x.shape)))
    return fn


lowers(aten.adaptive_max_pool2d_backward.default)(_max_unpool_backward(2))
lowers(aten.adaptive_max_pool3d_backward.default)(_max_unpool_backward(3))


# ---------------------------------------------------- upsample backward
def _scale_value(scale, I, O):
    """ATen's compute_scales_value<float>."""
    f = torch.tensor
    if scale is not None and scale > 0:
        return float(f(1.0 / scale, dtype=torch.float32))
    return float(f(I, dtype=torch.float32) / f(O, dtype=torch.float32))


def _nearest_index(dev, I, O, scale, exact):
    """[O] I64 source indices, as ATen's nearest_idx / nearest_neighbor_exact."""
    if not exact:
        if O == I:
            return iota(dev, O)
        if O == 2 * I:
            return ir.binary(iota(dev, O), scalar(dev, TT_I64, 2), op=BIN["floor_div"])
    s = _scale_value(scale, I, O)
    i = ir.convert(iota(dev, O), dtype=TT_F32)
    if exact:
        i = ir.binary(i, scalar(dev, TT_F32, 0.5), op=BIN["add"])
    f = ir.unary(ir.binary(i, scalar(dev, TT_F32, s), op=BIN["mul"]), op=UN["floor"], alpha=0.0, beta=0.0)
    idx = ir.convert(f, dtype=TT_I64)
    return ir.binary(idx, scalar(dev, TT_I64, I - 1), op=BIN["min"])


def _nearest_backward(nd, exact):
    def fn(grad, output_size, input_size, *scales):
        dev, dt = grad._h.device, grad._h.dtype
        input_size = [int(s) for s in input_size]
        g = grad._h
        r = len(input_size)
        for d in range(nd):
            dim = r - nd + d
            I, O = input_size[dim], g.shape[dim]
            sc = scales[d] if d < len(scales) else None
            idx = _nearest_index(dev, I, O, sc, exact)
            shape = list(g.shape)
            shape[dim] = I
            g = ir.index_add(broadcast(scalar(dev, dt, 0), shape), idx, g, dim=dim)
        return wrap(g)
    return fn


for _n in (1, 2, 3):
    lowers(getattr(aten, f"upsample_nearest{_n}d_backward").default)(_nearest_backward(_n, False))
    lowers(getattr(aten, f"_upsample_nearest_exact{_n}d_backward").default)(
        _nearest_backward(_n, True))


def _linear_weights(dev, I, O, align_corners, scale):
    """(i0, i1, l0, l1) along one dim, ATen's area_pixel_compute_* and
    compute_source_index_and_lambda in float32."""
    if align_corners:
        s = float(torch.tensor(I - 1, dtype=torch.float32) /
                  torch.tensor(O - 1, dtype=torch.float32)) if O > 1 else 0.0
    else:
        s = _scale_value(scale, I, O)
    if O == I and not align_corners:
        # ATen: the identity (no interpolation) when sizes match.
        i = iota(dev, O)
        one = broadcast(scalar(dev, TT_F32, 1.0), [O])
        zero = broadcast(scalar(dev, TT_F32, 0.0), [O])
        return i, i, one, zero
    i = ir.convert(iota(dev, O), dtype=TT_F32)
    if align_corners:
        real = ir.binary(i, scalar(dev, TT_F32, s), op=BIN["mul"])
    else:
        real = ir.binary(ir.binary(ir.binary(i, scalar(dev, TT_F32, 0.5), op=BIN["add"]), scalar(dev, TT_F32, s), op=BIN["mul"]), scalar(dev, TT_F32, 0.5), op=BIN["sub"])
        real = ir.binary(real, scalar(dev, TT_F32, 0.0), op=BIN["max"])
    i0 = ir.convert(real, dtype=TT_I64)
    i0 = ir.binary(i0, scalar(dev, TT_I64, I - 1), op=BIN["min"])
    i1 = ir.binary(ir.binary(i0, scalar(dev, TT_I64, 1), op=BIN["add"]), scalar(dev, TT_I64, I - 1), op=BIN["min"])
    l1 = ir.binary(real, ir.convert(i0, dtype=TT_F32), op=BIN["sub"])
    l1 = ir.binary(ir.binary(l1, scalar(dev, TT_F32, 0.0), op=BIN["max"]), scalar(dev, TT_F32, 1.0), op=BIN["min"])
    l0 = ir.binary(scalar(dev, TT_F32, 1.0), l1, op=BIN["sub"])
    return i0, i1, l0, l1


def _linear_backward(nd):
    def fn(grad, output_size, input_size, align_corners, *scales):
        dev, dt = grad._h.device, grad._h.dtype
        input_size = [int(s) for s in input_size]
        work = dt if dt in (0, 1) else TT_F32
        g = grad._h if grad._h.dtype == work else ir.convert(grad._h, dtype=work)
        r = len(input_size)
        for d in range(nd):
            dim = r - nd + d
            I, O = input_size[dim], g.shape[dim]
            sc = scales[d] if d < len(scales) else None
            i0, i1, l0, l1 = _linear_weights(dev, I, O, align_corners, sc)
            wshape = [O if k == dim else 1 for k in range(r)]
            if work != TT_F32:
                l0, l1 = ir.convert(l0, dtype=work), ir.convert(l1, dtype=work)
            g0 = ir.binary(g, reshape(l0, wshape), op=BIN["mul"])
            g1 = ir.binary(g, reshape(l1, wshape), op=BIN["mul"])
            shape = list(g.shape)
            shape[dim] = I
            acc = ir.index_add(broadcast(scalar(dev, work, 0), shape), i0, g0, dim=dim)
            g = ir.index_add(acc, i1, g1, dim=dim)
        return wrap(g if g.dtype == dt else ir.convert(g, dtype=dt))
    return fn


lowers(aten.upsample_linear1d_backward.default)(_linear_backward(1))
lowers(aten.upsample_bilinear2d_backward.default)(_linear_backward(2))
lowers(aten.upsample_trilinear3d_backward.default)(_linear_backward(3))

_ = (math, torch)


# ------------------------------------------- separable resampling matrices
def _apply_along(h, dim, w_h):
    """Contracts dim of h with the [O, I] matrix w (y[..., o, ...] =
    sum_i w[o, i] h[..., i, ...]) as one DOT."""
    from torchtpu.lowering.core import DOT
    r = len(h.shape)
    perm = [k for k in range(r) if k != dim] + [dim]
    t = ir.transpose(h, perm=perm) if perm != list(range(r)) else h
    lead = [h.shape[k] for k in range(r) if k != dim]
    I = h.shape[dim]
    O = w_h.shape[0]
    t = reshape(t, [1, _numel(lead), I])
    w = reshape(w_h, [1, O, I])
    if w.dtype != t.dtype:
        w = ir.convert(w, dtype=t.dtype)
    y = ir.dot(t, w, trans_a=0, trans_b=1)  # [1, lead, O]
    y = reshape(y, lead + [O])
    inv = [0] * r
    for i, p in enumerate(perm):
        inv[p] = i
    return ir.transpose(y, perm=inv) if inv != list(range(r)) else y


def _upload_matrix(dev, m, dtype):
    from torchtpu import bridge
    return bridge.upload(m.to(dtype), dev)


def _adaptive_avg_matrix(I, O):
    m = torch.zeros(O, I, dtype=torch.float64)
    for o in range(O):
        s, e = (o * I) // O, -((-(o + 1) * I) // O)
        m[o, s:e] = 1.0 / (e - s)
    return m


def _adaptive_avg_3d(x, output_size):
    dev = x._h.device
    h = x._h
    r = x.dim()
    for d, o in enumerate(output_size):
        dim = r - 3 + d
        w = _upload_matrix(dev, _adaptive_avg_matrix(h.shape[dim], int(o)), x.dtype)
        h = _apply_along(h, dim, w)
    return wrap(h)


@lowers(aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(x, output_size):
    if x.dim() not in (4, 5):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got "
                           f"{list(x.shape)}")
    return _adaptive_avg_3d(x, list(output_size))


@lowers(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(grad, x):
    dev = grad._h.device
    g = grad._h
    r = x.dim()
    for d in range(3):
        dim = r - 3 + d
        m = _adaptive_avg_matrix(x.shape[dim], g.shape[dim]).t().contiguous()
        g = _apply_along(g, dim, _upload_matrix(dev, m, grad.dtype))
    return wrap(g)


def _cubic_matrix(I, O, align_corners, scale):
    """[O, I] float32 weights of ATen's bicubic upsampling along one dim
    (A = -0.75, border taps clamped)."""
    f32 = torch.float32
    if align_corners:
        s = torch.tensor(I - 1, dtype=f32) / torch.tensor(O - 1, dtype=f32) if O > 1 else \
            torch.tensor(0.0, dtype=f32)
    else:
        s = torch.tensor(_scale_value(scale, I, O), dtype=f32)
    dst = torch.arange(O, dtype=f32)
    real = s * dst if align_corners else s * (dst + 0.5) - 0.5
    i0 = torch.floor(real)
    t = real - i0
    A = -0.75

    def c1(x):
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def c2(x):
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    ws = [c2(t + 1), c1(t), c1(1 - t), c2(2 - t)]
    m = torch.zeros(O, I, dtype=f32)
    for k in range(4):
        idx = (i0.long() - 1 + k).clamp(0, I - 1)
        m.index_put_((torch.arange(O), idx), ws[k], accumulate=True)
    return m


@lowers(aten.upsample_bicubic2d_backward.default)
def upsample_bicubic2d_backward(grad, output_size, input_size, align_corners, scales_h=None,
                                scales_w=None):
    dev = grad._h.device
    g = grad._h
    input_size = [int(s) for s in input_size]
    for d, sc in ((0, scales_h), (1, scales_w)):
        dim = 2 + d
        m = _cubic_matrix(input_size[dim], g.shape[dim], align_corners, sc).t().contiguous()
        g = _apply_along(g, dim, _upload_matrix(dev, m, grad.dtype))
    return wrap(g)


# ------------------------------------------------------------ avg_pool3d
def _triple(v):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * 3 if len(v) == 1 else v


def _pool_out(I, k, s, p, ceil):
    num = I + 2 * p - k
    o = (-(-num // s) if ceil else num // s) + 1
    if ceil and (o - 1) * s >= I + p:
        o -= 1
    return o


def _avg_counts(I, k, s, p, ceil, include_pad):
    """Per-output-position divisor factor along one dim (ATen's avg_pool3d)."""
    out = []
    for o in range(_pool_out(I, k, s, p, ceil)):
        start = o * s - p
        end = min(start + k, I + p)
        size = end - start
        start, end = max(start, 0), min(end, I)
        out.append(size if include_pad else end - start)
    return out


def _sum_pool_2d(h, k, s, p, ceil):
    from torchtpu.lowering.core import AVG_POOL2D
    return ir.avg_pool2d(h, kernel=(k[0], k[1]), stride=(s[0], s[1]), padding=(p[0], p[1]), ceil_mode=int(ceil), count_include_pad=1, divisor=1)


def _avg3d_plan(x_shape, kernel_size, stride, padding, ceil_mode, count_include_pad,
                divisor_override):
    k = _triple(kernel_size)
    s = _triple(stride) if stride else k
    p = _triple(padding)
    spatial = list(x_shape[-3:])
    counts = [_avg_counts(spatial[i], k[i], s[i], p[i], ceil_mode, count_include_pad)
              for i in range(3)]
    return k, s, p, spatial, counts


def _divisor_h(dev, dt, counts, divisor_override):
    if divisor_override:
        return scalar(dev, dt, float(divisor_override))
    t = torch.tensor(counts[0], dtype=torch.float64)[:, None, None] * \
        torch.tensor(counts[1], dtype=torch.float64)[None, :, None] * \
        torch.tensor(counts[2], dtype=torch.float64)[None, None, :]
    from torchtpu import bridge
    return bridge.upload(t.to(torch.float32 if dt in (0, 2, 3) else torch.float64), dev)


@lowers(aten.avg_pool3d.default)
def avg_pool3d(x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Box sums are separable: a sum-pool over (H, W) per depth slice, then
    over D (as a (kd, 1) pool); the divisor is the product of the per-dim
    window counts (or divisor_override)."""
    dev, dt = x._h.device, x._h.dtype
    k, s, p, sp, counts = _avg3d_plan(x.shape, kernel_size, stride, padding, ceil_mode,
                                      count_include_pad, divisor_override)
    lead = list(x.shape[:-3])
    nl = _numel(lead)
    work = dt if dt in (0, 1) else TT_F32
    h = x._h if dt == work else ir.convert(x._h, dtype=work)
    D, H, W = sp
    h = _sum_pool_2d(reshape(h, [nl * D, 1, H, W]), k[1:], s[1:], p[1:], ceil_mode)
    oh, ow = h.shape[2], h.shape[3]
    h = _sum_pool_2d(reshape(h, [nl, 1, D, oh * ow]), [k[0], 1], [s[0], 1], [p[0], 0], ceil_mode)
    od = h.shape[2]
    h = reshape(h, lead + [od, oh, ow])
    div = _divisor_h(dev, work, counts, divisor_override)
    h = ir.binary(h, div, op=BIN["div"])
    return wrap(h if work == dt else ir.convert(h, dtype=dt))


@lowers(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    from torchtpu.lowering.core import AVG_POOL2D_BWD
    dev, dt = grad._h.device, grad._h.dtype
    k, s, p, sp, counts = _avg3d_plan(x.shape, kernel_size, stride, padding, ceil_mode,
                                      count_include_pad, divisor_override)
    lead = list(x.shape[:-3])
    nl = _numel(lead)
    work = dt if dt in (0, 1) else TT_F32
    g = grad._h if dt == work else ir.convert(grad._h, dtype=work)
    g = ir.binary(g, _divisor_h(dev, work, counts, divisor_override), op=BIN["div"])
    D, H, W = sp
    od, oh, ow = g.shape[-3], g.shape[-2], g.shape[-1]
    # Undo the depth sum-pool, then the (H, W) one.
    g = reshape(g, [nl, 1, od, oh * ow])
    g = ir.avg_pool2d_bwd(g, kernel=(k[0], 1), stride=(s[0], 1), padding=(p[0], 0), ceil_mode=int(ceil_mode), count_include_pad=1, divisor=1, dims=(nl, 1, D, oh * ow))
    g = reshape(g, [nl * D, 1, oh, ow])
    g = ir.avg_pool2d_bwd(g, kernel=(k[1], k[2]), stride=(s[1], s[2]), padding=(p[1], p[2]), ceil_mode=int(ceil_mode), count_include_pad=1, divisor=1, dims=(nl * D, 1, H, W))
    g = reshape(g, list(x.shape))
    return wrap(g if work == dt else ir.convert(g, dtype=dt))


@lowers(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    """The forward's indices are flat within each D*H*W volume: the
    gradient is scattered back to them (the window geometry is already in
    the indices)."""
    return _max_unpool_backward(3)(grad, x, indices)
