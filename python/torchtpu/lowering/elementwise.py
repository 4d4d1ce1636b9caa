"""Elementwise lowerings: unary and binary math, comparisons, where."""
import math

import torch

from torchtpu import bridge, settings, ir
from torchtpu.op_metrics import tensor_counts as _tensor_counts
from torchtpu.lowering.core import (
    BIN, BINARY, CONVERT, UN, UNARY, WHERE, XlaTensor, aten, device_of, float_type_of, handle,
    lowers, refuse_fake, result_type, scalar, tt, wrap, TT_BOOL)


def _binary(name, a, b, compute_dtype=None, out_dtype=None):
    dev = device_of(a, b)
    ct = compute_dtype or result_type(a, b)
    h = ir.binary(handle(a, dev, tt(ct)), handle(b, dev, tt(ct)), op=BIN[name])
    if out_dtype is not None and h.dtype != tt(out_dtype):
        h = ir.convert(h, dtype=tt(out_dtype))
    return wrap(h)


def _on_device(a, b):
    """(a, b) with a CPU tensor operand copied to the other's xla device.

    PyTorch/XLA's binary arithmetic (add, sub, rsub, mul, div, fmod, pow,
    bitwise and/or/xor, shifts) takes a CPU tensor operand this way, so
    `cpu_t + xla_t` and `xla_t + cpu_t` both compute on the device; its other
    ops, like PyTorch's, refuse one (core.cpu_operand). A 0-dim CPU tensor
    stays a scalar, as everywhere.

    A number or 0-dim CPU tensor operand is counted as one xla tensor made
    and destroyed (CreateXlaTensor/DestroyXlaTensor): PyTorch/XLA makes an
    XLATensor of it for the op (`t += 1` destroys two tensors there)."""
    a_xla = type(a) is XlaTensor
    if a_xla != (type(b) is XlaTensor):
        other = b if a_xla else a
        if not isinstance(other, torch.Tensor) or other.dim() == 0:
            _tensor_counts[0] += 1
            _tensor_counts[1] += 1
    if isinstance(a, torch.Tensor) and not isinstance(a, XlaTensor) and a.dim() > 0:
        refuse_fake(a)
        dev = device_of(b)
        if dev is not None:
            a = wrap(bridge.upload(a, dev))
    elif isinstance(b, torch.Tensor) and not isinstance(b, XlaTensor) and b.dim() > 0:
        refuse_fake(b)
        dev = device_of(a)
        if dev is not None:
            b = wrap(bridge.upload(b, dev))
    return a, b


def _unary_h(name, h, alpha=0.0, beta=0.0):
    return ir.unary(h, op=UN[name], alpha=float(alpha), beta=float(beta))


def _unary(name, x, alpha=0.0, beta=0.0, float_op=True):
    dt = float_type_of(x.dtype) if float_op else x.dtype
    return wrap(_unary_h(name, handle(x, x._h.device, tt(dt)), alpha, beta))


# ---------------------------------------------------------------- arithmetic
def _scaled(b, alpha):
    if alpha is None or alpha == 1:
        return b
    if isinstance(b, XlaTensor):
        return _binary("mul", b, alpha)
    if isinstance(b, torch.Tensor):
        b = b.item()
    return b * alpha


@lowers(aten.add.Tensor, aten.add.Scalar)
def add(a, b, alpha=1):
    a, b = _on_device(a, b)
    return _binary("add", a, _scaled(b, alpha), compute_dtype=result_type(a, b))


@lowers(aten.sub.Tensor, aten.sub.Scalar)
def sub(a, b, alpha=1):
    a, b = _on_device(a, b)
    if isinstance(a, torch.Tensor) and a.dtype == torch.bool and isinstance(b, torch.Tensor) \
            and b.dtype == torch.bool:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    return _binary("sub", a, _scaled(b, alpha), compute_dtype=result_type(a, b))


@lowers(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(a, b, alpha=1):
    a, b = _on_device(a, b)
    return _binary("sub", b, _scaled(a, alpha), compute_dtype=result_type(a, b))


@lowers(aten.mul.Tensor, aten.mul.Scalar)
def mul(a, b):
    a, b = _on_device(a, b)
    return _binary("mul", a, b)


@lowers(aten.div.Tensor, aten.div.Scalar)
def div(a, b):
    a, b = _on_device(a, b)
    rt = result_type(a, b)
    return _binary("div", a, b, compute_dtype=float_type_of(rt))


@lowers(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a, b, rounding_mode=None):
    a, b = _on_device(a, b)
    rt = result_type(a, b)
    if rounding_mode is None:
        return div(a, b)
    if rounding_mode == "floor":
        return _binary("floor_div", a, b, compute_dtype=rt)
    if rounding_mode == "trunc":
        if rt.is_floating_point:
            return wrap(_unary_h("trunc", div(a, b)._h))
        q = div(a, b)
        return wrap(ir.convert(_unary_h("trunc", q._h), dtype=tt(rt)))
    raise RuntimeError(
        f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
        f"'{rounding_mode}'")


@lowers(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(a, b):
    return _binary("floor_div", a, b)


@lowers(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(a, b):
    return _binary("remainder", a, b)


@lowers(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(a, b):
    a, b = _on_device(a, b)
    return _binary("fmod", a, b)


@lowers(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(a, b):
    a, b = _on_device(a, b)
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, XlaTensor):
        if b == 1:
            return wrap(handle(a, a._h.device, tt(result_type(a, b))))
        if b == 2:
            return _binary("mul", a, a, compute_dtype=result_type(a, b))
        if b == 0.5 and a.dtype.is_floating_point:
            return _unary("sqrt", a)
    return _binary("pow", a, b)


@lowers(aten.maximum.default)
def maximum(a, b):
    return _binary("maximum", a, b)


@lowers(aten.minimum.default)
def minimum(a, b):
    return _binary("minimum", a, b)


@lowers(aten.atan2.default)
def atan2(a, b):
    return _binary("atan2", a, b, compute_dtype=float_type_of(result_type(a, b)))


@lowers(aten.hypot.default)
def hypot(a, b):
    return _binary("hypot", a, b)


# ------------------------------------------------------------ comparisons
def _compare(name):
    def fn(a, b):
        return _binary(name, a, b, compute_dtype=result_type(a, b))
    return fn


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    lowers(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)(_compare(_name))


def _logical(name):
    def fn(a, b):
        dev = device_of(a, b)
        return wrap(ir.binary(handle(a, dev, TT_BOOL), handle(b, dev, TT_BOOL), op=BIN[name]))
    return fn


for _name in ("logical_and", "logical_or", "logical_xor"):
    lowers(getattr(aten, _name).default)(_logical(_name))


def _bitwise(name):
    def fn(a, b):
        a, b = _on_device(a, b)
        rt = result_type(a, b)
        if rt.is_floating_point:
            raise RuntimeError(f'"{name}_cpu" not implemented for \'{rt}\'')
        return _binary(name, a, b, compute_dtype=rt)
    return fn


for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _p = getattr(aten, _name)
    lowers(_p.Tensor, _p.Scalar)(_bitwise(_name))


def _shift(op, kernel_name):
    """Shifts compute in the promoted integer type; the engine's kernel gives
    ATen's results for shift counts < 0 or >= the type's width (0 for a left
    shift, the sign fill for a right one)."""
    def fn(a, b):
        a, b = _on_device(a, b)
        rt = result_type(a, b)
        if rt.is_floating_point or rt.is_complex or rt == torch.bool:
            name = torch.empty(0, dtype=rt).type().split(".")[-1][:-len("Tensor")]
            raise NotImplementedError(f'"{kernel_name}_cpu" not implemented for \'{name}\'')
        return _binary(op, a, b, compute_dtype=rt)
    return fn


lowers(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
       aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor, aten.__lshift__.Scalar,
       torch.ops.prims.shift_left.default)(_shift("shift_left", "lshift"))
lowers(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
       aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar,
       torch.ops.prims.shift_right_arithmetic.default)(_shift("shift_right", "rshift"))


@lowers(aten.where.self)
def where(cond, a, b):
    dev = device_of(cond, a, b)
    rt = result_type(a, b)
    return wrap(ir.where(handle(cond, dev, TT_BOOL), handle(a, dev, tt(rt)), handle(b, dev, tt(rt))))


@lowers(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    dev = x._h.device
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.dim()} dimension(s).")
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{mask.dtype}")
    h = ir.where(handle(mask, dev, TT_BOOL), handle(value, dev, x._h.dtype), x._h)
    return wrap(h)


@lowers(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    args = [a for a in (x, min, max) if a is not None]
    rt = result_type(*args)
    dev = x._h.device
    h = handle(x, dev, tt(rt))
    # maximum/minimum propagate NaN (from x or a bound), as clamp does.
    if min is not None:
        h = ir.binary(h, handle(min, dev, tt(rt)), op=BIN["maximum"])
    if max is not None:
        h = ir.binary(h, handle(max, dev, tt(rt)), op=BIN["minimum"])
    return wrap(h)


@lowers(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):
    return clamp(x, min=min)


@lowers(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):
    return clamp(x, max=max)


# ------------------------------------------------------------------ unary
_FLOAT_UNARY = ["exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
                "sigmoid", "erf", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                "atanh", "log2", "log10", "exp2", "erfinv", "reciprocal", "lgamma", "digamma"]
for _name in _FLOAT_UNARY:
    lowers(getattr(aten, _name).default)(
        (lambda n: (lambda x: _unary(n, x)))(_name))

for _name in ("neg", "abs", "relu", "sign"):
    lowers(getattr(aten, _name).default)(
        (lambda n: (lambda x: _unary(n, x, float_op=False)))(_name))


for _name in ("floor", "ceil", "trunc", "round"):
    def _fn(x, n=_name):
        if not x.dtype.is_floating_point:
            return wrap(x._h)
        return _unary(n, x, float_op=False)
    lowers(getattr(aten, _name).default)(_fn)


@lowers(aten.round.decimals)
def round_decimals(x, decimals=0):
    if decimals == 0:
        return _unary("round", x, float_op=False)
    scale = 10.0 ** decimals
    y = _binary("mul", x, scale)
    y = wrap(_unary_h("round", y._h))
    return _binary("div", y, scale, compute_dtype=x.dtype)


@lowers(aten.square.default)
def square(x):
    rt = torch.int64 if x.dtype == torch.bool else x.dtype
    return _binary("mul", x, x, compute_dtype=rt)


@lowers(aten.logical_not.default)
def logical_not(x):
    return wrap(_unary_h("logical_not", x._h))


@lowers(aten.isnan.default)
def isnan(x):
    if not x.dtype.is_floating_point:
        return wrap(ir.binary(x._h, x._h, op=BIN["ne"]))
    return wrap(_unary_h("isnan", x._h))


@lowers(aten.bitwise_not.default)
def bitwise_not(x):
    if x.dtype.is_floating_point:
        raise RuntimeError(f"\"bitwise_not_cpu\" not implemented for '{x.dtype}'")
    return wrap(_unary_h("bitwise_not", x._h))


# TORCHTPU_GELU_FROM_OUTPUT=0: gelu_backward always recomputes erf(x).
_GELU_FROM_OUTPUT = settings.GELU_FROM_OUTPUT


@lowers(aten.gelu.default)
def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate}")
    y = _unary("gelu_tanh" if approximate == "tanh" else "gelu_erf", x)
    if (approximate == "none" and _GELU_FROM_OUTPUT and x.dtype == torch.float32 and
            torch.is_grad_enabled()):
        # Training: the backward needs Phi(x), which y = x * Phi(x) holds
        # (gelu_backward below reads x._gelu_out instead of another erf).
        x._gelu_out = y._h
    return y


@lowers(aten.silu.default)
def silu(x):
    return _unary("silu", x)


@lowers(aten.mish.default)
def mish(x):
    return _unary("mish", x)


@lowers(aten.leaky_relu.default)
def leaky_relu(x, negative_slope=0.01):
    return _unary("leaky_relu", x, negative_slope)


@lowers(aten.elu.default)
def elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale == 1.0 and input_scale == 1.0:
        return _unary("elu", x, alpha)
    # selu and friends: scale * (x > 0 ? x : alpha * (exp(x * input_scale) - 1))
    dev = x._h.device
    dt = tt(float_type_of(x.dtype))
    h = handle(x, dev, dt)
    neg = ir.binary(ir.unary(ir.binary(h, scalar(dev, dt, input_scale), op=BIN["mul"]), op=UN["expm1"], alpha=0.0, beta=0.0), scalar(dev, dt, alpha), op=BIN["mul"])
    pos = ir.binary(h, scalar(dev, dt, 0), op=BIN["gt"])
    y = ir.where(pos, h, neg)
    return wrap(ir.binary(y, scalar(dev, dt, scale), op=BIN["mul"]))


@lowers(aten.hardtanh.default)
def hardtanh(x, min_val=-1.0, max_val=1.0):
    return _unary("hardtanh", x, min_val, max_val, float_op=False)


@lowers(aten.softplus.default)
def softplus(x, beta=1.0, threshold=20.0):
    return _unary("softplus", x, beta, threshold)


@lowers(aten.hardsigmoid.default)
def hardsigmoid(x):
    return _unary("hardsigmoid", x)


@lowers(aten.hardswish.default)
def hardswish(x):
    return _unary("hardswish", x)


# Backward helpers that appear in every training step: lowered directly so
# they stay one or two kernels.
@lowers(aten.threshold_backward.default)
def threshold_backward(grad, x, threshold):
    dev = grad._h.device
    mask = ir.binary(handle(x, dev, x._h.dtype), scalar(dev, x._h.dtype, threshold), op=BIN["le"])
    return wrap(ir.where(mask, scalar(dev, grad._h.dtype, 0), grad._h))


@lowers(aten.sigmoid_backward.default)
def sigmoid_backward(grad, y):
    dev = grad._h.device
    one_minus = ir.binary(scalar(dev, y._h.dtype, 1.0), y._h, op=BIN["sub"])
    return wrap(ir.binary(grad._h, ir.binary(y._h, one_minus, op=BIN["mul"]), op=BIN["mul"]))


@lowers(aten.tanh_backward.default)
def tanh_backward(grad, y):
    dev = grad._h.device
    y2 = ir.binary(y._h, y._h, op=BIN["mul"])
    return wrap(ir.binary(grad._h, ir.binary(scalar(dev, y._h.dtype, 1.0), y2, op=BIN["sub"]), op=BIN["mul"]))


_ = math


@lowers(torch.ops.prims.erfc.default, aten.erfc.default)
def erfc(x):
    dev = x._h.device
    dt = tt(float_type_of(x.dtype))
    return wrap(ir.binary(scalar(dev, dt, 1.0), _unary_h("erf", handle(x, dev, dt)), op=BIN["sub"]))


# ------------------------------------------------ optimizer-style fused ops
# lerp / addcmul / addcdiv natively: PyTorch's decompositions (torch._refs)
# cost about a millisecond of Python each, and an Adam step issues one per
# parameter. Half types compute in float32 and round once, as CPU's kernels.
def _opmath_tt(dtype):
    return tt(torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype)


def _decomposed(func, *args, **kwargs):
    from torch._decomp import decomposition_table
    return decomposition_table[func](*args, **kwargs)


def _finish(h, dtype):
    return wrap(h if h.dtype == tt(dtype) else ir.convert(h, dtype=tt(dtype)))


def addc_h(name, s, a, b, value, make_scalar):
    """s + value * (a <name> b) on handles of one dtype, as addcmul ("mul")
    and addcdiv ("div") record it; make_scalar(v) gives v's scalar handle.
    Shared with the Adam update recorded on handles (torchtpu/optim_foreach.py)."""
    prod = ir.binary(a, b, op=BIN[name])
    if value != 1:
        prod = ir.binary(make_scalar(value), prod, op=BIN["mul"])
    return ir.binary(s, prod, op=BIN["add"])


def lerp_scalar_h(s, e, w, make_scalar):
    """lerp(s, e, w) for a Python weight w on handles, as lerp.Scalar records it."""
    diff = ir.binary(e, s, op=BIN["sub"])
    if abs(w) < 0.5:  # s + w * (e - s)
        return ir.binary(s, ir.binary(make_scalar(w), diff, op=BIN["mul"]), op=BIN["add"])
    # e - (e - s) * (1 - w)
    return ir.binary(e, ir.binary(diff, make_scalar(1.0 - w), op=BIN["mul"]), op=BIN["sub"])


def _addc_impl(func, name):
    def fn(self, tensor1, tensor2, *, value=1):
        rt = result_type(self, tensor1, tensor2)
        if not rt.is_floating_point:
            return _decomposed(func, self, tensor1, tensor2, value=value)
        dev = device_of(self, tensor1, tensor2)
        ct = _opmath_tt(rt)
        a, b = handle(tensor1, dev, ct), handle(tensor2, dev, ct)
        return _finish(addc_h(name, handle(self, dev, ct), a, b, value,
                              lambda v: scalar(dev, ct, v)), rt)
    return fn


lowers(aten.addcmul.default)(_addc_impl(aten.addcmul.default, "mul"))
lowers(aten.addcdiv.default)(_addc_impl(aten.addcdiv.default, "div"))


def _lerp(func):
    def fn(self, end, weight):
        if not (isinstance(self, torch.Tensor) and isinstance(end, torch.Tensor)) or \
                self.dtype != end.dtype or not self.dtype.is_floating_point or \
                (isinstance(weight, torch.Tensor) and weight.dtype != self.dtype):
            return _decomposed(func, self, end, weight)
        dev = device_of(self, end)
        ct = _opmath_tt(self.dtype)
        s, e = handle(self, dev, ct), handle(end, dev, ct)
        if not isinstance(weight, torch.Tensor):
            return _finish(lerp_scalar_h(s, e, float(weight), lambda v: scalar(dev, ct, v)),
                           self.dtype)
        diff = ir.binary(e, s, op=BIN["sub"])
        w = handle(weight, dev, ct)
        lo = ir.binary(s, ir.binary(w, diff, op=BIN["mul"]), op=BIN["add"])
        one_minus = ir.binary(scalar(dev, ct, 1.0), w, op=BIN["sub"])
        hi = ir.binary(e, ir.binary(diff, one_minus, op=BIN["mul"]), op=BIN["sub"])
        small = ir.binary(_unary_h("abs", w), scalar(dev, ct, 0.5), op=BIN["lt"])
        return _finish(ir.where(small, lo, hi), self.dtype)
    return fn


lowers(aten.lerp.Scalar)(_lerp(aten.lerp.Scalar))
lowers(aten.lerp.Tensor)(_lerp(aten.lerp.Tensor))


@lowers(aten.gelu_backward.default)
def gelu_backward(grad, x, approximate="none"):
    """d/dx gelu, computed in float32 for half types (one rounding):
    exact: 0.5 * (1 + erf(x / sqrt 2)) + x * exp(-x^2 / 2) / sqrt(2 pi);
    tanh: with u = sqrt(2/pi) * (x + 0.044715 x^3), t = tanh(u):
    0.5 * (1 + t) + 0.5 * x * (1 - t^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2)."""
    rt = result_type(grad, x)
    if not rt.is_floating_point:
        return _decomposed(aten.gelu_backward.default, grad, x, approximate=approximate)
    dev = device_of(grad, x)
    ct = _opmath_tt(rt)
    g, h = handle(grad, dev, ct), handle(x, dev, ct)

    def mul(a, b):
        return ir.binary(a, b, op=BIN["mul"])

    def add(a, b):
        return ir.binary(a, b, op=BIN["add"])

    def c(v):
        return scalar(dev, ct, v)
    x2 = mul(h, h)
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        u = mul(c(k), add(h, mul(c(0.044715), mul(x2, h))))
        t = _unary_h("tanh", u)
        left = mul(c(0.5), add(c(1.0), t))
        one_minus_t2 = ir.binary(c(1.0), mul(t, t), op=BIN["sub"])
        du = mul(c(k), add(c(1.0), mul(c(3 * 0.044715), x2)))
        d = add(left, mul(mul(c(0.5), h), mul(one_minus_t2, du)))
    else:
        y = getattr(x, "_gelu_out", None)
        if y is not None and y.dtype == ct and tuple(y.shape) == tuple(h.shape):
            # Phi(x) = y / x from the forward's output: a divide instead of
            # erf's rational function, and the same cancellation as the
            # forward's 0.5 * (1 + erf) where x is very negative. Where x
            # is too small for the quotient (0, subnormals) Phi is 0.5 to
            # float precision.
            tiny = ir.binary(_unary_h("abs", h), c(1e-20), op=BIN["lt"])
            cdf = ir.where(tiny, c(0.5), ir.binary(y, h, op=BIN["div"]))
        else:
            cdf = mul(c(0.5), add(c(1.0), _unary_h("erf", mul(h, c(1.0 / math.sqrt(2.0))))))
        pdf = mul(_unary_h("exp", mul(x2, c(-0.5))), c(1.0 / math.sqrt(2.0 * math.pi)))
        d = add(cdf, mul(h, pdf))
    return _finish(mul(g, d), rt)


@lowers(aten.angle.default)
def angle(x):
    """angle of a real tensor: pi where x < 0, else 0; NaN stays NaN."""
    dt = tt(float_type_of(x.dtype))
    dev = x._h.device
    h = handle(x, dev, dt)
    neg = ir.binary(h, scalar(dev, dt, 0), op=BIN["lt"])
    out = ir.where(neg, scalar(dev, dt, math.pi), scalar(dev, dt, 0))
    nan = ir.unary(h, op=UN["isnan"], alpha=0.0, beta=0.0)
    return wrap(ir.where(nan, h, out))
