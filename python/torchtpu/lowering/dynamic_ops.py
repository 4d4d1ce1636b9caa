"""Ops whose output shape depends on values: nonzero, masked_select,
unique (sorted, by dim, consecutive).

A lazy graph needs static shapes, so each of these does exactly one
documented sync: the device computes the data-dependent size (a count),
the count is read back (counter `DynamicShapeSync`, one per read), and the
rest is recorded on the device with that size. No CPU fallback runs and no
aten:: counter moves; everything else stays lazy. nonzero_static has a
static size and needs no sync.
"""
import torch

from torchtpu import _C, bridge, ir
from torchtpu.lowering.core import (
    ARGSORT, BIN, BINARY, BROADCAST, CONCAT, CONVERT, GATHER, INDEX_ADD, INDEX_SELECT, REDUCE,
    RED_ANY, RED_SUM, SCAN, SCATTER, TRANSPOSE, TT_BOOL, TT_I64, WHERE, aten, broadcast,
    handle, iota, lowers, norm_dim, reshape, scalar, wrap)

SYNC_COUNTER = "DynamicShapeSync"


def read_count(h):
    """Reads a 0-dim I64 handle back to the host: the one sync of a
    dynamic-shape op, counted as DynamicShapeSync."""
    _C.counter_add(SYNC_COUNTER, 1)
    return int(bridge.download(h).item())


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _cumsum_i64(h):
    return ir.scan(h, op=0, dim=0, dtype=TT_I64)


def _compact(flag, src, count, dev):
    """src[i] for the i where flag (1-D BOOL) is set, in order, as a
    [count] vector (count = number of set flags, known)."""
    n = flag.shape[0]
    fi = ir.convert(flag, dtype=TT_I64)
    pos = ir.binary(_cumsum_i64(fi), scalar(dev, TT_I64, 1), op=BIN["sub"])
    pos = ir.where(flag, pos, scalar(dev, TT_I64, count))  # dump slot: count
    base = broadcast(scalar(dev, src.dtype, 0), [count + 1])
    out = ir.scatter(base, pos, src, dim=0, reduce=0)
    return ir.slice(out, start=(0,), limit=(count,), step=(1,)) if n else base


def _flat_to_coords(flat, shape, dev):
    """[c] flat indices -> [c, rank] coordinates."""
    c = flat.shape[0]
    cols = []
    stride = _numel(shape)
    for size in shape:
        stride //= max(size, 1)
        q = ir.binary(flat, scalar(dev, TT_I64, max(stride, 1)), op=BIN["floor_div"])
        q = ir.binary(q, scalar(dev, TT_I64, max(size, 1)), op=BIN["remainder"])
        cols.append(reshape(q, [c, 1]))
    if len(cols) == 1:
        return cols[0]
    return ir.concat(*cols, dim=1)


def nonzero_h(mask):
    """nonzero of a BOOL handle: [count, rank] I64 (one counted sync)."""
    dev = mask.device
    shape = list(mask.shape)
    n = _numel(shape)
    flat = reshape(mask, [n])
    if n == 0:
        return broadcast(scalar(dev, TT_I64, 0), [0, len(shape)])
    cnt = ir.reduce(ir.convert(flat, dtype=TT_I64), op=RED_SUM, dims_mask=1, keepdim=0, dtype=TT_I64)
    c = read_count(cnt)
    if c == 0:
        return broadcast(scalar(dev, TT_I64, 0), [0, len(shape)])
    idx = _compact(flat, iota(dev, n), c, dev)
    if len(shape) == 0:
        return broadcast(scalar(dev, TT_I64, 0), [c, 0])
    return _flat_to_coords(idx, shape, dev)


def _as_bool(x):
    h = x._h
    if h.dtype == TT_BOOL:
        return h
    return ir.binary(h, scalar(h.device, h.dtype, 0), op=BIN["ne"])


@lowers(aten.nonzero.default)
def nonzero(x):
    return wrap(nonzero_h(_as_bool(x)))


@lowers(aten.nonzero_static.default)
def nonzero_static(x, *, size, fill_value=-1):
    dev = x._h.device
    shape = list(x.shape)
    n = _numel(shape)
    r = len(shape)
    if size < 0:
        raise RuntimeError(f"nonzero_static: 'size' must be an non-negative integer, but got "
                           f"{size}")
    fill = broadcast(scalar(dev, TT_I64, fill_value), [size, r])
    if n == 0 or size == 0:
        return wrap(fill)
    flat = reshape(_as_bool(x), [n])
    fi = ir.convert(flat, dtype=TT_I64)
    pos = ir.binary(_cumsum_i64(fi), scalar(dev, TT_I64, 1), op=BIN["sub"])
    keep = ir.binary(flat, ir.binary(pos, scalar(dev, TT_I64, size), op=BIN["lt"]), op=BIN["logical_and"])
    pos = ir.where(keep, pos, scalar(dev, TT_I64, size))
    base = broadcast(scalar(dev, TT_I64, -1), [size + 1])
    idx = ir.slice(ir.scatter(base, pos, iota(dev, n), dim=0, reduce=0), start=(0,), limit=(size,), step=(1,))
    valid = reshape(ir.binary(idx, scalar(dev, TT_I64, 0), op=BIN["ge"]), [size, 1])
    safe = ir.binary(idx, scalar(dev, TT_I64, 0), op=BIN["max"])
    coords = _flat_to_coords(safe, shape, dev) if r else broadcast(scalar(dev, TT_I64, 0),
                                                                     [size, 0])
    return wrap(ir.where(valid, coords, fill))


@lowers(aten.masked_select.default)
def masked_select(x, mask):
    dev, dt = x._h.device, x._h.dtype
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask")
    shape = _bshape(list(x.shape), list(mask.shape))
    n = _numel(shape)
    xh = reshape(broadcast(x._h, shape), [n])
    mh = reshape(broadcast(handle(mask, dev, TT_BOOL), shape), [n])
    if n == 0:
        return wrap(reshape(xh, [0]))
    cnt = ir.reduce(ir.convert(mh, dtype=TT_I64), op=RED_SUM, dims_mask=1, keepdim=0, dtype=TT_I64)
    c = read_count(cnt)
    if c == 0:
        return wrap(broadcast(scalar(dev, dt, 0), [0]))
    return wrap(_compact(mh, xh, c, dev))


def _bshape(a, b):
    r = max(len(a), len(b))
    a = [1] * (r - len(a)) + a
    b = [1] * (r - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension")
        out.append(y if x == 1 else x)
    return out


# ------------------------------------------------------------------ unique
def _differs_prev(s, dev):
    """[n] BOOL: row i differs from row i-1 (row 0: True). s is [n] or
    [n, k] (rows compared over k)."""
    n = s.shape[0]
    rest = list(s.shape[1:])
    r = len(s.shape)
    cur = ir.slice(s, start=[1] + [0] * (r - 1), limit=[n] + rest, step=[1] * r)
    prev = ir.slice(s, start=[0] * r, limit=[n - 1] + rest, step=[1] * r)
    ne = ir.binary(cur, prev, op=BIN["ne"])
    if rest:
        ne = ir.reduce(ne, op=RED_ANY, dims_mask=((1 << r) - 1) & ~1, keepdim=0, dtype=TT_BOOL)
    first = broadcast(scalar(dev, TT_BOOL, 1), [1])
    return ir.concat(first, ne, dim=0)


def _unique_core(s, dev, order=None):
    """s: sorted (or consecutive) rows [n, ...]. Returns (unique rows,
    group id per row of s, counts) with one counted sync."""
    n = s.shape[0]
    flag = _differs_prev(s, dev)
    gid = ir.binary(_cumsum_i64(ir.convert(flag, dtype=TT_I64)), scalar(dev, TT_I64, 1), op=BIN["sub"])
    cnt = ir.reduce(ir.convert(flag, dtype=TT_I64), op=RED_SUM, dims_mask=1, keepdim=0, dtype=TT_I64)
    c = read_count(cnt)
    rest = list(s.shape[1:])
    # Rows where a group starts, compacted: the unique rows.
    starts = _compact(flag, iota(dev, n), c, dev)
    uniq = ir.index_select(s, starts, dim=0)
    counts = ir.index_add(broadcast(scalar(dev, TT_I64, 0), [c]), gid, broadcast(scalar(dev, TT_I64, 1), [n]), dim=0)
    if order is not None:
        inv = ir.scatter(broadcast(scalar(dev, TT_I64, 0), [n]), order, gid, dim=0, reduce=0)
    else:
        inv = gid
    _ = rest
    return uniq, inv, counts


def _empty_i64(dev):
    return broadcast(scalar(dev, TT_I64, 0), [0])


@lowers(aten._unique2.default)
def unique2(x, sorted=True, return_inverse=False, return_counts=False):
    dev = x._h.device
    n = x.numel()
    flat = reshape(x._h, [n])
    if n == 0:
        inv = reshape(_empty_i64(dev), list(x.shape)) if return_inverse else _empty_i64(dev)
        return wrap(flat), wrap(inv), wrap(_empty_i64(dev))
    order = ir.argsort(flat, dim=0, descending=0)
    s = ir.gather(flat, order, dim=0)
    uniq, inv, counts = _unique_core(s, dev, order)
    inv = reshape(inv, list(x.shape)) if return_inverse else _empty_i64(dev)
    counts = counts if return_counts else _empty_i64(dev)
    return wrap(uniq), wrap(inv), wrap(counts)


@lowers(aten._unique.default)
def unique_legacy(x, sorted=True, return_inverse=False):
    u, i, _ = unique2(x, sorted, return_inverse, False)
    return u, i


def _rows_along(x, d):
    """x with dim d first, flattened to [n, k] (and the permuted shape)."""
    r = x.dim()
    perm = [d] + [i for i in range(r) if i != d]
    h = x._h if perm == list(range(r)) else ir.transpose(x._h, perm=perm)
    shape = [x.shape[i] for i in perm]
    k = _numel(shape[1:])
    return reshape(h, [shape[0], k]), shape, perm


def _unrows(h, shape, perm, c):
    shape = [c] + shape[1:]
    h = reshape(h, shape)
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return h if inv == list(range(len(perm))) else ir.transpose(h, perm=inv)


def _lexsort_rows(rows, dev):
    """Stable lexicographic order of the rows of [n, k]."""
    n, k = rows.shape
    order = iota(dev, n)
    for j in reversed(range(k)):
        col = reshape(ir.slice(rows, start=(0, j), limit=(n, j + 1), step=(1, 1)), [n])
        key = ir.gather(col, order, dim=0)
        perm = ir.argsort(key, dim=0, descending=0)
        order = ir.gather(order, perm, dim=0)
    return order


@lowers(aten.unique_dim.default)
def unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    dev = x._h.device
    d = norm_dim(dim, x.dim())
    rows, shape, perm = _rows_along(x, d)
    n, k = rows.shape
    if n == 0 or k == 0:
        if n and not k:  # every row is empty, hence equal
            uniq = _unrows(ir.slice(rows, start=(0, 0), limit=(1, 0), step=(1, 1)), shape, perm, 1)
            return (wrap(uniq), wrap(broadcast(scalar(dev, TT_I64, 0), [n])),
                    wrap(broadcast(scalar(dev, TT_I64, n), [1])))
        return wrap(x._h), wrap(_empty_i64(dev)), wrap(_empty_i64(dev))
    order = _lexsort_rows(rows, dev)
    s = ir.index_select(rows, order, dim=0)
    uniq, inv, counts = _unique_core(s, dev, order)
    return wrap(_unrows(uniq, shape, perm, uniq.shape[0])), wrap(inv), wrap(counts)


@lowers(aten.unique_consecutive.default)
def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    dev = x._h.device
    if dim is None:
        n = x.numel()
        flat = reshape(x._h, [n])
        if n == 0:
            return wrap(flat), wrap(_empty_i64(dev)), wrap(_empty_i64(dev))
        uniq, inv, counts = _unique_core(flat, dev)
        inv = reshape(inv, list(x.shape)) if return_inverse else _empty_i64(dev)
        return wrap(uniq), wrap(inv), wrap(counts if return_counts else _empty_i64(dev))
    d = norm_dim(dim, x.dim())
    rows, shape, perm = _rows_along(x, d)
    n, k = rows.shape
    if n == 0 or k == 0:
        return wrap(x._h), wrap(_empty_i64(dev)), wrap(_empty_i64(dev))
    uniq, inv, counts = _unique_core(rows, dev)
    return (wrap(_unrows(uniq, shape, perm, uniq.shape[0])),
            wrap(inv if return_inverse else _empty_i64(dev)),
            wrap(counts if return_counts else _empty_i64(dev)))


_ = (BROADCAST, GATHER)
