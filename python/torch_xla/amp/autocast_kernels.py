"""Kernels for PyTorch's AutocastXLA dispatch key.

torch.autocast('xla') only turns the AutocastXLA key on; what happens at
that key is up to the backend (PyTorch/XLA registers C++ kernels). Here:
a fallthrough for every op (so ops outside the policy dispatch on as if
autocast were off) and, for each op in autocast_policy.POLICY, a kernel
that casts the op's eligible tensor arguments and calls the op again with
autocast off for its duration (as at::autocast's kernels exclude the key),
so the ops it decomposes into are not cast a second time.

Eligible arguments, as in at::autocast: xla tensors of a floating dtype
other than float64, alone or inside a list argument. Registered once, on
`import torch_xla`.
"""
import torch

from torch_xla.amp import autocast_policy as policy

_KEY = "AutocastXLA"
_libs = []


def _eligible(t):
    return (isinstance(t, torch.Tensor) and t.device.type == "xla" and t.is_floating_point()
            and t.dtype is not torch.float64)


def _cast(value, dtype):
    if _eligible(value):
        return value if value.dtype is dtype else value.to(dtype)
    if isinstance(value, (list, tuple)) and any(_eligible(v) for v in value):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _widest(args, kwargs, start):
    dtype = start
    for v in list(args) + list(kwargs.values()):
        items = v if isinstance(v, (list, tuple)) else (v,)
        for t in items:
            if _eligible(t):
                dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _make_kernel(op, rule):
    def kernel(*args, **kwargs):
        lower = torch.get_autocast_dtype("xla")
        if rule == policy.LOWER:
            dtype = lower
        elif rule == policy.FP32:
            dtype = torch.float32
        else:
            dtype = _widest(args, kwargs, lower)
        args = tuple(_cast(a, dtype) for a in args)
        kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
        torch.set_autocast_enabled("xla", False)
        try:
            return op(*args, **kwargs)
        finally:
            torch.set_autocast_enabled("xla", True)
    return kernel


def _overload(name):
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def register():
    """Registers the fallthrough and the policy kernels (idempotent)."""
    if _libs:
        return
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, _KEY)
    kernels = torch.library.Library("aten", "IMPL")
    for name, rule in policy.POLICY.items():
        op = _overload(name)
        if op is None:
            continue  # not in this PyTorch build
        kernels.impl(name, _make_kernel(op, rule), _KEY)
    _libs.extend([fallback, kernels])
