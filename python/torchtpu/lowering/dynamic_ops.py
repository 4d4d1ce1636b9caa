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

from torchtpu import _C, bridge
from torchtpu.lowering.core import (
    ARGSORT, BIN, BINARY, BROADCAST, CONCAT, CONVERT, GATHER, INDEX_ADD, INDEX_SELECT, REDUCE,
    RED_ANY, RED_SUM, SCAN, SCATTER, SLICE, TRANSPOSE, TT_BOOL, TT_I64, WHERE, aten, broadcast,
    handle, iota, lowers, norm_dim, op, reshape, scalar, wrap)

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
    return op(SCAN, [h], (0, 0, TT_I64))


def _compact(flag, src, count, dev):
    """src[i] for the i where flag (1-D BOOL) is set, in order, as a
    [count] vector (count = number of set flags, known)."""
    n = flag.shape[0]
    fi = op(CONVERT, [flag], (TT_I64,))
    pos = op(BINARY, [_cumsum_i64(fi), scalar(dev, TT_I64, 1)], (BIN["sub"],))
    pos = op(WHERE, [flag, pos, scalar(dev, TT_I64, count)])  # dump slot: count
    base = broadcast(scalar(dev, src.dtype, 0), [count + 1])
    out = op(SCATTER, [base, pos, src], (0, 0))
    return op(SLICE, [out], (0, count, 1)) if n else base


def _flat_to_coords(flat, shape, dev):
    """[c] flat indices -> [c, rank] coordinates."""
    c = flat.shape[0]
    cols = []
    stride = _numel(shape)
    for size in shape:
        stride //= max(size, 1)
        q = op(BINARY, [flat, scalar(dev, TT_I64, max(stride, 1))], (BIN["floor_div"],))
        q = op(BINARY, [q, scalar(dev, TT_I64, max(size, 1))], (BIN["remainder"],))
        cols.append(reshape(q, [c, 1]))
    if len(cols) == 1:
        return cols[0]
    return op(CONCAT, cols, (1,))


def nonzero_h(mask):
    """nonzero of a BOOL handle: [count, rank] I64 (one counted sync)."""
    dev = mask.device
    shape = list(mask.shape)
    n = _numel(shape)
    flat = reshape(mask, [n])
    if n == 0:
        return broadcast(scalar(dev, TT_I64, 0), [0, len(shape)])
    cnt = op(REDUCE, [op(CONVERT, [flat], (TT_I64,))], (RED_SUM, 1, 0, TT_I64))
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
    return op(BINARY, [h, scalar(h.device, h.dtype, 0)], (BIN["ne"],))


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
    fi = op(CONVERT, [flat], (TT_I64,))
    pos = op(BINARY, [_cumsum_i64(fi), scalar(dev, TT_I64, 1)], (BIN["sub"],))
    keep = op(BINARY, [flat, op(BINARY, [pos, scalar(dev, TT_I64, size)], (BIN["lt"],))],
              (BIN["logical_and"],))
    pos = op(WHERE, [keep, pos, scalar(dev, TT_I64, size)])
    base = broadcast(scalar(dev, TT_I64, -1), [size + 1])
    idx = op(SLICE, [op(SCATTER, [base, pos, iota(dev, n)], (0, 0))], (0, size, 1))
    valid = reshape(op(BINARY, [idx, scalar(dev, TT_I64, 0)], (BIN["ge"],)), [size, 1])
    safe = op(BINARY, [idx, scalar(dev, TT_I64, 0)], (BIN["max"],))
    coords = _flat_to_coords(safe, shape, dev) if r else broadcast(scalar(dev, TT_I64, 0),
                                                                     [size, 0])
    return wrap(op(WHERE, [valid, coords, fill]))


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
    cnt = op(REDUCE, [op(CONVERT, [mh], (TT_I64,))], (RED_SUM, 1, 0, TT_I64))
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
    cur = op(SLICE, [s], tuple([1] + [0] * (r - 1) + [n] + rest + [1] * r))
    prev = op(SLICE, [s], tuple([0] * r + [n - 1] + rest + [1] * r))
    ne = op(BINARY, [cur, prev], (BIN["ne"],))
    if rest:
        ne = op(REDUCE, [ne], (RED_ANY, ((1 << r) - 1) & ~1, 0, TT_BOOL))
    first = broadcast(scalar(dev, TT_BOOL, 1), [1])
    return op(CONCAT, [first, ne], (0,))


def _unique_core(s, dev, order=None):
    """s: sorted (or consecutive) rows [n, ...]. Returns (unique rows,
    group id per row of s, counts) with one counted sync."""
    n = s.shape[0]
    flag = _differs_prev(s, dev)
    gid = op(BINARY, [_cumsum_i64(op(CONVERT, [flag], (TT_I64,))), scalar(dev, TT_I64, 1)],
             (BIN["sub"],))
    cnt = op(REDUCE, [op(CONVERT, [flag], (TT_I64,))], (RED_SUM, 1, 0, TT_I64))
    c = read_count(cnt)
    rest = list(s.shape[1:])
    # Rows where a group starts, compacted: the unique rows.
    starts = _compact(flag, iota(dev, n), c, dev)
    uniq = op(INDEX_SELECT, [s, starts], (0,))
    counts = op(INDEX_ADD, [broadcast(scalar(dev, TT_I64, 0), [c]), gid,
                            broadcast(scalar(dev, TT_I64, 1), [n])], (0,))
    if order is not None:
        inv = op(SCATTER, [broadcast(scalar(dev, TT_I64, 0), [n]), order, gid], (0, 0))
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
    order = op(ARGSORT, [flat], (0, 0))
    s = op(GATHER, [flat, order], (0,))
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
    h = x._h if perm == list(range(r)) else op(TRANSPOSE, [x._h], perm)
    shape = [x.shape[i] for i in perm]
    k = _numel(shape[1:])
    return reshape(h, [shape[0], k]), shape, perm


def _unrows(h, shape, perm, c):
    shape = [c] + shape[1:]
    h = reshape(h, shape)
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return h if inv == list(range(len(perm))) else op(TRANSPOSE, [h], inv)


def _lexsort_rows(rows, dev):
    """Stable lexicographic order of the rows of [n, k]."""
    n, k = rows.shape
    order = iota(dev, n)
    for j in reversed(range(k)):
        col = reshape(op(SLICE, [rows], (0, j, n, j + 1, 1, 1)), [n])
        key = op(GATHER, [col, order], (0,))
        perm = op(ARGSORT, [key], (0, 0))
        order = op(GATHER, [order, perm], (0,))
    return order


@lowers(aten.unique_dim.default)
def unique_dim(x, dim, sorted=True, return_inverse=False, return_counts=False):
    dev = x._h.device
    d = norm_dim(dim, x.dim())
    rows, shape, perm = _rows_along(x, d)
    n, k = rows.shape
    if n == 0 or k == 0:
        if n and not k:  # every row is empty, hence equal
            uniq = _unrows(op(SLICE, [rows], (0, 0, 1, 0, 1, 1)), shape, perm, 1)
            return (wrap(uniq), wrap(broadcast(scalar(dev, TT_I64, 0), [n])),
                    wrap(broadcast(scalar(dev, TT_I64, n), [1])))
        return wrap(x._h), wrap(_empty_i64(dev)), wrap(_empty_i64(dev))
    order = _lexsort_rows(rows, dev)
    s = op(INDEX_SELECT, [rows, order], (0,))
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
