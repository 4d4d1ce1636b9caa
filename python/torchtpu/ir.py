"""Typed builders for the engine's IR ops: one function per op, its
operands positional and its attributes keyword-only, named as in the op
table's schema (include/torchtpu/op_attrs.h, src/ir/op_table.c).

    ir.slice(h, start=[0, 1], limit=[4, 3], step=[1, 1])
    ir.layer_norm(x, w, b, axis=1, has_weight=1, has_bias=1, form=0, eps=1e-5)

Each builder packs its fields in the schema's storage order and records the
op with one call into the engine. An op without a handwritten builder here
gets one generated from its schema at import (make_builder), so a new op
needs no edit in this file; a handwritten one is for a friendlier
signature (defaults, named operands). The op codes, the schema, and the kernel
enumerations come from the extension (`_C.op_table()`, `_C.enums()`), and
`check_against_engine()`, run at import, compares every builder here with
the op table: a builder missing for an op, a field renamed, reordered,
added or dropped on either side fails the import, naming the op.

Builders take engine handles (torchtpu._C.Tensor) and return one.
"""
import inspect
from typing import NamedTuple

from torchtpu import _C

_TABLE = _C.op_table()
OPS = {entry[0]: code for code, entry in enumerate(_TABLE)}
ENUMS = _C.enums()
_ATTR_FLAGS = _C.attr_flags()
_RESERVED = _ATTR_FLAGS["reserved"]
_PASS_ONLY = _ATTR_FLAGS["pass_only"]
_OPTIONAL = _ATTR_FLAGS["optional"]

_record = _C.op


def _fixed_ints(name):
    """The ints an op stores before its first list field."""
    n = 0
    for _fname, kind, count, _flags in _TABLE[OPS[name]][4]:
        if kind == "list":
            break
        if kind != "float":
            n += count
    return n


# ints before a collective's replica-group ids (the same for every collective).
COLLECTIVE_HEADER = _fixed_ints("all_reduce")


def _ints(v):
    # The engine reads any int-like (__index__) value; a tuple for one list.
    return tuple(v)


# ------------------------------------------------------------ elementwise
def unary(x, *, op, alpha=0.0, beta=0.0):
    if alpha or beta:
        return _record(OPS["unary"], [x], (op,), (alpha, beta))
    return _record(OPS["unary"], [x], (op,))


def binary(a, b, *, op):
    return _record(OPS["binary"], [a, b], (op,))


def where(cond, a, b):
    return _record(OPS["where"], [cond, a, b])


def convert(x, *, dtype):
    return _record(OPS["convert"], [x], (dtype,))


def special(x, y, *, op):
    return _record(OPS["special"], [x, y], (op,))


# ------------------------------------------------------------ data sources
def iota(*, dtype, n, start=0.0, step=1.0, device=0):
    return _record(OPS["iota"], [], (dtype, n), (start, step), device)


def rng(seed, *, op, dtype, dims, a=0.0, b=0.0):
    return _record(OPS["rng"], [seed], (op, dtype, *_ints(dims)), (a, b))


# ---------------------------------------------------------------- movement
def broadcast(x, *, dims):
    return _record(OPS["broadcast"], [x], _ints(dims))


def reshape(x, *, dims):
    return _record(OPS["reshape"], [x], _ints(dims))


def transpose(x, *, perm):
    return _record(OPS["transpose"], [x], _ints(perm))


def slice(x, *, start, limit, step):  # noqa: A001 - the op's name
    return _record(OPS["slice"], [x], (*_ints(start), *_ints(limit), *_ints(step)))


def slice_scatter(base, src, *, start, limit, step):
    return _record(OPS["slice_scatter"], [base, src],
                   (*_ints(start), *_ints(limit), *_ints(step)))


def concat(*xs, dim):
    return _record(OPS["concat"], list(xs), (dim,))


def pad(x, *, lo, hi, value=0.0):
    return _record(OPS["pad"], [x], (*_ints(lo), *_ints(hi)), (value,))


def flip(x, *, dims_mask):
    return _record(OPS["flip"], [x], (dims_mask,))


def bitcast(x, *, dtype, dims):
    return _record(OPS["bitcast"], [x], (dtype, *_ints(dims)))


# -------------------------------------------------------------- reductions
def reduce(x, *, op, dims_mask, keepdim, dtype):
    return _record(OPS["reduce"], [x], (op, dims_mask, keepdim, dtype))


def scan(x, *, op, dim, dtype):
    return _record(OPS["scan"], [x], (op, dim, dtype))


def cumulative(x, *, op, dim):
    return _record(OPS["cumulative"], [x], (op, dim))


def argsort(x, *, dim, descending):
    return _record(OPS["argsort"], [x], (dim, descending))


def searchsorted(sorted_seq, values, *, right, dtype):
    return _record(OPS["searchsorted"], [sorted_seq, values], (right, dtype))


# ---------------------------------------------------------------- indexing
def index_select(x, idx, *, dim):
    return _record(OPS["index_select"], [x, idx], (dim,))


def index_add(base, idx, src, *, dim):
    return _record(OPS["index_add"], [base, idx, src], (dim,))


def gather(x, idx, *, dim):
    return _record(OPS["gather"], [x, idx], (dim,))


def scatter(base, idx, src, *, dim, reduce):
    return _record(OPS["scatter"], [base, idx, src], (dim, reduce))


def scatter_reduce(base, idx, src, *, dim, reduce, include_self):
    return _record(OPS["scatter_reduce"], [base, idx, src], (dim, reduce, include_self))


# ------------------------------------------------------ products, linalg, fft
def dot(a, b, *, trans_a=0, trans_b=0):
    return _record(OPS["dot"], [a, b], (trans_a, trans_b))


def linalg(*operands, op, flags=(0, 0, 0)):
    return _record(OPS["linalg"], list(operands), (op, *_ints(flags)))


def fft(x, *, kind, n, scale=1.0):
    return _record(OPS["fft"], [x], (kind, n), (scale,))


# -------------------------------------------------- convolution and pooling
def conv2d(x, w, *, stride, padding, dilation, groups):
    return _record(OPS["conv2d"], [x, w], (*_ints(stride), *_ints(padding), *_ints(dilation),
                                           groups))


def conv2d_bwd_input(grad_out, w, *, stride, padding, dilation, groups, out_dims):
    return _record(OPS["conv2d_bwd_input"], [grad_out, w],
                   (*_ints(stride), *_ints(padding), *_ints(dilation), groups,
                    *_ints(out_dims)))


def conv2d_bwd_weight(grad_out, x, *, stride, padding, dilation, groups, out_dims):
    return _record(OPS["conv2d_bwd_weight"], [grad_out, x],
                   (*_ints(stride), *_ints(padding), *_ints(dilation), groups,
                    *_ints(out_dims)))


def max_pool2d(x, *, kernel, stride, padding, dilation, ceil_mode):
    return _record(OPS["max_pool2d"], [x], (*_ints(kernel), *_ints(stride), *_ints(padding),
                                            *_ints(dilation), ceil_mode))


def max_pool2d_indices(x, *, kernel, stride, padding, dilation, ceil_mode):
    return _record(OPS["max_pool2d_indices"], [x],
                   (*_ints(kernel), *_ints(stride), *_ints(padding), *_ints(dilation),
                    ceil_mode))


def max_pool2d_bwd(grad_out, indices, *, dims):
    return _record(OPS["max_pool2d_bwd"], [grad_out, indices], _ints(dims))


def avg_pool2d(x, *, kernel, stride, padding, ceil_mode, count_include_pad, divisor):
    return _record(OPS["avg_pool2d"], [x], (*_ints(kernel), *_ints(stride), *_ints(padding),
                                            ceil_mode, count_include_pad, divisor))


def avg_pool2d_bwd(grad_out, *, kernel, stride, padding, ceil_mode, count_include_pad,
                   divisor, dims):
    return _record(OPS["avg_pool2d_bwd"], [grad_out],
                   (*_ints(kernel), *_ints(stride), *_ints(padding), ceil_mode,
                    count_include_pad, divisor, *_ints(dims)))


def adaptive_avg_pool2d(x, *, out_size):
    return _record(OPS["adaptive_avg_pool2d"], [x], _ints(out_size))


def adaptive_avg_pool2d_bwd(grad_out, *, dims):
    return _record(OPS["adaptive_avg_pool2d_bwd"], [grad_out], _ints(dims))


# ----------------------------------------------- normalisation and attention
def softmax(x, *, dim, log, packed=None):
    if packed is None:
        return _record(OPS["softmax"], [x], (dim, log))
    return _record(OPS["softmax"], [x], (dim, log, packed))


def softmax_bwd(grad_out, y, *, dim, log):
    return _record(OPS["softmax_bwd"], [grad_out, y], (dim, log))


def layer_norm(x, *weight_bias, axis, has_weight, has_bias, form, eps):
    return _record(OPS["layer_norm"], [x, *weight_bias], (axis, has_weight, has_bias, form),
                   (eps,))


def layer_norm_bwd(grad_out, x, mean, rstd, *weight, axis, want_grad_x):
    return _record(OPS["layer_norm_bwd"], [grad_out, x, mean, rstd, *weight],
                   (axis, want_grad_x))


def attention(q, k, v, *mask, causal, lse=None, scale):
    """The strided form's fields (B ... out_layout) are made only by the
    engine's attention_layout pass, never recorded."""
    ia = (causal,) if lse is None else (causal, lse)
    return _record(OPS["attention"], [q, k, v, *mask], ia, (scale,))


def attention_bwd(grad_out, q, k, v, *mask, causal, scale):
    return _record(OPS["attention_bwd"], [grad_out, q, k, v, *mask], (causal,), (scale,))


# ------------------------------------------------------------- collectives
def _collective(name, x, head, channel_id, group_size, groups):
    return _record(OPS[name], [x], (*head, channel_id, group_size, *_ints(groups)))


def all_reduce(x, *, reduce, channel_id=0, group_size, groups=()):
    return _collective("all_reduce", x, (reduce, 0, 0), channel_id, group_size, groups)


def all_gather(x, *, dim, shard_count, channel_id=0, group_size, groups=()):
    return _collective("all_gather", x, (dim, shard_count, 0), channel_id, group_size, groups)


def reduce_scatter(x, *, reduce, dim, shard_count, channel_id=0, group_size, groups=()):
    return _collective("reduce_scatter", x, (reduce, dim, shard_count), channel_id, group_size,
                       groups)


def all_to_all(x, *, split_dim, concat_dim, split_count, channel_id=0, group_size, groups=()):
    return _collective("all_to_all", x, (split_dim, concat_dim, split_count), channel_id,
                       group_size, groups)


def collective_permute(x, *, channel_id=0, group_size=2, groups):
    return _collective("collective_permute", x, (0, 0, 0), channel_id, group_size, groups)


# ============================================================================
# Builders whose attribute is not a fixed run of ints: the call site passes a
# Python value and the builder encodes it into the op's LIST field.
# ============================================================================
class ManualSharding(NamedTuple):
    """A manual SPMD region's tiled sharding (the `spec` of
    spmd_full_to_shard / spmd_shard_to_full): tile counts per dim (plus the
    replica count last when last_tile_dim_replicate), the device ids in tile
    order, and for spmd_shard_to_full the full tensor's dims."""
    tile_dims: tuple
    last_tile_dim_replicate: bool
    devices: tuple
    full_dims: tuple = ()

    def encode(self):
        """The LIST field: [num_tile_dims, last_tile_dim_replicate,
        tile dims..., num_devices, devices..., full dims...] (op_attrs.h)."""
        return (len(self.tile_dims), int(self.last_tile_dim_replicate),
                *_ints(self.tile_dims), len(self.devices), *_ints(self.devices),
                *_ints(self.full_dims))


def _manual_spec(name, spec):
    # A flat int tuple is refused: the encoding is this class's alone.
    if not isinstance(spec, ManualSharding):
        raise TypeError(f"{name}: spec must be a torchtpu.ir.ManualSharding, got "
                        f"{type(spec).__name__}")
    return spec.encode()


def spmd_full_to_shard(x, *, spec):
    ia = _manual_spec("spmd_full_to_shard", spec)
    if spec.full_dims:
        raise ValueError(f"spmd_full_to_shard takes no full_dims, got {tuple(spec.full_dims)}")
    return _record(OPS["spmd_full_to_shard"], [x], ia)


def spmd_shard_to_full(x, *, spec):
    """spec.full_dims: the full tensor's dims (the result's shape)."""
    return _record(OPS["spmd_shard_to_full"], [x], _manual_spec("spmd_shard_to_full", spec))
# ============================================ end of the encoded-value builders


# Ops no front end records: graph inputs have their own calls (_C.scalar,
# tensors from host data) and fused instructions are made by the passes.
_NOT_RECORDED = {"param", "scalar", "fused"}
# Keyword-only builder parameters that are not attribute fields.
_NOT_FIELDS = {"device"}


# ------------------------------------------------------- generated builders
def make_builder(name):
    """A builder for op `name` made from its schema alone: operands
    positional, attribute fields keyword-only in storage order (reserved
    and pass-only fields are not taken: stored as 0 and never recorded),
    optional fields defaulting to None (absent: they and every int field
    after them are not stored), ops without operands taking `device=0`.
    Python's binding rules refuse an unknown or a missing attribute with
    a TypeError naming it; an `ints` field of the wrong length is a
    ValueError naming it. Installed for every recorded op without a
    handwritten builder above, so a new op needs no edit here."""
    code = OPS[name]
    _name, _lo, hi, _flags, fields = _TABLE[code]
    params = [inspect.Parameter("operands", inspect.Parameter.VAR_POSITIONAL)]
    optional = False
    for fname, _kind, _count, fflags in fields:
        if fflags & (_RESERVED | _PASS_ONLY):
            continue
        optional = optional or bool(fflags & _OPTIONAL)
        default = None if optional and _kind != "float" else inspect.Parameter.empty
        params.append(inspect.Parameter(fname, inspect.Parameter.KEYWORD_ONLY, default=default))
    if hi == 0:
        params.append(inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=0))
    sig = inspect.Signature(params)

    def builder(*operands, **attrs):
        try:
            bound = sig.bind(*operands, **attrs)
        except TypeError as e:
            raise TypeError(f"{name}(): {e}") from None
        bound.apply_defaults()
        given = bound.arguments
        ints, floats, absent = [], [], None
        for fname, kind, count, fflags in fields:
            if kind == "float":
                floats.append(given[fname])
                continue
            if fflags & _PASS_ONLY:
                absent = absent or fname  # the strided forms only passes write
                continue
            if fflags & _RESERVED:
                value = (0,) * count
            else:
                value = given[fname]
                if value is None:  # an optional field left out
                    absent = absent or fname
                    continue
            if absent:
                raise TypeError(f"{name}(): {fname} given without the optional {absent} "
                                "before it")
            if kind == "int":
                ints.append(value)
            elif kind == "ints":
                value = _ints(value)
                if len(value) != count:
                    raise ValueError(f"{name}(): {fname} takes {count} values, got "
                                     f"{len(value)}")
                ints.extend(value)
            else:
                ints.extend(_ints(value))
        device = (given.get("device", 0),) if hi == 0 else ()
        return _record(code, list(operands), tuple(ints), tuple(floats), *device)

    builder.__name__ = builder.__qualname__ = name
    builder.__signature__ = sig
    builder.__doc__ = f"The {name} op, built from its schema (torchtpu.ir.make_builder)."
    return builder


def _install_generated_builders(namespace):
    for name, *_rest in _TABLE:
        if name not in _NOT_RECORDED and name not in namespace:
            namespace[name] = make_builder(name)


_install_generated_builders(globals())


def check_against_engine(namespace=None):
    """Compares every builder with the op table: each recorded op has a
    builder of its name whose keyword-only parameters are the op's
    attribute fields but the reserved and pass-only ones, in order; optional fields and floats have
    defaults. Returns the list of mismatches (empty when all agree)."""
    ns = globals() if namespace is None else namespace
    problems = []
    for name, _lo, _hi, _flags, fields in _TABLE:
        if name in _NOT_RECORDED:
            continue
        fn = ns.get(name)
        if not callable(fn):
            problems.append(f"{name}: no builder in torchtpu.ir")
            continue
        params = inspect.signature(fn).parameters.values()
        kw = [p for p in params if p.kind == p.KEYWORD_ONLY and p.name not in _NOT_FIELDS]
        want = [f for f in fields if not f[3] & (_RESERVED | _PASS_ONLY)]
        if [p.name for p in kw] != [f[0] for f in want]:
            problems.append(f"{name}: builder fields {[p.name for p in kw]} != engine fields "
                            f"{[f[0] for f in want]}")
            continue
        optional = False
        for p, (fname, kind, _count, fflags) in zip(kw, want, strict=True):
            optional = optional or bool(fflags & _OPTIONAL)
            if optional and kind != "float" and p.default is p.empty:
                problems.append(f"{name}: optional field {fname} needs a default")
    return problems


_problems = check_against_engine()
if _problems:
    raise ImportError("torchtpu.ir does not match the engine's op table: " + "; ".join(_problems))
