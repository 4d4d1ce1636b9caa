"""Fast meta kernels for the in-place elementwise ops optimizers issue.

Before functionalization turns an in-place op on an xla tensor into its
functional form, it rehearses the op on meta tensors to catch errors the
functional form would not raise (a broadcast that grows the written
tensor, a result type it cannot hold). For mul_, add_, sub_, div_, lerp_,
addcmul_ and addcdiv_ that rehearsal runs PyTorch's Python meta kernels
(torch._meta_registrations, built on torch._refs' type promotion and
broadcasting), about 0.1-1 ms of Python an op: two thirds of an AdamW
step's tracing (docs/tensor-bridge.md has the measurements).

The kernels here make the same two checks with eager PyTorch's messages
and return self, as every in-place meta kernel does. They replace the Meta
kernels of these overloads for the whole process (fake tensors included),
which is safe because that is all the Meta kernel of an in-place
elementwise op does.
"""
import warnings

import torch

_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
          torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
          torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool",
          torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble"}


def _fits(shape, into):
    """Whether shape broadcasts to exactly `into` (right-aligned, 1s stretch)."""
    if len(shape) > len(into):
        return False
    off = len(into) - len(shape)
    for i, d in enumerate(shape):
        if d != 1 and d != into[off + i]:
            return False
    return True


def _check(self, result_dtype, *others):
    # torch.broadcast_shapes goes through torch._refs (~0.3 ms): a plain
    # loop on the common path, PyTorch's function only to word an error.
    target = tuple(self.shape)
    for o in others:
        if isinstance(o, torch.Tensor) and not _fits(tuple(o.shape), target):
            shape = torch.broadcast_shapes(self.shape, *[x.shape for x in others
                                                         if isinstance(x, torch.Tensor)])
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the "
                               f"broadcast shape {list(shape)}")
    if result_dtype != self.dtype and not torch.can_cast(result_dtype, self.dtype):
        raise RuntimeError(
            f"result type {_NAMES.get(result_dtype, result_dtype)} can't be cast to the desired "
            f"output type {_NAMES.get(self.dtype, self.dtype)}")
    return self


def _scalar_like(x):
    """A Python number reaches a meta kernel as a 0-dim float64/int64/
    complex128/bool tensor; promote it as the number eager PyTorch saw."""
    if isinstance(x, torch.Tensor) and x.dim() == 0:
        return {torch.float64: 1.0, torch.int64: 1, torch.complex128: 1j,
                torch.bool: True}.get(x.dtype, x)
    return x


def _binary(self, other, alpha=1):
    return _check(self, torch.result_type(self, _scalar_like(other)), other)


def _div(self, other, rounding_mode=None):
    rt = torch.result_type(self, _scalar_like(other))
    if rounding_mode is None and not (rt.is_floating_point or rt.is_complex):
        rt = torch.get_default_dtype()
    return _check(self, rt, other)


def _lerp(self, end, weight):
    return _check(self, self.dtype, end, weight)


def _addc(self, tensor1, tensor2, value=1):
    rt = torch.promote_types(torch.result_type(self, tensor1), torch.result_type(self, tensor2))
    return _check(self, rt, tensor1, tensor2)


_KERNELS = {
    "add_.Tensor": _binary, "add_.Scalar": _binary, "sub_.Tensor": _binary,
    "sub_.Scalar": _binary, "mul_.Tensor": _binary, "mul_.Scalar": _binary,
    "div_.Tensor": _div, "div_.Scalar": _div, "div_.Tensor_mode": _div,
    "div_.Scalar_mode": _div, "lerp_.Scalar": _lerp, "lerp_.Tensor": _lerp,
    "addcmul_": _addc, "addcdiv_": _addc,
}

_lib = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    # The dispatcher notes each override of the Python meta kernels.
    warnings.simplefilter("ignore")
    for _name, _fn in _KERNELS.items():
        _lib.impl(_name, _fn, "Meta")
