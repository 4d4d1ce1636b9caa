"""Sorting, selection and searching lowerings: sort, topk, kthvalue, median,
searchsorted/bucketize, histograms, cummax/cummin/logcumsumexp.

Everything is built on two kernels (src/kernels/sort.c): a stable argsort
along a dim and a binary search; values come back with GATHER."""
import torch

from torchtpu import ir
from torchtpu.lowering.core import (
    BIN, BINARY, CONVERT, CUMULATIVE, CUM_LOGSUMEXP, CUM_MAX, CUM_MAX_INDEX, CUM_MIN,
    CUM_MIN_INDEX, GATHER, INDEX_ADD, REDUCE, RED_MAX, RED_MIN, RED_SUM, SEARCHSORTED, SLICE,
    TT_F64, TT_I32, TT_I64, UN, UNARY, WHERE, ARGSORT, XlaTensor, aten, broadcast, convert,
    device_of, handle, iota, lowers, norm_dim, reshape, result_type, scalar, tt, wrap)


def _vec(h):
    """0-dim operands are treated as 1-element vectors by sort and friends."""
    return reshape(h, [1]) if len(h.shape) == 0 else h


def argsort_h(h, dim, descending=False):
    return ir.argsort(h, dim=dim, descending=int(bool(descending)))


def gather_h(h, dim, idx):
    return ir.gather(h, idx, dim=dim)


def slice_dim_h(h, dim, start, stop):
    r = len(h.shape)
    starts, limits, steps = [0] * r, list(h.shape), [1] * r
    starts[dim], limits[dim] = start, stop
    if start == 0 and stop == h.shape[dim]:
        return h
    return ir.slice(h, start=starts, limit=limits, step=steps)


def _squeeze_dim(h, dim):
    shape = list(h.shape)
    del shape[dim]
    return reshape(h, shape)


# ------------------------------------------------------------------ sort
def sort_h(x, dim=-1, descending=False):
    h = _vec(x._h)
    d = norm_dim(dim, x.dim())
    idx = argsort_h(h, d, descending)
    vals = gather_h(h, d, idx)
    if x.dim() == 0:
        return reshape(vals, []), reshape(idx, [])
    return vals, idx


@lowers(aten.sort.default)
def sort(x, dim=-1, descending=False):
    v, i = sort_h(x, dim, descending)
    return wrap(v), wrap(i)


@lowers(aten.sort.stable)
def sort_stable(x, *, stable=None, dim=-1, descending=False):
    return sort(x, dim, descending)


@lowers(aten.argsort.default)
def argsort(x, dim=-1, descending=False):
    return wrap(sort_h(x, dim, descending)[1])


@lowers(aten.argsort.stable)
def argsort_stable(x, *, stable=False, dim=-1, descending=False):
    return argsort(x, dim, descending)


@lowers(aten.msort.default)
def msort(x):
    return wrap(sort_h(x, 0, False)[0])


@lowers(aten.topk.default)
def topk(x, k, dim=-1, largest=True, sorted=True):
    d = norm_dim(dim, x.dim())
    size = x.shape[d] if x.dim() else 1
    if k < 0 or k > size:
        raise RuntimeError(f"selected index k out of range")
    h = _vec(x._h)
    idx = slice_dim_h(argsort_h(h, d, largest), d, 0, k)
    vals = gather_h(h, d, idx)
    if x.dim() == 0:
        vals, idx = reshape(vals, []), reshape(idx, [])
    return wrap(vals), wrap(idx)


@lowers(aten.kthvalue.default)
def kthvalue(x, k, dim=-1, keepdim=False):
    d = norm_dim(dim, x.dim())
    size = x.shape[d] if x.dim() else 1
    if k < 1 or k > size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    h = _vec(x._h)
    idx = slice_dim_h(argsort_h(h, d), d, k - 1, k)
    vals = gather_h(h, d, idx)
    if x.dim() == 0:
        return wrap(reshape(vals, [])), wrap(reshape(idx, []))
    if not keepdim:
        vals, idx = _squeeze_dim(vals, d), _squeeze_dim(idx, d)
    return wrap(vals), wrap(idx)


def _median_h(x, d, ignore_nan):
    """(values, indices) with d kept (size 1). torch.median returns the
    lower median and propagates NaN (the first NaN, in input order);
    nanmedian takes the lower median of the non-NaN values."""
    h = _vec(x._h)
    dev = h.device
    n = h.shape[d]
    idx = argsort_h(h, d)
    if x.dtype.is_floating_point:
        nan = ir.unary(h, op=UN["isnan"], alpha=0.0, beta=0.0)
        nnan = ir.reduce(convert(nan, TT_I64), op=RED_SUM, dims_mask=1 << d, keepdim=1, dtype=TT_I64)
        nvalid = ir.binary(scalar(dev, TT_I64, n), nnan, op=BIN["sub"])
        if ignore_nan:
            k = ir.binary(ir.binary(nvalid, scalar(dev, TT_I64, 1), op=BIN["sub"]), scalar(dev, TT_I64, 2), op=BIN["floor_div"])
            k = ir.binary(k, scalar(dev, TT_I64, 0), op=BIN["max"])
        else:
            any_nan = ir.binary(nnan, scalar(dev, TT_I64, 0), op=BIN["gt"])
            k = ir.where(any_nan, nvalid, scalar(dev, TT_I64, (n - 1) // 2))
    else:
        shape = list(h.shape)
        shape[d] = 1
        k = broadcast(scalar(dev, TT_I64, (n - 1) // 2), shape)
    sel = gather_h(idx, d, k)
    return gather_h(h, d, sel), sel


def _median_all(ignore_nan):
    def fn(x):
        if x.numel() == 0:
            return wrap(scalar(x._h.device, x._h.dtype, float("nan")))
        flat = wrap(reshape(x._h, [x.numel()]))
        v, _ = _median_h(flat, 0, ignore_nan)
        return wrap(reshape(v, []))
    return fn


def _median_dim(ignore_nan):
    def fn(x, dim=-1, keepdim=False):
        d = norm_dim(dim, x.dim())
        v, i = _median_h(x, d, ignore_nan)
        if x.dim() == 0:
            return wrap(reshape(v, [])), wrap(reshape(i, []))
        if not keepdim:
            v, i = _squeeze_dim(v, d), _squeeze_dim(i, d)
        return wrap(v), wrap(i)
    return fn


lowers(aten.median.default)(_median_all(False))
lowers(aten.nanmedian.default)(_median_all(True))
lowers(aten.median.dim)(_median_dim(False))
lowers(aten.nanmedian.dim)(_median_dim(True))


# aten::mode has no lowering: it runs on the counted CPU fallback, as in
# PyTorch/XLA (which has no XLA kernel for it). ATen's CPU kernel picks the
# index among equal values from an unstable std::sort of (value, index)
# pairs, so only running that kernel gives PyTorch's indices.


# ------------------------------------------------------------ searching
def _search_dtype(a, b):
    rt = result_type(a, b)
    return rt


def searchsorted_h(seq, values, right=False, out_int32=False, side=None, sorter=None):
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                               f"got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, "
                               "got side of left while right was True")
        right = side == "right"
    dev = device_of(seq, values)
    if sorter is not None:
        if sorter.dtype != torch.int64:
            raise RuntimeError("torch.searchsorted(): sorter must be a tensor of long dtype "
                               f"but got dtype {sorter.dtype}")
        if tuple(sorter.shape) != tuple(seq.shape):
            raise RuntimeError("torch.searchsorted(): boundary and sorter must have the same "
                               f"size, but got boundary tensor {list(seq.shape)}and got sorter "
                               f"tensor {list(sorter.shape)}")
    rt = _search_dtype(seq, values)
    sh = handle(seq, dev, tt(rt))
    if sorter is not None:
        sh = gather_h(sh, len(sh.shape) - 1, handle(sorter, dev, TT_I64))
    vh = handle(values, dev, tt(rt))
    scalar_in = len(vh.shape) == 0
    if scalar_in:
        vh = reshape(vh, [1])
        if len(sh.shape) > 1:
            raise RuntimeError("torch.searchsorted(): input value can be a scalar only when "
                               "boundaries tensor dimension is 1, but we got boundaries tensor "
                               f"dim({len(sh.shape)}) and input value's dim(0) numel(1)")
    out = ir.searchsorted(sh, vh, right=int(bool(right)), dtype=TT_I32 if out_int32 else TT_I64)
    return reshape(out, []) if scalar_in else out


@lowers(aten.searchsorted.Tensor)
def searchsorted(seq, values, *, out_int32=False, right=False, side=None, sorter=None):
    return wrap(searchsorted_h(seq, values, right, out_int32, side, sorter))


@lowers(aten.searchsorted.Scalar)
def searchsorted_scalar(seq, value, *, out_int32=False, right=False, side=None, sorter=None):
    return wrap(searchsorted_h(seq, value, right, out_int32, side, sorter))


@lowers(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(x, boundaries, *, out_int32=False, right=False):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.dim()})")
    return wrap(searchsorted_h(boundaries, x, right, out_int32))


# ----------------------------------------------------------- histograms
def _linspace_h(dev, lo, hi, n, dt):
    """n points from lo to hi (0-dim handles of dtype dt), ATen's symmetric
    linspace (the first half from lo, the second half back from hi)."""
    step = ir.binary(ir.binary(hi, lo, op=BIN["sub"]), scalar(dev, dt, max(n - 1, 1)), op=BIN["div"])
    i = convert(iota(dev, n), dt)
    first = ir.binary(lo, ir.binary(step, i, op=BIN["mul"]), op=BIN["add"])
    back = ir.binary(scalar(dev, dt, n - 1), i, op=BIN["sub"])
    second = ir.binary(hi, ir.binary(step, back, op=BIN["mul"]), op=BIN["sub"])
    half = ir.binary(iota(dev, n), scalar(dev, TT_I64, n // 2), op=BIN["lt"])
    return ir.where(half, first, second)


def _data_range(h, lo, hi, widen=1):
    """(lo, hi) handles: the given range, or the data's min/max when both are
    equal (0, 0 by default); an empty range widens by `widen` on each side
    (histc: 1, histogram: 0.5, as ATen)."""
    dev, dt = h.device, h.dtype
    if lo != hi:
        return scalar(dev, dt, lo), scalar(dev, dt, hi)
    flat = reshape(h, [max(1, _numel(h.shape))]) if _numel(h.shape) else None
    if flat is None:  # no data: ATen's empty range is [0, 1]
        if lo == 0 and hi == 0 and widen != 1:
            return scalar(dev, dt, 0), scalar(dev, dt, 1)
        lo_h, hi_h = scalar(dev, dt, lo), scalar(dev, dt, hi)
    else:
        lo_h = ir.reduce(flat, op=RED_MIN, dims_mask=1, keepdim=0, dtype=dt)
        hi_h = ir.reduce(flat, op=RED_MAX, dims_mask=1, keepdim=0, dtype=dt)
    same = ir.binary(lo_h, hi_h, op=BIN["eq"])
    lo_h = ir.where(same, ir.binary(lo_h, scalar(dev, dt, widen), op=BIN["sub"]), lo_h)
    hi_h = ir.where(same, ir.binary(hi_h, scalar(dev, dt, widen), op=BIN["add"]), hi_h)
    return lo_h, hi_h


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _hist_counts(dev, pos, valid, weight_h, bins, dt):
    """Sums weight (or 1) into bins at pos where valid."""
    n = pos.shape[0]
    w = weight_h if weight_h is not None else broadcast(scalar(dev, dt, 1), [n])
    w = ir.where(valid, w, scalar(dev, dt, 0))
    pos = ir.where(valid, pos, scalar(dev, TT_I64, 0))
    zeros = broadcast(scalar(dev, dt, 0), [bins])
    return ir.index_add(zeros, pos, w, dim=0)


@lowers(aten.histc.default)
def histc(x, bins=100, min=0, max=0):
    if bins <= 0:
        raise RuntimeError(f"torch.histc(): bins must be > 0, but got {bins} for dimension 0")
    if min > max:
        raise RuntimeError("torch.histc(): max must be larger than min")
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"\"histogram_cpu\" not implemented for '{x.dtype}'")
    dev, dt = x._h.device, x._h.dtype
    n = x.numel()
    flat = reshape(x._h, [n])
    lo, hi = _data_range(x._h, min, max)
    # pos = (x - lo) * bins / (hi - lo), truncated; x == hi goes to the last bin.
    num = ir.binary(ir.binary(flat, lo, op=BIN["sub"]), scalar(dev, dt, bins), op=BIN["mul"])
    posf = ir.binary(num, ir.binary(hi, lo, op=BIN["sub"]), op=BIN["div"])
    pos = ir.convert(posf, dtype=TT_I64)
    pos = ir.binary(pos, scalar(dev, TT_I64, bins - 1), op=BIN["min"])
    valid = ir.binary(ir.binary(flat, lo, op=BIN["ge"]), ir.binary(flat, hi, op=BIN["le"]), op=BIN["logical_and"])
    return wrap(_hist_counts(dev, pos, valid, None, bins, dt))


def _histogram(x, edges_h, weight, density, dev, dt):
    nb = edges_h.shape[0] - 1
    n = x.numel()
    flat = reshape(x._h, [n])
    pos = ir.searchsorted(edges_h, flat, right=1, dtype=TT_I64)
    pos = ir.binary(pos, scalar(dev, TT_I64, 1), op=BIN["sub"])
    lo = reshape(slice_dim_h(edges_h, 0, 0, 1), [])
    hi = reshape(slice_dim_h(edges_h, 0, nb, nb + 1), [])
    is_hi = ir.binary(flat, hi, op=BIN["eq"])
    pos = ir.where(is_hi, scalar(dev, TT_I64, nb - 1), pos)
    valid = ir.binary(ir.binary(flat, lo, op=BIN["ge"]), ir.binary(flat, hi, op=BIN["le"]), op=BIN["logical_and"])
    wh = None if weight is None else reshape(handle(weight, dev, dt), [n])
    hist = _hist_counts(dev, pos, valid, wh, nb, dt)
    if density:
        widths = ir.binary(slice_dim_h(edges_h, 0, 1, nb + 1), slice_dim_h(edges_h, 0, 0, nb), op=BIN["sub"])
        total = ir.reduce(hist, op=RED_SUM, dims_mask=1, keepdim=0, dtype=dt)
        hist = ir.binary(hist, ir.binary(widths, total, op=BIN["mul"]), op=BIN["div"])
    return hist


@lowers(aten.histogram.bin_ct)
def histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    dev, dt = x._h.device, x._h.dtype
    lo, hi = (range if range is not None else (0.0, 0.0))
    if lo > hi:
        raise RuntimeError(f"torch.histogram(): min should not exceed max, but got min {lo} max "
                           f"{hi} for dimension 0")
    lo_h, hi_h = _data_range(x._h, lo, hi, 0.5)
    edges = _linspace_h(dev, lo_h, hi_h, bins + 1, dt)
    return wrap(_histogram(x, edges, weight, density, dev, dt)), wrap(edges)


@lowers(aten.histogram.bins_tensor)
def histogram_bins_tensor(x, bins, *, weight=None, density=False):
    dev, dt = x._h.device, x._h.dtype
    edges = handle(bins, dev, dt)
    return wrap(_histogram(x, edges, weight, density, dev, dt)), wrap(edges)


# ------------------------------------------------------------ cumulative
def _cum_pair(value_kind, index_kind):
    def fn(x, dim):
        d = norm_dim(dim, x.dim())
        h = _vec(x._h)
        v = ir.cumulative(h, op=value_kind, dim=d)
        i = ir.cumulative(h, op=index_kind, dim=d)
        if x.dim() == 0:
            v, i = reshape(v, []), reshape(i, [])
        return wrap(v), wrap(i)
    return fn


lowers(aten.cummax.default)(_cum_pair(CUM_MAX, CUM_MAX_INDEX))
lowers(aten.cummin.default)(_cum_pair(CUM_MIN, CUM_MIN_INDEX))


@lowers(aten.logcumsumexp.default)
def logcumsumexp(x, dim):
    d = norm_dim(dim, x.dim())
    h = _vec(x._h)
    if not x.dtype.is_floating_point:
        h = convert(h, tt(torch.get_default_dtype()))
    out = ir.cumulative(h, op=CUM_LOGSUMEXP, dim=d)
    return wrap(reshape(out, []) if x.dim() == 0 else out)


_ = (XlaTensor, TT_F64, CONVERT)


# ------------------------------------------------------------ histogramdd
def _hdd_points(x):
    """x [..., D] as [N, D] and D."""
    D = x.shape[-1]
    n = x.numel() // D if D else 0
    return reshape(x._h, [n, D]), n, D


def _hdd_edges(x, bins, rng):
    pts, n, D = _hdd_points(x)
    dev, dt = x._h.device, x._h.dtype
    edges = []
    for d in range(D):
        col = reshape(slice_dim_h(pts, 1, d, d + 1), [n])
        lo, hi = (rng[2 * d], rng[2 * d + 1]) if rng is not None else (0.0, 0.0)
        if lo > hi:
            raise RuntimeError(f"torch.histogramdd(): for dimension {d}, min should not exceed "
                               f"max, but got min {lo} max {hi}")
        lo_h, hi_h = _data_range(col, lo, hi, 0.5)
        edges.append(_linspace_h(dev, lo_h, hi_h, int(bins[d]) + 1, dt))
    return edges


def _hdd_hist(x, edges, weight, density):
    pts, n, D = _hdd_points(x)
    dev, dt = x._h.device, x._h.dtype
    sizes = [e.shape[0] - 1 for e in edges]
    total = 1
    for s_ in sizes:
        total *= s_
    flat = broadcast(scalar(dev, TT_I64, 0), [n])
    valid = broadcast(scalar(dev, 9, 1), [n])
    stride = total
    for d in range(D):
        nb = sizes[d]
        stride //= max(nb, 1)
        col = reshape(slice_dim_h(pts, 1, d, d + 1), [n])
        e = edges[d]
        pos = ir.binary(ir.searchsorted(e, col, right=1, dtype=TT_I64), scalar(dev, TT_I64, 1), op=BIN["sub"])
        lo = reshape(slice_dim_h(e, 0, 0, 1), [])
        hi = reshape(slice_dim_h(e, 0, nb, nb + 1), [])
        pos = ir.where(ir.binary(col, hi, op=BIN["eq"]), scalar(dev, TT_I64, nb - 1), pos)
        ok = ir.binary(ir.binary(col, lo, op=BIN["ge"]), ir.binary(col, hi, op=BIN["le"]), op=BIN["logical_and"])
        valid = ir.binary(valid, ok, op=BIN["logical_and"])
        pos = ir.binary(pos, scalar(dev, TT_I64, 0), op=BIN["max"])
        flat = ir.binary(flat, ir.binary(pos, scalar(dev, TT_I64, stride), op=BIN["mul"]), op=BIN["add"])
    wh = None if weight is None else reshape(handle(weight, dev, dt), [n])
    hist = _hist_counts(dev, flat, valid, wh, total, dt) if n else \
        broadcast(scalar(dev, dt, 0), [total])
    hist = reshape(hist, sizes)
    if density:
        s_all = ir.reduce(reshape(hist, [total]), op=RED_SUM, dims_mask=1, keepdim=0, dtype=dt)
        hist = ir.binary(hist, s_all, op=BIN["div"])
        for d in range(D):
            nb = sizes[d]
            w = ir.binary(slice_dim_h(edges[d], 0, 1, nb + 1), slice_dim_h(edges[d], 0, 0, nb), op=BIN["sub"])
            hist = ir.binary(hist, reshape(w, [nb if i == d else 1 for i in range(D)]), op=BIN["div"])
    return hist


@lowers(aten._histogramdd_bin_edges.default)
def histogramdd_bin_edges(x, bins, *, range=None, weight=None, density=False):
    return [wrap(e) for e in _hdd_edges(x, bins, range)]


@lowers(aten._histogramdd_from_bin_cts.default)
def histogramdd_from_bin_cts(x, bins, *, range=None, weight=None, density=False):
    return wrap(_hdd_hist(x, _hdd_edges(x, bins, range), weight, density))


@lowers(aten._histogramdd_from_bin_tensors.default)
def histogramdd_from_bin_tensors(x, bins, *, weight=None, density=False):
    dev, dt = x._h.device, x._h.dtype
    return wrap(_hdd_hist(x, [handle(b, dev, dt) for b in bins], weight, density))
