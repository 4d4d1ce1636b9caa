"""Shape and data-movement lowerings. Functionalization hands us the
*_copy forms of views; since engine values are immutable, aliases (detach,
clone, alias) share one handle."""
import math

import torch

from torchtpu import _C, bridge, ir
from torchtpu.lowering import storage_views
from torchtpu.lowering.core import (
    BIN, BINARY, BROADCAST, CONCAT, CONVERT, FLIP, GATHER, INDEX_ADD, INDEX_SELECT, PAD, RESHAPE,
    SCATTER, SLICE, SLICE_SCATTER, TRANSPOSE, TT_I64, WHERE, XlaTensor, aten, broadcast, handle,
    UN, UNARY, iota, lowers, mask_of, norm_dim, norm_dims, reshape, scalar, tt, wrap)


def _infer_view_shape(shape, numel):
    shape = [int(s) for s in shape]
    if -1 not in shape and min(shape, default=0) >= 0 and math.prod(shape) == numel:
        return shape  # the common case: every size given
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise RuntimeError(f"invalid shape dimension {s}")
            known *= s
    if neg:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape[neg[0]] = numel // known
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


# ------------------------------------------------------------- identities
@lowers(aten.alias.default, aten.alias_copy.default, aten.detach.default,
        aten.detach_copy.default, aten.clone.default,
        aten.lift_fresh_copy.default, aten.contiguous.default, aten.lift.default,
        aten.resolve_conj.default, aten.resolve_neg.default)
def identity(x, *args, **kwargs):
    return wrap(x._h)


_FUNCTIONALIZE = torch._C.DispatchKey.Functionalize


@lowers(aten.lift_fresh.default)
def lift_fresh(x):
    # torch.tensor(..., device='xla') builds its result below
    # functionalization (bridge.want_inner) and lifts it here: the fresh
    # inner tensor itself becomes the user's tensor, as PyTorch/XLA's
    # lift_fresh wraps its one XLATensor (CreateXlaTensor counts 1). Under a
    # functionalization mode (torch.func.functionalize) its own lift_fresh
    # kernel wraps what this returns.
    if torch._C._dispatch_tls_local_include_set().has(_FUNCTIONALIZE):
        return wrap(x._h)
    return torch._to_functional_tensor(x)


@lowers(aten._propagate_xla_data.default)
def propagate_xla_data(a, b):
    # Functionalization calls this for each in-place op: b is a's update.
    # The engine counts the data such updates replace at a step's sync
    # (InputOutputAliasCount, PyTorch/XLA's buffer donors).
    _C.propagate_alias(a._h, b._h)
    return None


# ------------------------------------------------------------------ views
@lowers(aten.view.default, aten.view_copy.default, aten._unsafe_view.default,
        aten.reshape.default, aten._reshape_copy.default)
def view(x, shape):
    h = x._h
    return wrap(reshape(h, _infer_view_shape(shape, math.prod(h.shape))))


@lowers(aten.view.dtype, aten.view_copy.dtype)
def view_dtype(x, dtype):
    if dtype == x.dtype:
        return wrap(x._h)
    # Bit reinterpretation has no IR op yet: the counted CPU fallback.
    from torchtpu.lowering.fallback import fallback
    return fallback(aten.view.dtype, (x, dtype), {})


@lowers(aten._unsafe_view.default)
def unsafe_view(x, shape):
    return view(x, shape)


@lowers(aten.expand.default, aten.expand_copy.default)
def expand(x, size, implicit=False):
    size = [int(s) for s in size]
    r = x.dim()
    if len(size) < r:
        raise RuntimeError(
            f"expand({x.dtype}{{{list(x.shape)}}}, size={size}): the number of sizes provided "
            f"({len(size)}) must be greater or equal to the number of dimensions in the tensor "
            f"({r})")
    out = []
    lead = len(size) - r
    for i, s in enumerate(size):
        if s == -1:
            if i < lead:
                raise RuntimeError("The expanded size of the tensor (-1) isn't allowed in a "
                                   "leading, non-existing dimension 0")
            s = x.shape[i - lead]
        out.append(s)
    for i in range(r):
        if x.shape[i] != 1 and x.shape[i] != out[lead + i]:
            raise RuntimeError(
                f"The expanded size of the tensor ({out[lead + i]}) must match the existing size "
                f"({x.shape[i]}) at non-singleton dimension {lead + i}.  Target sizes: {size}.  "
                f"Tensor sizes: {list(x.shape)}")
    return wrap(broadcast(x._h, out))


@lowers(aten.permute.default, aten.permute_copy.default)
def permute(x, dims):
    h = x._h
    r = len(h.shape)
    dims = norm_dims(list(dims), r)
    if len(dims) != r:
        raise RuntimeError(
            "permute(sparse_coo): number of dimensions in the tensor input does not match the "
            f"length of the desired ordering of dimensions i.e. input.dim() = {r} is not "
            f"equal to len(dims) = {len(dims)}")
    if dims == list(range(r)):
        return wrap(h)
    return wrap(ir.transpose(h, perm=dims))


@lowers(aten.transpose.int, aten.transpose_copy.int)
def transpose(x, d0, d1):
    r = len(x._h.shape)
    if r == 0:
        return wrap(x._h)
    d0, d1 = norm_dim(d0, r), norm_dim(d1, r)
    perm = list(range(r))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return permute(x, perm)


@lowers(aten.t.default, aten.t_copy.default)
def t(x):
    h = x._h
    r = len(h.shape)
    if r > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {r}D")
    return wrap(ir.transpose(h, perm=(1, 0))) if r == 2 else wrap(h)


@lowers(aten.numpy_T.default)
def numpy_t(x):
    return permute(x, list(range(x.dim()))[::-1])


@lowers(aten.squeeze.default, aten.squeeze_copy.default)
def squeeze(x):
    return wrap(reshape(x._h, [s for s in x.shape if s != 1]))


@lowers(aten.squeeze.dim, aten.squeeze_copy.dim, aten.squeeze.dims, aten.squeeze_copy.dims)
def squeeze_dims(x, dims):
    dims = norm_dims(dims, x.dim()) if x.dim() else []
    shape = [s for i, s in enumerate(x.shape) if not (i in dims and s == 1)]
    return wrap(reshape(x._h, shape))


@lowers(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def unsqueeze(x, dim):
    r = x.dim() + 1
    if dim < -r or dim >= r:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    dim %= r
    shape = list(x.shape)
    shape.insert(dim, 1)
    return wrap(reshape(x._h, shape))


@lowers(aten.flatten.using_ints)
def flatten(x, start_dim=0, end_dim=-1):
    if x.dim() == 0:
        return wrap(reshape(x._h, [1]))
    s, e = norm_dim(start_dim, x.dim()), norm_dim(end_dim, x.dim())
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = list(x.shape)
    n = 1
    for d in shape[s:e + 1]:
        n *= d
    return wrap(reshape(x._h, shape[:s] + [n] + shape[e + 1:]))


def _slice_h(h, dim, start, end, step):
    r = len(h.shape)
    size = h.shape[dim]
    starts = [0] * r
    limits = list(h.shape)
    steps = [1] * r
    starts[dim], limits[dim], steps[dim] = start, end, step
    if start == 0 and end == size and step == 1:
        return h
    return ir.slice(h, start=starts, limit=limits, step=steps)


def _norm_slice(size, start, end, step):
    if step is None:
        step = 1
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end, step


@lowers(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    dim = norm_dim(dim, x.dim())
    s, e, st = _norm_slice(x.shape[dim], start, end, step)
    out = wrap(_slice_h(x._h, dim, s, e, st))
    storage_views.note_slice(out, x, dim, s, st)  # for a later as_strided of it
    return out


def _select_index(x, dim, index):
    size = x.shape[dim]
    if index < -size or index >= size:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {list(x.shape)} at "
            f"dimension {dim}")
    return index % size


@lowers(aten.select.int, aten.select_copy.int)
def select(x, dim, index):
    if x.dim() == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    dim = norm_dim(dim, x.dim())
    index = _select_index(x, dim, index)
    h = _slice_h(x._h, dim, index, index + 1, 1)
    shape = list(x.shape)
    del shape[dim]
    return wrap(reshape(h, shape))


@lowers(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    dim = norm_dim(dim, x.dim())
    s, e, st = _norm_slice(x.shape[dim], start, end, step)
    r = x.dim()
    starts, limits, steps = [0] * r, list(x.shape), [1] * r
    starts[dim], limits[dim], steps[dim] = s, e, st
    src_h = handle(src, x._h.device, x._h.dtype)
    return wrap(ir.slice_scatter(x._h, src_h, start=starts, limit=limits, step=steps))


# The backward of select and of a unit-step slice: the gradient placed in
# zeros. PyTorch's decomposition writes zeros and then scatters (two full
# passes, the zero a runtime scalar); a pad with its constant zero writes
# the output once. The qkv projection of nn.MultiheadAttention takes three
# selects of one stacked tensor per layer.
@lowers(aten.select_backward.default)
def select_backward(grad, input_sizes, dim, index):
    sizes = [int(v) for v in input_sizes]
    dim = norm_dim(dim, len(sizes))
    size = sizes[dim]
    if index < -size or index >= size:
        raise IndexError(f"select_backward(): index {index} out of range for size {size}")
    index %= size
    shape = list(sizes)
    shape[dim] = 1
    h = reshape(grad._h, shape)
    lo, hi = [0] * len(sizes), [0] * len(sizes)
    lo[dim], hi[dim] = index, size - index - 1
    return wrap(ir.pad(h, lo=lo, hi=hi, value=0.0))


@lowers(aten.slice_backward.default)
def slice_backward(grad, input_sizes, dim, start, end, step):
    sizes = [int(v) for v in input_sizes]
    dim = norm_dim(dim, len(sizes))
    s, e, st = _norm_slice(sizes[dim], start, end, step)
    if st != 1:
        from torch._decomp import decomposition_table
        return decomposition_table[aten.slice_backward.default](
            grad, input_sizes, dim, start, end, step)
    lo, hi = [0] * len(sizes), [0] * len(sizes)
    lo[dim], hi[dim] = s, sizes[dim] - s - grad.shape[dim]
    return wrap(ir.pad(grad._h, lo=lo, hi=hi, value=0.0))


@lowers(aten.select_scatter.default)
def select_scatter(x, src, dim, index):
    dim = norm_dim(dim, x.dim())
    index = _select_index(x, dim, index)
    shape = list(x.shape)
    shape[dim] = 1
    src_h = reshape(handle(src, x._h.device, x._h.dtype), shape)
    r = x.dim()
    starts, limits, steps = [0] * r, list(x.shape), [1] * r
    starts[dim], limits[dim] = index, index + 1
    return wrap(ir.slice_scatter(x._h, src_h, start=starts, limit=limits, step=steps))


@lowers(aten.split.Tensor, aten.split_copy.Tensor)
def split(x, split_size, dim=0):
    dim = norm_dim(dim, x.dim())
    size = x.shape[dim]
    if split_size <= 0 and size > 0:
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={split_size}")
    sizes = []
    start = 0
    while start < size or (size == 0 and not sizes):
        sizes.append(min(split_size, size - start))
        start += split_size
        if split_size == 0:
            break
    return split_with_sizes(x, sizes, dim)


@lowers(aten.split_with_sizes.default, aten.split_with_sizes_copy.default)
def split_with_sizes(x, split_sizes, dim=0):
    dim = norm_dim(dim, x.dim())
    if sum(split_sizes) != x.shape[dim]:
        raise RuntimeError(
            f"split_with_sizes expects split_sizes to sum exactly to {x.shape[dim]} (input "
            f"tensor's size at dimension {dim}), but got split_sizes={list(split_sizes)}")
    out, start = [], 0
    for s in split_sizes:
        out.append(wrap(_slice_h(x._h, dim, start, start + s, 1)))
        start += s
    return out


@lowers(aten.unbind.int, aten.unbind_copy.int)
def unbind(x, dim=0):
    dim = norm_dim(dim, x.dim())
    return [select(x, dim, i) for i in range(x.shape[dim])]


@lowers(aten.cat.default)
def cat(tensors, dim=0):
    from torchtpu.lowering.core import result_type
    # Legacy rule: 1-D empty tensors are skipped.
    ts = [t for t in tensors if not (t.dim() == 1 and t.shape[0] == 0)]
    if not ts:
        return wrap(tensors[0]._h)
    rt = result_type(*ts)
    dev = None
    for t in ts:
        if isinstance(t, XlaTensor):
            dev = t._h.device
            break
    dim = norm_dim(dim, ts[0].dim())
    hs = [handle(t, dev, tt(rt)) for t in ts]
    if len(hs) == 1:
        return wrap(hs[0])
    return wrap(ir.concat(*hs, dim=dim))


@lowers(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    r = x.dim()
    if len(pad) % 2 or len(pad) // 2 > r:
        raise RuntimeError(
            f"Length of pad must be even but instead it equals {len(pad)}" if len(pad) % 2 else
            f"Length of pad should be no more than twice the number of dimensions of the input. "
            f"Pad length is {len(pad)} while the input has {r} dimensions.")
    lo, hi = [0] * r, [0] * r
    for i in range(len(pad) // 2):
        d = r - 1 - i
        lo[d], hi[d] = int(pad[2 * i]), int(pad[2 * i + 1])
    if not any(lo) and not any(hi):
        return wrap(x._h)
    return wrap(ir.pad(x._h, lo=lo, hi=hi, value=float(value)))


def _triangle(upper):
    name = "triu" if upper else "tril"

    def fn(x, diagonal=0):
        if x.dim() < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        dev = x._h.device
        h, w = x.shape[-2], x.shape[-1]
        diff = ir.binary(reshape(iota(dev, w), [1, w]), reshape(iota(dev, h), [h, 1]), op=BIN["sub"])
        keep = ir.binary(diff, scalar(dev, TT_I64, diagonal), op=BIN["ge" if upper else "le"])
        return wrap(ir.where(keep, x._h, scalar(dev, x._h.dtype, 0)))
    return fn


lowers(aten.tril.default)(_triangle(False))
lowers(aten.triu.default)(_triangle(True))


class FlipDimError(IndexError, RuntimeError):
    """flip's out-of-range dim: PyTorch (CPU) raises IndexError, PyTorch/XLA
    a RuntimeError (its canonical-dimension check); this is both, so code
    written against either catches it."""


@lowers(aten.flip.default)
def flip(x, dims):
    try:
        dims = norm_dims(dims, x.dim())
    except IndexError as e:
        raise FlipDimError(str(e)) from None
    if not dims:
        return wrap(x._h)
    return wrap(ir.flip(x._h, dims_mask=mask_of(dims)))


def _index_h(idx, dev):
    if isinstance(idx, XlaTensor):
        h = idx._h
    else:
        h = bridge.upload(idx, dev)
    if h.dtype not in (TT_I64, 7):  # I64 or I32
        raise IndexError(f"tensors used as indices must be long, int, byte or bool tensors")
    return h


@lowers(aten.index_select.default)
def index_select(x, dim, index):
    dim = norm_dim(dim, x.dim())
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            f"index_select(): Expected dtype int32/int64 for index but got: {index.dtype}")
    ih = reshape(_index_h(index, x._h.device), [index.numel()])
    h = x._h if x.dim() else reshape(x._h, [1])
    out = ir.index_select(h, ih, dim=dim)
    if x.dim() == 0:
        out = reshape(out, [])
    return wrap(out)


@lowers(aten.index_add.default)
def index_add(x, dim, index, source, alpha=1):
    dim = norm_dim(dim, x.dim())
    src = handle(source, x._h.device, x._h.dtype)
    if alpha != 1:
        from torchtpu.lowering.elementwise import mul
        src = mul(wrap(src), alpha)._h
    return wrap(ir.index_add(x._h, _index_h(index, x._h.device), src, dim=dim))


def _check_index_dtype(name, index):
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")


def _as_vector(h):
    """A 0-dim operand of gather/scatter as a 1-element vector (PyTorch treats
    a 0-dim self and index as 1-D)."""
    return reshape(h, [1]) if len(h.shape) == 0 else h


@lowers(aten.gather.default)
def gather(x, dim, index, sparse_grad=False):
    dim = norm_dim(dim, x.dim())
    if index.numel() == 0:  # PyTorch checks neither dtype nor rank then
        return wrap(broadcast(scalar(x._h.device, x._h.dtype, 0), index.shape))
    _check_index_dtype("gather", index)
    ih = _as_vector(_index_h(index, x._h.device))
    out = ir.gather(_as_vector(x._h), ih, dim=dim)
    return wrap(reshape(out, index.shape))


@lowers(aten.scatter.src, aten.scatter.value)
def scatter(x, dim, index, src):
    dim = norm_dim(dim, x.dim())
    if index.numel() == 0:
        return wrap(x._h)
    _check_index_dtype("scatter", index)
    dev = x._h.device
    if isinstance(src, XlaTensor):
        s = _as_vector(handle(src, dev, x._h.dtype))
    else:
        s = broadcast(handle(src, dev, x._h.dtype), _as_vector(_index_h(index, dev)).shape)
    ih = _as_vector(_index_h(index, dev))
    return wrap(reshape(ir.scatter(_as_vector(x._h), ih, s, dim=dim, reduce=0), x.shape))


@lowers(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    dim = norm_dim(dim, x.dim())
    if index.numel() == 0:
        return wrap(x._h)
    _check_index_dtype("scatter", index)
    dev = x._h.device
    ih = _as_vector(_index_h(index, dev))
    s = _as_vector(handle(src, dev, x._h.dtype))
    return wrap(reshape(ir.scatter(_as_vector(x._h), ih, s, dim=dim, reduce=1), x.shape))


# -------------------------------------------------------- copies, devices
def _convert_real(h, dtype):
    """h as torch dtype `dtype` (real dtypes; complex_ops passes its own)."""
    t = tt(dtype)
    return h if h.dtype == t else ir.convert(h, dtype=t)


def to_copy_with(convert):
    """The _to_copy lowering with `convert(handle, torch_dtype)` for dtype
    changes (complex_ops reuses it with complex rules)."""
    def to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
                memory_format=None):
        h = x._h
        if device is not None:
            device = torch.device(device)
            if device.type == "cpu":
                out = bridge.download(h)
                return out.to(dtype) if dtype is not None else out
            if device.type != "xla":
                raise RuntimeError(f"cannot copy an xla tensor to {device}")
            target = bridge.device_index(device)
            if target != h.device:
                h = _C.to_device(h, target)
        if dtype is not None:
            h = convert(h, dtype)
        return wrap(h)
    return to_copy


def copy_with(convert):
    """The copy lowering (dst's shape and dtype, src's values) with
    `convert(handle, torch_dtype)`."""
    def copy(dst, src, non_blocking=False):
        dev = dst._h.device
        if isinstance(src, XlaTensor):
            h = src._h
            if h.device != dev:
                h = _C.to_device(h, dev)
        else:
            # A host tensor copied to the device (`.to('xla')`): in SPMD
            # mode it stays on the host until used (bridge.upload).
            h = bridge.upload(src, dev, defer=True)
        return wrap(broadcast(convert(h, dst.dtype), dst.shape))
    return copy


to_copy = lowers(aten._to_copy.default)(to_copy_with(_convert_real))
copy = lowers(aten.copy.default)(copy_with(_convert_real))


@lowers(aten.copy_.default)
def copy_inplace(dst, src, non_blocking=False):
    """In-place copy into an inner tensor. Functionalization never emits it;
    it comes from decompositions of ops whose schema hides a mutation
    (native_batch_norm writes its running stats this way). The inner tensor
    takes the new value, as PyTorch/XLA updates its tensor in place, so the
    user's wrapper sees it. A plain (CPU) dst arrives here when C++ code
    copies an xla tensor into a host tensor (c10d's parameter checks in
    DistributedDataParallel do): it takes src's value on the host."""
    if not isinstance(dst, XlaTensor):
        dst.copy_(bridge.download(src._h))
        return dst
    dst._h = copy(dst, src)._h
    return dst


@lowers(aten._copy_from.default)
def copy_from(src, dst, non_blocking=False):
    # Reached only for copies into plain (non-functional) tensors.
    if isinstance(dst, XlaTensor):
        raise RuntimeError("in-place copy into an unwrapped xla tensor is not supported")
    dst.copy_(bridge.download(src._h))
    return dst


@lowers(aten._local_scalar_dense.default)
def local_scalar_dense(x):
    return bridge.download(x._h).item()


@lowers(aten.fill.Scalar, aten.fill.Tensor)
def fill(x, value):
    return wrap(broadcast(handle(value, x._h.device, x._h.dtype), x.shape))


@lowers(aten.zero.default)
def zero(x):
    return wrap(broadcast(scalar(x._h.device, x._h.dtype, 0), x.shape))


def _fill_real(dtype, value, index, shape):
    """A handle of `shape` filled with value, as torch dtype `dtype`."""
    return broadcast(scalar(index, tt(dtype), value), shape)


def like_factory(value, fill=_fill_real):
    """The *_like lowering filling with value (None: the first argument),
    through fill(dtype, value, device index, shape) (complex_ops passes its
    own)."""
    def fn(x, *args, dtype=None, layout=None, device=None, pin_memory=None,
           memory_format=None):
        v = args[0] if value is None else value
        dt = dtype if dtype is not None else x.dtype
        index = x._h.device if device is None or torch.device(device).type == "xla" else None
        if index is None:
            return torch.full(x.shape, v, dtype=dt, device=device)
        if device is not None and torch.device(device).index is not None:
            index = bridge.device_index(device)
        return wrap(fill(dt, v, index, x.shape))
    return fn


LIKE_VALUES = {aten.zeros_like.default: 0, aten.ones_like.default: 1,
               aten.empty_like.default: 0, aten.full_like.default: None}
for _op, _v in LIKE_VALUES.items():
    lowers(_op)(like_factory(_v))


def new_factory(value, has_stride=False, fill=_fill_real):
    """The new_* lowering (new_empty_strided when has_stride), filling
    through fill(dtype, value, device index, shape)."""
    def fn(x, size, *args, dtype=None, layout=None, device=None, pin_memory=None):
        rest = list(args)
        if has_stride:
            rest = rest[1:]
        v = rest[0] if value is None else value
        dt = dtype if dtype is not None else x.dtype
        if device is not None and torch.device(device).type != "xla":
            return torch.full(list(size), v, dtype=dt, device=device)
        index = x._h.device if device is None or torch.device(device).index is None \
            else bridge.device_index(device)
        return wrap(fill(dt, v, index, [int(s_) for s_ in size]))
    return fn


NEW_FACTORIES = {aten.new_empty.default: (0, False), aten.new_zeros.default: (0, False),
                 aten.new_ones.default: (1, False), aten.new_full.default: (None, False),
                 aten.new_empty_strided.default: (0, True)}
for _op, (_v, _strided) in NEW_FACTORIES.items():
    lowers(_op)(new_factory(_v, _strided))

_ = (RESHAPE, SCATTER)


def _pad_backward(reflect):
    """Backward of replication/reflection padding: along each padded dim
    (last first), the gradient of every output position is summed into its
    source position (clamped, or mirrored) with index_add."""
    def fn(grad, x, padding):
        dev = grad._h.device
        g = grad._h
        for i in range(len(padding) // 2):
            d = x.dim() - 1 - i
            lo, hi = int(padding[2 * i]), int(padding[2 * i + 1])
            size = x.shape[d]
            pos = ir.binary(iota(dev, size + lo + hi), scalar(dev, TT_I64, lo), op=BIN["sub"])
            if reflect:   # p -> |p|, then (size-1) - |(size-1) - p|
                last = scalar(dev, TT_I64, size - 1)
                pos = ir.unary(pos, op=UN["abs"], alpha=0.0, beta=0.0)
                pos = ir.binary(last, pos, op=BIN["sub"])
                pos = ir.unary(pos, op=UN["abs"], alpha=0.0, beta=0.0)
                pos = ir.binary(last, pos, op=BIN["sub"])
            else:
                pos = ir.binary(pos, scalar(dev, TT_I64, 0), op=BIN["max"])
                pos = ir.binary(pos, scalar(dev, TT_I64, size - 1), op=BIN["min"])
            shape = list(g.shape)
            shape[d] = size
            g = ir.index_add(broadcast(scalar(dev, g.dtype, 0), shape), pos, g, dim=d)
        return wrap(g)
    return fn


for _n in (1, 2, 3):
    lowers(getattr(aten, f"replication_pad{_n}d_backward").default)(_pad_backward(False))
    lowers(getattr(aten, f"reflection_pad{_n}d_backward").default)(_pad_backward(True))



@lowers(aten.resize.default)
def resize(x, size, memory_format=None):
    """Functional resize: the first elements keep their values (flat
    order); new elements, undefined in PyTorch, are zeros here."""
    size = [int(s) for s in size]
    n = 1
    for s_ in size:
        n *= s_
    m = x.numel()
    flat = reshape(x._h, [m])
    if n < m:
        flat = ir.slice(flat, start=(0,), limit=(n,), step=(1,))
    elif n > m:
        flat = ir.pad(flat, lo=(0,), hi=(n - m,), value=0.0)
    return wrap(reshape(flat, size))
