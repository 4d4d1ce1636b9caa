"""Advanced indexing and strided views: index, index_put, masked_scatter,
scatter_reduce, index_reduce, put/take, as_strided, diagonal, unfold.

Advanced indexing works on a flattened view: the indexed dims are moved to
the front and merged, the index tensors are broadcast and combined into one
flat index, and one INDEX_SELECT (or INDEX_ADD / SCATTER for index_put)
does the work. A boolean mask becomes index tensors through nonzero, which
is the one data-dependent step (a counted sync, see dynamic_ops.py); a mask
assignment with a single value needs no sync (it is a WHERE)."""
import torch

from torchtpu import bridge, ir
from torchtpu.lowering import storage_views
from torchtpu.lowering.core import (
    BIN, BINARY, CONVERT, INDEX_ADD, INDEX_SELECT, SCAN, SCATTER, SCATTER_REDUCE,
    SR_AMAX, SR_AMIN, SR_MEAN, SR_PROD, SR_SUM, TRANSPOSE, TT_BOOL, TT_I64, WHERE,
    XlaTensor, aten, broadcast, convert, handle, iota, lowers, norm_dim, reshape, scalar, tt,
    wrap)


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _permute_h(h, perm):
    perm = list(perm)
    if perm == list(range(len(perm))):
        return h
    return ir.transpose(h, perm=perm)


def _bshape(shapes):
    """Broadcast shape of several shapes (raises as PyTorch does)."""
    r = max((len(s) for s in shapes), default=0)
    out = [1] * r
    for s in shapes:
        for i, d in enumerate(s):
            j = r - len(s) + i
            if out[j] == 1:
                out[j] = d
            elif d != 1 and d != out[j]:
                raise IndexError(
                    "shape mismatch: indexing tensors could not be broadcast together with "
                    f"shapes {', '.join(str(list(t)) for t in shapes)}")
    return out


def index_handle(ix, dev):
    """Engine handle of an index tensor given as xla tensor or CPU tensor."""
    if isinstance(ix, XlaTensor):
        if ix._h.device != dev:
            raise RuntimeError("indices should be either on cpu or on the same device as the "
                               "indexed tensor (xla)")
        return ix._h
    return bridge.upload(ix, dev)


def _expand_masks(x, indices):
    """Replaces boolean/byte masks by the index tensors nonzero gives (one
    per masked dim); returns a list of (dim, handle or None)."""
    from torchtpu.lowering.dynamic_ops import nonzero_h
    dev = x._h.device
    out = []
    d = 0
    for ix in indices:
        if ix is None:
            out.append(None)
            d += 1
            continue
        if ix.dtype in (torch.bool, torch.uint8):
            k = ix.dim()
            for j in range(k):
                if d + j >= x.dim() or ix.shape[j] != x.shape[d + j]:
                    raise IndexError(
                        f"The shape of the mask {list(ix.shape)} at index {j} does not match "
                        f"the shape of the indexed tensor {list(x.shape)} at index {d + j}")
            mh = index_handle(ix, dev)
            if mh.dtype != TT_BOOL:
                mh = ir.convert(mh, dtype=TT_BOOL)
            nz = nonzero_h(mh)  # [count, k]
            cnt = nz.shape[0]
            for j in range(k):
                col = ir.slice(nz, start=(0, j), limit=(cnt, j + 1), step=(1, 1))
                out.append(reshape(col, [cnt]))
            d += k
            continue
        if ix.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        h = index_handle(ix, dev)
        if h.dtype != TT_I64:
            h = ir.convert(h, dtype=TT_I64)
        out.append(h)
        d += 1
    if len(out) > x.dim():
        raise IndexError(f"too many indices for tensor of dimension {x.dim()} (got {len(out)})")
    return out + [None] * (x.dim() - len(out))


def _plan(x, indices):
    """Common part of index and index_put. Returns (xp, flat, bshape, rest,
    perm_x, adjacent_at): xp is x with indexed dims first merged into one
    ([P, *rest]); flat the I64 flat index [numel(bshape)]; perm_x the
    permutation applied to x; adjacent_at the position where PyTorch puts
    the broadcast dims (None: in front)."""
    dev = x._h.device
    idx = _expand_masks(x, indices)
    dims = [d for d, h in enumerate(idx) if h is not None]
    rest_dims = [d for d in range(x.dim()) if d not in dims]
    bshape = _bshape([list(idx[d].shape) for d in dims])
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    adjacent_at = dims[0] if adjacent and dims[0] > 0 else None
    perm = dims + rest_dims
    xh = _permute_h(x._h, perm)
    isizes = [x.shape[d] for d in dims]
    rest = [x.shape[d] for d in rest_dims]
    P = _numel(isizes)
    xp = reshape(xh, [P] + rest)
    nb = _numel(bshape)
    flat = None
    stride = 1
    for d, size in reversed(list(zip(dims, isizes))):
        h = broadcast(idx[d], bshape) if list(idx[d].shape) != bshape else idx[d]
        # Wrap negative indices once (x[-1] is the last element).
        neg = ir.binary(h, scalar(dev, TT_I64, 0), op=BIN["lt"])
        h = ir.where(neg, ir.binary(h, scalar(dev, TT_I64, size), op=BIN["add"]), h)
        if stride != 1:
            h = ir.binary(h, scalar(dev, TT_I64, stride), op=BIN["mul"])
        flat = h if flat is None else ir.binary(flat, h, op=BIN["add"])
        stride *= size
    flat = reshape(flat, [nb])
    return xp, flat, bshape, rest, perm, adjacent_at


def _result_perm(nbd, nrest, adjacent_at):
    """Permutation taking [*bshape, *rest] to PyTorch's result layout."""
    order = list(range(nbd + nrest))
    if adjacent_at is None:
        return order
    b = order[:nbd]
    r = order[nbd:]
    return r[:adjacent_at] + b + r[adjacent_at:]


@lowers(aten.index.Tensor)
def index_tensor(x, indices):
    if all(i is None for i in indices):
        return wrap(x._h)
    if x.dim() == 0:
        xv = wrap(reshape(x._h, [1]))
        out = index_tensor(xv, [_zero_dim_index(indices[0], x._h.device)])
        return out
    xp, flat, bshape, rest, perm, at = _plan(x, indices)
    if xp.shape[0] == 0 and flat.shape[0] > 0:
        raise IndexError("index is out of bounds for dimension with size 0")
    out = ir.index_select(xp, flat, dim=0)
    out = reshape(out, bshape + rest)
    return wrap(_permute_h(out, _result_perm(len(bshape), len(rest), at)))


def _zero_dim_index(ix, dev):
    """x[mask] / x[i] on a 0-dim x: treat x as 1 element."""
    if ix.dtype == torch.bool:
        return wrap(reshape(index_handle(ix, dev), [1]))
    return ix


def _values_as_rows(values, dev, dt, bshape, rest, at):
    """values broadcast to the indexing result's layout, then moved to
    [*bshape, *rest] and flattened to [numel(bshape), *rest]."""
    vh = handle(values, dev, dt)
    nbd, nrest = len(bshape), len(rest)
    rp = _result_perm(nbd, nrest, at)
    res_shape = [(bshape + rest)[i] for i in rp]
    vh = broadcast(vh, res_shape) if list(vh.shape) != res_shape else vh
    inv = [0] * len(rp)
    for i, p in enumerate(rp):
        inv[p] = i
    vh = _permute_h(vh, inv)
    return reshape(vh, [_numel(bshape)] + rest)


def _mask_only(x, indices, values):
    """x[mask] = v (or +=) where mask is one boolean tensor over x's leading
    dims and v has one element: a WHERE, no sync."""
    present = [i for i in indices if i is not None]
    if len(indices) != 1 or len(present) != 1 or present[0].dtype != torch.bool:
        return None
    m = present[0]
    if tuple(m.shape) != tuple(x.shape[:m.dim()]) or values.numel() != 1:
        return None
    return m


@lowers(aten.index_put.default, aten._index_put_impl.default)
def index_put(x, indices, values, accumulate=False, unsafe=False):
    dev, dt = x._h.device, x._h.dtype
    if values.dtype != x.dtype and isinstance(values, torch.Tensor) and values.dim() > 0:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{x.dtype} for the destination and {values.dtype} for the source.")
    if all(i is None for i in indices):
        v = broadcast(handle(values, dev, dt), x.shape)
        if accumulate:
            v = ir.binary(x._h, v, op=BIN["add"])
        return wrap(v)
    m = _mask_only(x, indices, values)
    if m is not None:
        mh = index_handle(m, dev)
        mh = reshape(mh, list(m.shape) + [1] * (x.dim() - m.dim()))
        v = reshape(handle(values, dev, dt), [])
        if accumulate:
            v = ir.binary(x._h, v, op=BIN["add"])
        return wrap(ir.where(mh, v, x._h))
    if x.dim() == 0:
        xv = wrap(reshape(x._h, [1]))
        out = index_put(xv, [_zero_dim_index(indices[0], dev)], values, accumulate)
        return wrap(reshape(out._h, []))
    xp, flat, bshape, rest, perm, at = _plan(x, indices)
    rows = _values_as_rows(values, dev, dt, bshape, rest, at)
    if accumulate:
        out = ir.index_add(xp, flat, rows, dim=0)
    else:
        # The flat index is non-negative now; SCATTER wants idx of src's shape.
        n = flat.shape[0]
        fi = reshape(flat, [n] + [1] * len(rest))
        fi = broadcast(fi, [n] + rest) if rest else fi
        out = ir.scatter(xp, fi, rows, dim=0, reduce=0)
    out = reshape(out, [x.shape[d] for d in perm])
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return wrap(_permute_h(out, inv))


# ------------------------------------------------------- masked scatter
def _masked_positions(mh, dev):
    """For a flat BOOL mask: (mask as I64, position among the set elements)."""
    mi = ir.convert(mh, dtype=TT_I64)
    pos = ir.binary(ir.scan(mi, op=0, dim=0, dtype=TT_I64), scalar(dev, TT_I64, 1), op=BIN["sub"])
    return mi, pos


@lowers(aten.masked_scatter.default)
def masked_scatter(x, mask, source):
    dev, dt = x._h.device, x._h.dtype
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with "
                           f"dtype {mask.dtype}")
    shape = _bshape([list(x.shape), list(mask.shape)])
    n = _numel(shape)
    xh = broadcast(x._h, shape)
    if n == 0 or source.numel() == 0:
        return wrap(xh)
    mh = reshape(broadcast(index_handle(mask, dev), shape), [n])
    _, pos = _masked_positions(mh, dev)
    pos = ir.binary(ir.binary(pos, scalar(dev, TT_I64, 0), op=BIN["max"]), scalar(dev, TT_I64, source.numel() - 1), op=BIN["min"])
    src = reshape(handle(source, dev, dt), [source.numel()])
    picked = ir.index_select(src, pos, dim=0)
    out = ir.where(mh, picked, reshape(xh, [n]))
    return wrap(reshape(out, shape))


@lowers(aten.masked_scatter_backward.default)
def masked_scatter_backward(grad, mask, sizes):
    """Gradient of source: grad at the set positions of mask, in order,
    padded with zeros to source's size."""
    dev, dt = grad._h.device, grad._h.dtype
    ns = _numel(sizes)
    shape = list(grad.shape)
    n = _numel(shape)
    mh = reshape(broadcast(index_handle(mask, dev), shape), [n])
    _, pos = _masked_positions(mh, dev)
    dump = scalar(dev, TT_I64, ns)
    pos = ir.where(mh, pos, dump)
    pos = ir.binary(pos, dump, op=BIN["min"])
    base = broadcast(scalar(dev, dt, 0), [ns + 1])
    out = ir.scatter(base, pos, reshape(grad._h, [n]), dim=0, reduce=0)
    out = ir.slice(out, start=(0,), limit=(ns,), step=(1,))
    return wrap(reshape(out, list(sizes)))


# -------------------------------------------------------- scatter_reduce
_SR = {"sum": SR_SUM, "prod": SR_PROD, "mean": SR_MEAN, "amax": SR_AMAX, "amin": SR_AMIN}


def _vec(h):
    return reshape(h, [1]) if len(h.shape) == 0 else h


@lowers(aten.scatter_reduce.two)
def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    if reduce not in _SR:
        raise RuntimeError("reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    dev, dt = x._h.device, x._h.dtype
    d = norm_dim(dim, x.dim())
    if index.numel() == 0:
        return wrap(x._h)
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("scatter_reduce(): Expected dtype int64 for index")
    ih = _vec(index_handle(index, dev))
    sh = _vec(handle(src, dev, dt))
    out = ir.scatter_reduce(_vec(x._h), ih, sh, dim=d, reduce=_SR[reduce], include_self=int(bool(include_self)))
    return wrap(reshape(out, list(x.shape)))


@lowers(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_legacy_reduce(x, dim, index, src, *, reduce):
    """scatter(..., reduce='add'|'multiply'): include_self reduction."""
    name = {"add": "sum", "multiply": "prod"}.get(reduce)
    if name is None:
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    dev, dt = x._h.device, x._h.dtype
    if not isinstance(src, XlaTensor):
        src = wrap(broadcast(handle(src, dev, dt), list(index.shape)))
    return scatter_reduce(x, dim, index, src, name, True)


@lowers(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError("index_reduce(): Expected reduce to be one of prod, mean, amax or "
                           f"amin but got {reduce}.")
    dev, dt = x._h.device, x._h.dtype
    d = norm_dim(dim, x.dim())
    if index.numel() == 0:
        return wrap(x._h)
    sh = _vec(handle(source, dev, dt))
    r = len(sh.shape)
    ih = reshape(index_handle(index, dev), [index.numel()])
    if ih.dtype != TT_I64:
        ih = ir.convert(ih, dtype=TT_I64)
    # Negative indices wrap, as index_reduce_ allows.
    neg = ir.binary(ih, scalar(dev, TT_I64, 0), op=BIN["lt"])
    size = x.shape[d] if x.dim() else 1
    ih = ir.where(neg, ir.binary(ih, scalar(dev, TT_I64, size), op=BIN["add"]), ih)
    ishape = [1] * r
    ishape[d] = index.numel()
    ih = broadcast(reshape(ih, ishape), list(sh.shape))
    out = ir.scatter_reduce(_vec(x._h), ih, sh, dim=d, reduce=_SR[reduce], include_self=int(bool(include_self)))
    return wrap(reshape(out, list(x.shape)))


# ------------------------------------------------------------ put / take
@lowers(aten.put.default)
def put(x, index, source, accumulate=False):
    dev, dt = x._h.device, x._h.dtype
    n = x.numel()
    flat_x = wrap(reshape(x._h, [n]))
    ih = reshape(index_handle(index, dev), [index.numel()])
    src = wrap(reshape(handle(source, dev, dt), [source.numel()]))
    out = index_put(flat_x, [wrap(ih)], src, accumulate)
    return wrap(reshape(out._h, list(x.shape)))


@lowers(aten.take.default)
def take(x, index):
    n = x.numel()
    flat_x = wrap(reshape(x._h, [n]))
    ih = index_handle(index, x._h.device)
    out = index_tensor(flat_x, [wrap(reshape(ih, [index.numel()]))])
    return wrap(reshape(out._h, list(index.shape)))


# ------------------------------------------------------- strided views
def _strided_index(dev, size, stride, offset):
    """Flat I64 indices offset + sum_d i_d * stride_d over size."""
    r = len(size)
    acc = broadcast(scalar(dev, TT_I64, offset), list(size))
    for d in range(r):
        if size[d] == 0:
            continue
        shape = [1] * r
        shape[d] = size[d]
        term = ir.binary(reshape(iota(dev, size[d]), shape), scalar(dev, TT_I64, stride[d]), op=BIN["mul"])
        acc = ir.binary(acc, term, op=BIN["add"])
    return reshape(acc, [_numel(size)])


@lowers(aten.as_strided.default, aten.as_strided_copy.default)
def as_strided(x, size, stride, storage_offset=None):
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    # The storage as_strided addresses: the tensor a slice (or an earlier
    # as_strided) was cut from, as PyTorch/XLA does; an offset left out is
    # the view's own (storage_views.py).
    rec = storage_views.layout(x)
    if rec is None:
        base, off = x, int(storage_offset or 0)
    else:
        base, view_off, _ = rec
        off = view_off if storage_offset is None else int(storage_offset)
    dev = base._h.device
    n = base.numel()
    if _numel(size) == 0:
        return wrap(broadcast(scalar(dev, x._h.dtype, 0), size))
    need = off + sum((s - 1) * st for s, st in zip(size, stride)) + 1
    if need > n:
        raise RuntimeError(
            f"setStorage: sizes {size}, strides {stride}, storage offset {off}, and itemsize "
            f"{x.element_size()} requiring a storage size of {need * x.element_size()} are out "
            f"of bounds for storage of size {n * x.element_size()}")
    flat = reshape(base._h, [n])
    out = wrap(reshape(ir.index_select(flat, _strided_index(dev, size, stride, off), dim=0), size))
    storage_views.note(out, base, off, stride)
    return out


@lowers(aten.as_strided_scatter.default)
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    dev, dt = x._h.device, x._h.dtype
    n = x.numel()
    m = _numel(size)
    if m == 0:
        return wrap(x._h)
    rec = storage_views.layout(x)
    if rec is not None:
        # x is a slice of a larger storage (functionalization writing an
        # as_strided view of it back): the written elements, as positions
        # in x.
        idx = bridge.upload(_positions_in_view(rec, x.shape, size, stride, storage_offset), dev)
    else:
        idx = _strided_index(dev, size, stride, int(storage_offset or 0))
    flat = reshape(x._h, [n])
    out = ir.scatter(flat, idx, reshape(handle(src, dev, dt), [m]), dim=0, reduce=0)
    return wrap(reshape(out, list(x.shape)))


def _positions_in_view(rec, view_shape, size, stride, storage_offset):
    """Flat positions in a view (layout rec in its base) of the base elements
    an as_strided(size, stride, offset) addresses; NotImplementedError when
    one lies outside the view (the write could not reach the base)."""
    _, voff, vstrides = rec
    off = voff if storage_offset is None else int(storage_offset)

    def addresses(shape, strides, start):
        a = torch.full([int(d) for d in shape], start, dtype=torch.int64)
        for d, (n, st) in enumerate(zip(shape, strides)):
            a = a + (torch.arange(int(n)) * st).view([-1 if i == d else 1
                                                       for i in range(len(shape))])
        return a.reshape(-1)
    view_addr = addresses(view_shape, vstrides, voff)
    want = addresses(size, stride, off)
    order = torch.argsort(view_addr)
    pos = torch.searchsorted(view_addr[order], want).clamp(max=view_addr.numel() - 1)
    if not torch.equal(view_addr[order][pos], want):
        raise NotImplementedError(
            "as_strided_scatter on xla: the as_strided view reaches storage outside the "
            "view it was taken from, which an xla tensor does not share")
    return order[pos]


def _diag_plan(x, offset, dim1, dim2):
    r = x.dim()
    d1, d2 = norm_dim(dim1, r), norm_dim(dim2, r)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    others = [d for d in range(r) if d not in (d1, d2)]
    perm = others + [d1, d2]
    n, m = x.shape[d1], x.shape[d2]
    if offset >= 0:
        length = max(0, min(n, m - offset))
        start = offset
    else:
        length = max(0, min(n + offset, m))
        start = -offset * m
    lead = [x.shape[d] for d in others]
    return perm, lead, n, m, length, start


def _diag_slice_attrs(lead, nm, length, start, m):
    """The slice fields (ir.slice / ir.slice_scatter keywords) that pick the
    diagonal out of [lead..., n * m]."""
    r = len(lead) + 1
    return dict(start=[0] * (r - 1) + [start if length else 0],
                limit=lead + [start + (length - 1) * (m + 1) + 1 if length else 0],
                step=[1] * (r - 1) + [m + 1])


@lowers(aten.diagonal.default, aten.diagonal_copy.default)
def diagonal(x, offset=0, dim1=0, dim2=1):
    perm, lead, n, m, length, start = _diag_plan(x, offset, dim1, dim2)
    h = reshape(_permute_h(x._h, perm), lead + [n * m])
    out = ir.slice(h, **_diag_slice_attrs(lead, n * m, length, start, m))
    return wrap(reshape(out, lead + [length]))


@lowers(aten.diagonal_scatter.default)
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    perm, lead, n, m, length, start = _diag_plan(x, offset, dim1, dim2)
    dev, dt = x._h.device, x._h.dtype
    h = reshape(_permute_h(x._h, perm), lead + [n * m])
    sh = handle(src, dev, dt)
    if list(sh.shape) != lead + [length]:
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = "
                           f"{list(sh.shape)}, slice size = {lead + [length]}")
    if length:
        h = ir.slice_scatter(h, sh, **_diag_slice_attrs(lead, n * m, length, start, m))
    h = reshape(h, lead + [n, m])
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return wrap(_permute_h(h, inv))


@lowers(aten.unfold.default, aten.unfold_copy.default)
def unfold(x, dimension, size, step):
    """Tensor.unfold: windows of `size` every `step` along dimension, as a
    new last dim."""
    dev = x._h.device
    if x.dim() == 0:
        return wrap(reshape(x._h, [1]))
    d = norm_dim(dimension, x.dim())
    n = x.shape[d]
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    nw = (n - size) // step + 1
    win = ir.binary(reshape(ir.binary(iota(dev, nw), scalar(dev, TT_I64, step), op=BIN["mul"]), [nw, 1]), reshape(iota(dev, size), [1, size]), op=BIN["add"])
    out = ir.index_select(x._h, reshape(win, [nw * size]), dim=d)
    shape = list(x.shape)
    shape[d:d + 1] = [nw, size]
    out = reshape(out, shape)
    r = len(shape)
    perm = [i for i in range(r) if i != d + 1] + [d + 1]
    return wrap(_permute_h(out, perm))


@lowers(aten.unfold_backward.default)
def unfold_backward(grad, input_sizes, dim, size, step):
    dev, dt = grad._h.device, grad._h.dtype
    input_sizes = [int(s) for s in input_sizes]
    if len(input_sizes) == 0:
        return wrap(reshape(grad._h, []))
    d = norm_dim(dim, len(input_sizes))
    n = input_sizes[d]
    nw = (n - size) // step + 1
    # grad: [..., nw (at d), ..., size] -> [..., nw, size, ...] -> flatten the pair.
    r = grad.dim()
    perm = list(range(d + 1)) + [r - 1] + list(range(d + 1, r - 1))
    g = _permute_h(grad._h, perm)
    shape = list(g.shape)
    shape[d:d + 2] = [nw * size]
    g = reshape(g, shape)
    win = ir.binary(reshape(ir.binary(iota(dev, nw), scalar(dev, TT_I64, step), op=BIN["mul"]), [nw, 1]), reshape(iota(dev, size), [1, size]), op=BIN["add"])
    zeros = broadcast(scalar(dev, dt, 0), input_sizes)
    return wrap(ir.index_add(zeros, reshape(win, [nw * size]), g, dim=d))


_ = (tt, convert)
