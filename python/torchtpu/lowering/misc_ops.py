"""Random numbers (the device RNG) and factory ops that reach the XLA key
with no tensor argument (arange and friends)."""
import math

import torch

from torchtpu import _C, bridge, ir
from torchtpu.lowering.core import (
    BIN, BINARY, CONVERT, IOTA, RNG, RNG_BERNOULLI, RNG_NORMAL, RNG_UNIFORM, TT_BOOL, TT_F32,
    TT_I64, UN, UNARY, WHERE, aten, broadcast, handle, lowers, reshape, scalar, tt, wrap)

# ------------------------------------------------------------ device RNG
# One 64-bit state per device, as PyTorch/XLA keeps it. Every random op
# takes a key derived from the current state and then advances the state
# (a 64-bit LCG step), so xm.get_rng_state() returns a single value that,
# handed back to xm.set_rng_state(), replays the same random stream. The
# key is a runtime scalar of the graph: new keys never recompile. The CPU
# generator (torch.manual_seed, torch.rand on CPU) is never consulted.
DEFAULT_SEED = 101
_LCG_MUL = 6364136223846793005
_LCG_ADD = 1442695040888963407
_MASK64 = (1 << 64) - 1
_rng_state = {}


def _mix(seed, counter):
    x = (seed * 0x9E3779B97F4A7C15 + counter * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB)
    x &= _MASK64
    x ^= x >> 31
    x = (x * 0xD6E8FEB86659FD93) & _MASK64
    x ^= x >> 32
    return x - (1 << 64) if x >= (1 << 63) else x


def manual_seed(seed, device=None):
    seed = int(seed) & _MASK64
    if device is None:
        _rng_state.clear()
        _rng_state["default"] = seed
    else:
        _rng_state[device] = seed


def _state(device):
    if device not in _rng_state:
        _rng_state[device] = _rng_state.get("default", DEFAULT_SEED)
    return _rng_state[device]


def get_rng_state(device):
    """(state, 0): the device's current RNG state (a 64-bit integer)."""
    return _state(device), 0


def set_rng_state(seed, device, counter=0):
    """Makes seed the device's RNG state; counter > 0 advances it that many
    random ops."""
    s = int(seed) & _MASK64
    for _ in range(int(counter)):
        s = (s * _LCG_MUL + _LCG_ADD) & _MASK64
    _rng_state[device] = s


def _next_key(device):
    s = _state(device)
    _rng_state[device] = (s * _LCG_MUL + _LCG_ADD) & _MASK64
    return _mix(s, 0)


def rng_handle(device, kind, dt, shape, a, b):
    key = _C.scalar(device, TT_I64, _next_key(device))
    return ir.rng(key, op=kind, dtype=dt, dims=[int(s) for s in shape], a=float(a), b=float(b))


def _float_rng(x, kind, a, b):
    dt = x._h.dtype
    work = dt if dt in (0, 1) else TT_F32
    h = rng_handle(x._h.device, kind, work, x.shape, a, b)
    return wrap(h if work == dt else ir.convert(h, dtype=dt))


@lowers(aten.uniform.default)
def uniform(x, from_=0.0, to=1.0, generator=None):
    return _float_rng(x, RNG_UNIFORM, from_, to)


@lowers(aten.uniform_.default)
def uniform_in_place(x, from_=0.0, to=1.0, generator=None):
    # Functionalization normally turns uniform_ into uniform; code traced
    # without it (AOTAutograd's own trace of scan's fn, prims' uniform
    # implementation) still reaches here, and PyTorch's decomposition of
    # uniform_ calls straight back into it.
    x._h = uniform(x, from_, to, generator)._h
    return x


@lowers(aten.normal_functional.default)
def normal_functional(x, mean=0.0, std=1.0, generator=None):
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    return _float_rng(x, RNG_NORMAL, mean, std)


@lowers(aten.bernoulli.p)
def bernoulli_p(x, p=0.5, generator=None):
    return wrap(rng_handle(x._h.device, RNG_BERNOULLI, x._h.dtype, x.shape, p, 0.0))


@lowers(aten.bernoulli.default)
def bernoulli(x, generator=None):
    dev = x._h.device
    u = rng_handle(dev, RNG_UNIFORM, TT_F32, x.shape, 0.0, 1.0)
    p = handle(x, dev, TT_F32)
    keep = ir.binary(u, p, op=BIN["lt"])
    return wrap(ir.convert(keep, dtype=x._h.dtype))


@lowers(aten.bernoulli.Tensor)
def bernoulli_tensor(x, p, generator=None):
    dev = x._h.device
    u = rng_handle(dev, RNG_UNIFORM, TT_F32, x.shape, 0.0, 1.0)
    keep = ir.binary(u, broadcast(handle(p, dev, TT_F32), x.shape), op=BIN["lt"])
    return wrap(ir.convert(keep, dtype=x._h.dtype))


@lowers(aten.random.default, getattr(aten.random, "from"), aten.random.to)
def random_(x, from_=None, to=None, generator=None):
    if from_ is None and to is None:
        from_, to = 0, (2 ** 24 if x.dtype.is_floating_point else 2 ** 31)
    elif to is None:
        to, from_ = from_, 0
    dev = x._h.device
    u = rng_handle(dev, RNG_UNIFORM, 1, x.shape, float(from_), float(to))  # f64
    f = ir.unary(u, op=UN["floor"], alpha=0.0, beta=0.0)
    return wrap(ir.convert(f, dtype=x._h.dtype))


@lowers(aten.exponential.default)
def exponential(x, lambd=1.0, generator=None):
    dev = x._h.device
    u = rng_handle(dev, RNG_UNIFORM, TT_F32, x.shape, 0.0, 1.0)
    one_minus = ir.binary(scalar(dev, TT_F32, 1.0), u, op=BIN["sub"])
    lg = ir.unary(one_minus, op=UN["log"], alpha=0.0, beta=0.0)
    r = ir.binary(lg, scalar(dev, TT_F32, -1.0 / lambd), op=BIN["mul"])
    return wrap(ir.convert(r, dtype=x._h.dtype))


def _like_dtype(x, dtype):
    return dtype if dtype is not None else x.dtype


def _rand_like(kind):
    def fn(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None,
           generator=None):
        dt = tt(_like_dtype(x, dtype))
        work = dt if dt in (0, 1) else TT_F32
        a, b = (0.0, 1.0)
        h = rng_handle(x._h.device, kind, work, x.shape, a, b)
        return wrap(h if work == dt else ir.convert(h, dtype=dt))
    return fn


lowers(aten.rand_like.default, aten.rand_like.generator)(_rand_like(RNG_UNIFORM))
lowers(aten.randn_like.default, aten.randn_like.generator)(_rand_like(RNG_NORMAL))


def _randint_h(dev, shape, low, high, dt):
    """Integers uniform in [low, high): floor of a float64 uniform."""
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    u = rng_handle(dev, RNG_UNIFORM, 1, shape, float(low), float(high))  # f64
    f = ir.unary(u, op=UN["floor"], alpha=0.0, beta=0.0)
    # [low, high) in float64 can round up to high for huge ranges.
    f = ir.binary(f, scalar(dev, 1, float(high - 1)), op=BIN["min"])
    return ir.convert(f, dtype=dt)


@lowers(aten.randint_like.default, aten.randint_like.generator)
def randint_like(x, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None, generator=None):
    return wrap(_randint_h(x._h.device, x.shape, 0, int(high), tt(_like_dtype(x, dtype))))


@lowers(aten.randint_like.low_dtype, aten.randint_like.low_generator_dtype)
def randint_like_low(x, low, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                     memory_format=None, generator=None):
    return wrap(_randint_h(x._h.device, x.shape, int(low), int(high),
                           tt(_like_dtype(x, dtype))))


@lowers(aten.randint_like.Tensor, aten.randint_like.Tensor_generator)
def randint_like_tensor(x, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                        memory_format=None, generator=None):
    return randint_like(x, int(high.item()), dtype=dtype)


@lowers(aten.multinomial.default)
def multinomial(p, num_samples, replacement=False, *, generator=None):
    """Sampling from rows of (unnormalised) probabilities on the device: with
    replacement by inverse CDF (searchsorted of uniforms in the cumulative
    sum); without replacement by the Gumbel-top-k trick (the k largest of
    log p + Gumbel noise are a sample without replacement)."""
    from torchtpu.lowering.core import ARGSORT, GATHER, REDUCE, SCAN, SEARCHSORTED, SLICE, TT_I64
    dev = p._h.device
    if p.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    n = p.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    h = p._h if p.dim() == 2 else reshape(p._h, [1, n])
    rows = h.shape[0]
    work = 1 if h.dtype == 1 else TT_F32
    h = ir.convert(h, dtype=work) if h.dtype != work else h
    if replacement:
        cdf = ir.scan(h, op=0, dim=1, dtype=work)
        total = ir.reduce(h, op=0, dims_mask=2, keepdim=1, dtype=work)
        u = rng_handle(dev, RNG_UNIFORM, work, [rows, num_samples], 0.0, 1.0)
        u = ir.binary(u, total, op=BIN["mul"])
        idx = ir.searchsorted(cdf, u, right=1, dtype=TT_I64)
        idx = ir.binary(idx, scalar(dev, TT_I64, n - 1), op=BIN["min"])
    else:
        u = rng_handle(dev, RNG_UNIFORM, work, [rows, n], 0.0, 1.0)
        # Gumbel noise -log(-log(u)); u == 0 is guarded by a tiny floor.
        u = ir.binary(u, scalar(dev, work, 1e-30), op=BIN["max"])
        g = ir.unary(ir.unary(ir.unary(u, op=UN["log"], alpha=0.0, beta=0.0), op=UN["neg"], alpha=0.0, beta=0.0), op=UN["log"], alpha=0.0, beta=0.0)
        key = ir.binary(ir.unary(h, op=UN["log"], alpha=0.0, beta=0.0), g, op=BIN["sub"])
        order = ir.argsort(key, dim=1, descending=1)
        idx = ir.slice(order, start=(0, 0), limit=(rows, num_samples), step=(1, 1))
    _ = GATHER
    return wrap(idx if p.dim() == 2 else reshape(idx, [num_samples]))


# ------------------------------------------------------------- factories
# Functional factory overloads are registered for the XLA key directly (a
# backend kernel wins over the composite ones, which would go through out=
# variants that have no XLA kernel).
_result = bridge.wrap_result


def _num(v):
    return v.item() if isinstance(v, torch.Tensor) else v


def _bound_text(v):
    """A bound as ATen prints it in 'unsupported range' (-5, nan, inf, 2.5)."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _arange_h(index, start, end, step, dtype):
    start, end, step = _num(start), _num(end), _num(step)
    # ATen's checks, in its order and words.
    if step == 0:
        raise RuntimeError("step must be nonzero")
    for v in (start, end):
        if isinstance(v, float) and not math.isfinite(v):
            raise RuntimeError(f"unsupported range: {_bound_text(start)} -> {_bound_text(end)}")
    if (end - start) * step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype is None:
        is_float = any(isinstance(v, float) for v in (start, end, step))
        dtype = torch.get_default_dtype() if is_float else torch.int64
    dt = tt(dtype)
    if dt in (TT_F32, 1, 2, 3):
        n = max(math.ceil((end - start) / step), 0)
        return ir.iota(dtype=dt, n=n, start=float(start), step=float(step), device=index)
    # Integer dtypes: ATen truncates start/end/step to integers first (and
    # for int64 also sizes the result in integer arithmetic).
    xs, xe, xst = int(start), int(end), int(step)
    if xst == 0:
        raise RuntimeError("step must be nonzero")
    if dtype == torch.int64:
        sgn = (xst > 0) - (xst < 0)
        num = xe - xs + xst - sgn
        n = max(abs(num) // abs(xst) * (1 if (num >= 0) == (xst > 0) else -1), 0)
    else:
        n = max(math.ceil((end - start) / step), 0)
    h = ir.iota(dtype=TT_I64, n=n, start=float(xs), step=float(xst), device=index)
    return ir.convert(h, dtype=dt) if dt != TT_I64 else h


def _arange(end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _result(_arange_h(bridge.device_index(device), 0, end, 1, dtype))


def _arange_start(start, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _result(_arange_h(bridge.device_index(device), start, end, 1, dtype))


def _arange_start_step(start=0, end=None, step=1, *, dtype=None, layout=None, device=None,
                       pin_memory=None):
    return _result(_arange_h(bridge.device_index(device), start, end, step, dtype))


def _linspace_h(index, start, end, steps, dtype):
    """ATen's linspace: step = (end - start) / (steps - 1); the first half
    counts up from start, the second half back from end. Integer dtypes
    truncate start and end first and compute in float64. start and end are
    numbers or 0-dim handles (tensor overloads stay on the device)."""
    F64 = 1
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")

    def h64(v):
        if isinstance(v, (int, float, bool)):
            v = int(v) if not dtype.is_floating_point else float(v)
            return scalar(index, F64, v)
        v = ir.convert(reshape(v, []), dtype=F64)
        if not dtype.is_floating_point:
            v = ir.convert(ir.convert(v, dtype=TT_I64), dtype=F64)
        return v
    sh, eh = h64(start), h64(end)
    if steps == 1:
        return ir.convert(broadcast(sh, [1]), dtype=tt(dtype))
    step = ir.binary(ir.binary(eh, sh, op=BIN["sub"]), scalar(index, F64, max(steps - 1, 1)), op=BIN["div"])
    i = ir.iota(dtype=F64, n=steps, start=0.0, step=1.0, device=index)
    up = ir.binary(sh, ir.binary(i, step, op=BIN["mul"]), op=BIN["add"])
    back = ir.binary(scalar(index, F64, steps - 1), i, op=BIN["sub"])
    down = ir.binary(eh, ir.binary(back, step, op=BIN["mul"]), op=BIN["sub"])
    first = ir.binary(ir.iota(dtype=TT_I64, n=steps, start=0.0, step=1.0, device=index), scalar(index, TT_I64, steps // 2), op=BIN["lt"])
    return ir.convert(ir.where(first, up, down), dtype=tt(dtype))


def _linspace(start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    start, end = _num(start), _num(end)
    dtype = dtype or torch.get_default_dtype()
    return _result(_linspace_h(bridge.device_index(device), start, end, steps, dtype))


def _linspace_tensors(start, end, steps, *, dtype=None, layout=None, device=None,
                      pin_memory=None):
    """linspace with tensor start/end: computed on the device from their
    values (no read-back)."""
    from torchtpu.bridge import XlaTensor
    xs = [v for v in (start, end) if isinstance(v, XlaTensor)]
    index = xs[0]._h.device if xs else bridge.device_index(device)
    if device is not None and torch.device(device).type != "xla":
        return NotImplemented
    dtype = dtype or torch.get_default_dtype()

    def val(v):
        if isinstance(v, XlaTensor):
            return v._h
        return _num(v)
    return wrap(_linspace_h(index, val(start), val(end), steps, dtype))


for _ov in ("Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"):
    if hasattr(aten.linspace, _ov):
        lowers(getattr(aten.linspace, _ov))(_linspace_tensors)


def _eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    m = n if m is None else m
    if n < 0 or m < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {min(n, m)}")
    index = bridge.device_index(device)
    rows = reshape(ir.iota(dtype=TT_I64, n=n, start=0.0, step=1.0, device=index), [n, 1])
    cols = reshape(ir.iota(dtype=TT_I64, n=m, start=0.0, step=1.0, device=index), [1, m])
    eq = ir.binary(rows, cols, op=BIN["eq"])
    return _result(ir.convert(eq, dtype=tt(dtype or torch.get_default_dtype())))


def _full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    if dtype is None:
        dtype = (torch.bool if isinstance(fill_value, bool) else
                 torch.int64 if isinstance(fill_value, int) else
                 torch.complex64 if isinstance(fill_value, complex) else
                 torch.get_default_dtype())
    index = bridge.device_index(device)
    if dtype.is_complex or isinstance(fill_value, complex):
        from torchtpu.lowering.complex_ops import factory_value
        return _result(factory_value(dtype, fill_value, index, [int(s) for s in size]))
    return _result(broadcast(scalar(index, tt(dtype), fill_value), size))


def _scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or (torch.complex64 if isinstance(s, complex) else torch.get_default_dtype())
    if dtype.is_complex or isinstance(s, complex):
        from torchtpu.lowering.complex_ops import factory_value
        return _result(factory_value(dtype, s, bridge.device_index(device), []))
    return _result(scalar(bridge.device_index(device), tt(dtype), s))


def _efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Backward formulas' zero tensors: plain zeros here (the engine folds
    them into their consumers)."""
    return _full(size, 0, dtype=dtype or torch.get_default_dtype(), device=device)


def _randperm(n, *, dtype=torch.int64, layout=None, device=None, pin_memory=None,
              generator=None):
    """A random permutation: the order that sorts n float64 uniforms."""
    from torchtpu.lowering.core import ARGSORT
    index = bridge.device_index(device)
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    keys = rng_handle(index, RNG_UNIFORM, 1, [n], 0.0, 1.0)
    perm = ir.argsort(keys, dim=0, descending=0)
    dt = tt(dtype if dtype is not None else torch.int64)
    return _result(perm if dt == TT_I64 else ir.convert(perm, dtype=dt))


def _randperm_gen(n, *, generator=None, dtype=torch.int64, layout=None, device=None,
                  pin_memory=None):
    return _randperm(n, dtype=dtype, device=device)


_lib = torch.library.Library("aten", "IMPL")
for _name, _fn in (("randperm", _randperm), ("randperm.generator", _randperm_gen),("arange", _arange), ("arange.start", _arange_start),
                   ("arange.start_step", _arange_start_step), ("linspace", _linspace),
                   ("eye", _eye), ("eye.m", _eye), ("full", _full),
                   ("_efficientzerotensor", _efficientzerotensor),
                   ("scalar_tensor", _scalar_tensor)):
    _lib.impl(_name, _fn, "XLA")


# ------------------------------------------------------------------ prims
# PyTorch's decompositions sometimes emit prims directly.
prims = torch.ops.prims


@lowers(prims.where.default)
def prims_where(cond, a, b):
    from torchtpu.lowering.core import device_of, result_type
    dev = device_of(cond, a, b)
    rt = result_type(a, b)
    return wrap(ir.where(handle(cond, dev, TT_BOOL), handle(a, dev, tt(rt)), handle(b, dev, tt(rt))))


@lowers(prims.convert_element_type.default)
def prims_convert_element_type(x, dtype):
    return wrap(x._h if x._h.dtype == tt(dtype) else ir.convert(x._h, dtype=tt(dtype)))


@lowers(prims.broadcast_in_dim.default)
def prims_broadcast_in_dim(x, shape, broadcast_dimensions):
    # Place x's dims at broadcast_dimensions, size-1 elsewhere, then broadcast.
    inter = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        inter[dst] = x.shape[src]
    return wrap(broadcast(reshape(x._h, inter), shape))


# normal with tensor mean and/or std: mean + std * N(0, 1) on the device.
def _normal_tensors(mean, std, generator=None):
    from torchtpu.lowering.core import device_of, result_type
    dev = device_of(mean, std)
    rt = result_type(mean, std) if any(isinstance(v, torch.Tensor) for v in (mean, std)) \
        else torch.get_default_dtype()
    dt = tt(rt)
    mh, sh = handle(mean, dev, dt), handle(std, dev, dt)
    shape = list(ir.binary(mh, sh, op=BIN["add"]).shape)
    work = dt if dt in (0, 1) else TT_F32
    z = rng_handle(dev, RNG_NORMAL, work, shape, 0.0, 1.0)
    z = z if work == dt else ir.convert(z, dtype=dt)
    return wrap(ir.binary(mh, ir.binary(sh, z, op=BIN["mul"]), op=BIN["add"]))


@lowers(aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor)
def normal_tensor(mean, std=1.0, *, generator=None):
    return _normal_tensors(mean, std)
