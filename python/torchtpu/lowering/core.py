"""Shared pieces of the lowering table: op codes and kernel enumerations
(taken from the engine: torchtpu.ir), handle helpers, type promotion and
the registry."""
import torch
from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor

from torchtpu import _C, bridge, ir
from torchtpu.op_metrics import count as _count
from torchtpu.bridge import TORCH_TO_TT, TT_TO_TORCH, XlaTensor

aten = torch.ops.aten

# Op codes by upper-case name (SLICE, CONVERT, ...), from the engine's op table.
globals().update({_name.upper(): _code for _name, _code in ir.OPS.items()})
# ints before a collective's replica-group ids (TT_COLLECTIVE_HEADER).
COLLECTIVE_HEADER = ir.COLLECTIVE_HEADER

_E = ir.ENUMS
SR_SUM, SR_PROD, SR_MEAN, SR_AMAX, SR_AMIN = (
    _E["scatter_reduce"][n] for n in ("sum", "prod", "mean", "amax", "amin"))
CUM_MAX, CUM_MAX_INDEX, CUM_MIN, CUM_MIN_INDEX, CUM_LOGSUMEXP = (
    _E["cumulative"][n] for n in ("max", "max_index", "min", "min_index", "logsumexp"))

UN = dict(_E["unary"])
UNARY_OPS = sorted(UN, key=UN.get)
BIN = dict(_E["binary"])
BINARY_OPS = sorted(BIN, key=BIN.get)

RED_SUM, RED_MEAN, RED_PROD, RED_MAX, RED_MIN, RED_ARGMAX, RED_ARGMIN, RED_ANY, RED_ALL = (
    _E["reduce"][n] for n in ("sum", "mean", "prod", "max", "min", "argmax", "argmin", "any",
                              "all"))
RNG_UNIFORM, RNG_NORMAL, RNG_BERNOULLI = (
    _E["rng"][n] for n in ("uniform", "normal", "bernoulli"))

from torchtpu.bridge import (TT_BF16, TT_BOOL, TT_C64, TT_F16, TT_F32, TT_F64,  # noqa: E402
                             TT_I8, TT_I16, TT_I32, TT_I64, TT_U8)
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
    return h if h.dtype == dt else ir.convert(h, dtype=dt)


def reshape(h, shape):
    shape = tuple(int(s) for s in shape)
    return h if tuple(h.shape) == shape else ir.reshape(h, dims=shape)


def broadcast(h, shape):
    shape = tuple(int(s) for s in shape)
    return h if tuple(h.shape) == shape else ir.broadcast(h, dims=shape)


def iota(dev, n):
    """0, 1, ..., n-1 as an I64 vector on device dev."""
    return ir.iota(dtype=TT_I64, n=n, start=0.0, step=1.0, device=dev)


def refuse_fake(t):
    """A FakeTensor beside real xla tensors: code traced with fake tensors
    (scan's AOTAutograd trace) used an xla tensor it was not given. PyTorch's
    FakeTensorMode raises AssertionError for this mix; so does this, before
    anything reads the fake tensor's (absent) data."""
    if isinstance(t, _FakeTensor):
        raise AssertionError(
            "Please convert all Tensors to FakeTensors first: a FakeTensor met a real xla "
            "tensor (a function traced with fake tensors, such as scan's fn, used an xla "
            "tensor that is not one of its arguments)")


def cpu_operand(t):
    """A CPU tensor reaching an xla op: 0-dim values are accepted as scalars
    (as PyTorch does for CPU scalars mixed with device tensors)."""
    refuse_fake(t)
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
    out = []
    for d in dims:
        d = norm_dim(d, rank)
        if d in out:  # ATen names the first repeat, wrapped
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        out.append(d)
    return out


def mask_of(dims):
    m = 0
    for d in dims:
        m |= 1 << d
    return m


__all__ = [n for n in dir() if not n.startswith("__")]
_ = TORCH_TO_TT
