"""Shared pieces of the lowering table: opcodes (mirroring include/torchtpu/
ir.h and kernels.h), handle helpers, type promotion and the registry."""
import torch

from torchtpu import _C, bridge
from torchtpu.op_metrics import count as _count
from torchtpu.bridge import TORCH_TO_TT, TT_TO_TORCH, XlaTensor

aten = torch.ops.aten

# tt_op_t, in ir.h order.
(PARAM, SCALAR, UNARY, BINARY, WHERE, CONVERT, BROADCAST, RESHAPE, IOTA, REDUCE, SCAN, DOT,
 CONV2D, CONV2D_BWD_INPUT, CONV2D_BWD_WEIGHT, MAX_POOL2D, MAX_POOL2D_INDICES, MAX_POOL2D_BWD,
 AVG_POOL2D, AVG_POOL2D_BWD, ADAPTIVE_AVG_POOL2D, ADAPTIVE_AVG_POOL2D_BWD, TRANSPOSE, SLICE,
 SLICE_SCATTER, CONCAT, PAD, FLIP, INDEX_SELECT, INDEX_ADD, GATHER, SCATTER, SOFTMAX,
 SOFTMAX_BWD, RNG, FUSED, ARGSORT, SEARCHSORTED, SCATTER_REDUCE, CUMULATIVE, LINALG, BITCAST,
 SPECIAL, FFT, ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, COLLECTIVE_PERMUTE,
 SPMD_FULL_TO_SHARD, SPMD_SHARD_TO_FULL, ATTENTION, ATTENTION_BWD, LAYER_NORM,
 LAYER_NORM_BWD) = range(55)
# iattrs before a collective's replica-group ids (TT_COLLECTIVE_HEADER).
COLLECTIVE_HEADER = 5

# tt_scatter_reduce_t and tt_cumulative_t (kernels.h).
SR_SUM, SR_PROD, SR_MEAN, SR_AMAX, SR_AMIN = range(5)
CUM_MAX, CUM_MAX_INDEX, CUM_MIN, CUM_MIN_INDEX, CUM_LOGSUMEXP = range(5)

UNARY_OPS = [
    "neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
    "sigmoid", "relu", "gelu_erf", "gelu_tanh", "silu", "erf", "floor", "ceil", "round", "trunc",
    "sign", "reciprocal", "logical_not", "isnan", "bitwise_not", "asin", "acos", "atan", "sinh",
    "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2", "erfinv", "square", "leaky_relu",
    "elu", "hardtanh", "softplus", "hardsigmoid", "hardswish", "mish", "lgamma", "digamma",
]
UN = {name: i for i, name in enumerate(UNARY_OPS)}

BINARY_OPS = [
    "add", "sub", "mul", "div", "pow", "max", "min", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "atan2", "remainder", "fmod", "floor_div", "shift_left", "shift_right", "hypot",
    "maximum", "minimum",
]
BIN = {name: i for i, name in enumerate(BINARY_OPS)}

RED_SUM, RED_MEAN, RED_PROD, RED_MAX, RED_MIN, RED_ARGMAX, RED_ARGMIN, RED_ANY, RED_ALL = range(9)
RNG_UNIFORM, RNG_NORMAL, RNG_BERNOULLI = range(3)

TT_F32, TT_F64, TT_F16, TT_BF16, TT_I8, TT_U8, TT_I16, TT_I32, TT_I64, TT_BOOL, TT_C64 = range(11)
FLOAT_TT = (TT_F32, TT_F64, TT_F16, TT_BF16)

LOWERINGS = {}


def lowers(*ops):
    """Registers fn as the lowering of each aten OpOverload (or packet: all
    its overloads)."""
    def deco(fn):
        for op in ops:
            if isinstance(op, torch._ops.OpOverloadPacket):
                for name in op.overloads():
                    LOWERINGS.setdefault(getattr(op, name), fn)
            else:
                LOWERINGS[op] = fn
        return fn
    return deco


# ------------------------------------------------------------- handles
def is_xla(x):
    return isinstance(x, XlaTensor)


def device_of(*args):
    for a in args:
        if isinstance(a, XlaTensor):
            return a._h.device
        if isinstance(a, (list, tuple)):
            d = device_of(*a)
            if d is not None:
                return d
    return None


def wrap(h):
    return XlaTensor(h)


def op(code, operands, iattrs=(), fattrs=(), device=0):
    """Records one IR op; device matters only for ops without operands."""
    return _C.op(code, operands, iattrs, fattrs, device)


def scalar(dev, dt, value):
    if isinstance(value, bool):
        value = int(value)
    if dt in FLOAT_TT:
        value = float(value)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            value = 0
        value = int(value)
    return _C.scalar(dev, dt, value)


def convert(h, dt):
    return h if h.dtype == dt else _C.op(CONVERT, [h], (dt,))


def reshape(h, shape):
    shape = tuple(int(s) for s in shape)
    return h if tuple(h.shape) == shape else _C.op(RESHAPE, [h], shape)


def broadcast(h, shape):
    shape = tuple(int(s) for s in shape)
    return h if tuple(h.shape) == shape else _C.op(BROADCAST, [h], shape)


def iota(dev, n):
    """0, 1, ..., n-1 as an I64 vector on device dev."""
    return _C.op(IOTA, [], (TT_I64, n), (0.0, 1.0), dev)


def cpu_operand(t):
    """A CPU tensor reaching an xla op: 0-dim values are accepted as scalars
    (as PyTorch does for CPU scalars mixed with device tensors)."""
    if t.dim() == 0:
        return t.item()
    raise RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"xla and {t.device}!")


def handle(x, dev, dt):
    """Engine handle for x (xla tensor, CPU 0-dim tensor, or number) as dtype dt."""
    if isinstance(x, XlaTensor):
        if x._h.device != dev:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, xla:{dev} and xla:{x._h.device}!")
        return convert(x._h, dt)
    if isinstance(x, torch.Tensor):
        x = cpu_operand(x)
    _count("DeviceDataCacheMiss")  # a number made device data (op_metrics.py)
    return scalar(dev, dt, x)


# ------------------------------------------------------- type promotion
def _category(dtype):
    if dtype == torch.bool:
        return 0
    if dtype.is_floating_point:
        return 2
    if dtype.is_complex:
        return 3
    return 1


def result_type(*args):
    """torch.result_type for a mix of tensors and Python numbers."""
    if len(args) == 2:
        # Common case first: two tensors of one dtype (any dims), or a tensor
        # with a number of a lower category.
        a, b = args
        if isinstance(a, torch.Tensor):
            if isinstance(b, torch.Tensor):
                if a.dtype is b.dtype:
                    return a.dtype
            elif type(b) is float and a.dtype.is_floating_point:
                return a.dtype
            elif type(b) is int and a.dtype is not torch.bool and not a.dtype.is_complex:
                return a.dtype
    dim_t = None
    zero_t = None
    scal = -1
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.dim() > 0:
                dim_t = a.dtype if dim_t is None else torch.promote_types(dim_t, a.dtype)
            else:
                zero_t = a.dtype if zero_t is None else torch.promote_types(zero_t, a.dtype)
        elif isinstance(a, bool):
            scal = max(scal, 0)
        elif isinstance(a, int):
            scal = max(scal, 1)
        elif isinstance(a, float):
            scal = max(scal, 2)
        elif isinstance(a, complex):
            scal = max(scal, 3)
    r = dim_t
    if zero_t is not None and (r is None or _category(zero_t) > _category(r)):
        r = zero_t
    if scal >= 0 and (r is None or scal > _category(r)):
        r = {0: torch.bool, 1: torch.int64, 2: torch.get_default_dtype(),
             3: torch.complex64}[scal]
    return r


def float_type_of(dtype):
    """The floating type an op computes in for input dtype (int -> default)."""
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


def tt(dtype):
    return bridge.tt_dtype(dtype)


def torch_dtype(dt):
    return TT_TO_TORCH[dt]


def norm_dim(dim, rank):
    r = max(rank, 1)
    if dim < -r or dim >= r:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-r}, {r - 1}], but got {dim})")
    return dim % r


def norm_dims(dims, rank):
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    out = [norm_dim(d, rank) for d in dims]
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {dims} appears multiple times in the list of dims")
    return out


def mask_of(dims):
    m = 0
    for d in dims:
        m |= 1 << d
    return m


__all__ = [n for n in dir() if not n.startswith("__")]
_ = TORCH_TO_TT
