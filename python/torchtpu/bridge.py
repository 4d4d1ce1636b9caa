"""The tensor bridge: how an 'xla' torch.Tensor maps onto an engine tensor.

Layout of an xla tensor as users hold it (docs/tensor-bridge.md has the
evidence for this choice):

  outer: FunctionalTensorWrapper (PyTorch's functionalization, C++)
         device xla:N, carries autograd metadata; views and in-place ops
         on it are turned into functional ops plus view replay, which is
         exactly the aliasing PyTorch promises (PyTorch/XLA does the same).
  inner: XlaTensor, a _make_wrapper_subclass with device xla:N that holds
         one engine handle (torchtpu._C.Tensor). Every aten op reaching it
         goes through __torch_dispatch__ to the lowering table.

PyTorch has no device guard for the XLA device type; autograd needs one.
torch._C._acc lets Python register a guard whose type() is chosen by
type_(), but only into the PrivateUse1 slot, so we register one reporting
XLA and move it into the XLA slot of c10's guard registry (ctypes). The
autograd engine sizes its per-device threads from guards present at its
first backward; to stay independent of that we run backward passes on the
calling thread (autograd multithreading off), which is also what a lazy
engine wants: the graph is recorded in program order.
"""
import ctypes
import os
import threading

import torch

from torchtpu import _C, config, op_metrics

# ---------------------------------------------------------------- dtypes
# The engine's dtype codes (tt_dtype_t), by PyTorch's names.
_TT_DTYPE = _C.enums()["dtype"]
TT_F32, TT_F64, TT_F16, TT_BF16, TT_I8, TT_U8, TT_I16, TT_I32, TT_I64, TT_BOOL, TT_C64 = (
    _TT_DTYPE[n] for n in ("float32", "float64", "float16", "bfloat16", "int8", "uint8",
                           "int16", "int32", "int64", "bool", "complex64"))

TORCH_TO_TT = {
    torch.float32: TT_F32, torch.float64: TT_F64, torch.float16: TT_F16,
    torch.bfloat16: TT_BF16, torch.int8: TT_I8, torch.uint8: TT_U8,
    torch.int16: TT_I16, torch.int32: TT_I32, torch.int64: TT_I64, torch.bool: TT_BOOL,
    torch.complex64: TT_C64,
}
TT_TO_TORCH = {v: k for k, v in TORCH_TO_TT.items()}
# The torch dtype whose element layout each device code has (host copies
# read and write these); TT_TO_TORCH is the dtype PyTorch sees, which
# differs under XLA_USE_BF16 / XLA_DOWNCAST_BF16 (device_dtypes.py).
TT_STORAGE_TORCH = dict(TT_TO_TORCH)

# TORCH_TO_TT once the switches above are read: empty until the first
# dtype is mapped, so tt_dtype reads them then at no cost afterwards.
_TT_OF = {}

# Set once the process has made a complex xla tensor (or asked for one):
# from then on dispatch checks each op for complex operands and sends those
# to the complex lowerings (lowering/complex_ops.py). Programs without
# complex values never pay for the check.
complex_in_use = [False]


def tt_dtype(dtype):
    """The device dtype code of a torch dtype (TypeError if unsupported)."""
    try:
        return _TT_OF[dtype]
    except KeyError:
        pass
    if not _TT_OF:
        from torchtpu import device_dtypes
        device_dtypes.apply(TORCH_TO_TT, TT_TO_TORCH, TT_F64, TT_F32, TT_BF16)
        _TT_OF.update(TORCH_TO_TT)
        if dtype in _TT_OF:
            return _TT_OF[dtype]
    raise TypeError(f"dtype {dtype} is not supported on xla devices "
                    f"(supported: {', '.join(str(d) for d in TORCH_TO_TT)})")


def _refuse_disabled_functionalization():
    """The layout above is functionalization's: without it views and
    in-place ops would reach the engine, which has no aliasing storage."""
    if os.environ.get("XLA_DISABLE_FUNCTIONALIZATION", "0").strip().lower() in (
            "1", "true", "yes", "on"):
        raise RuntimeError(
            "XLA_DISABLE_FUNCTIONALIZATION=1 is not supported by this engine: xla tensors are "
            "always functionalized (docs/tensor-bridge.md); unset the variable")


_refuse_disabled_functionalization()


# ---------------------------------------------------------- device guard
_XLA_SLOT = 9          # c10::DeviceType::XLA
_PRIVATEUSE1_SLOT = 20  # c10::DeviceType::PrivateUse1


class _XlaDeviceGuard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.XLA


_guard = None


def _install_device_guard():
    global _guard
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
    registry = ctypes.c_void_p.in_dll(lib, "_ZN3c104impl26device_guard_impl_registryE")
    base = ctypes.addressof(registry)

    def slot(i):
        return ctypes.c_void_p.from_address(base + 8 * i)

    if slot(_XLA_SLOT).value:
        return  # someone (a real torch_xla build) already provides one
    saved = slot(_PRIVATEUSE1_SLOT).value
    _guard = _XlaDeviceGuard()
    torch._C._acc.register_python_privateuseone_device_guard(_guard)
    slot(_XLA_SLOT).value = slot(_PRIVATEUSE1_SLOT).value
    slot(_PRIVATEUSE1_SLOT).value = saved


_install_device_guard()


def _single_threaded_autograd():
    torch._C._set_multithreading_enabled(False)


_single_threaded_autograd()
_thread_state = threading.local()


# ------------------------------------------------------- the inner tensor
def device_index(device):
    """Index of an xla device given as torch.device, str or None."""
    if device is None:
        return current_device_index()
    if isinstance(device, str):
        device = torch.device(device)
    if device.type != "xla":
        raise RuntimeError(f"expected an xla device, got {device}")
    if device.index is None:
        return current_device_index()
    n = config.ensure_runtime()
    if device.index >= n:
        raise RuntimeError(
            f"Invalid device xla:{device.index}: {n} device(s) available "
            f"(xla:0..xla:{n - 1}); set CPU_NUM_DEVICES for more")
    return device.index


def current_device_index():
    config.ensure_runtime()
    return getattr(_thread_state, "device", 0)


def set_current_device_index(index):
    _thread_state.device = index


# Per-op constants of XlaTensor creation, looked up once: every op result
# is a new XlaTensor, so this is the hottest Python in the engine.
_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass
_COMPLEX64 = torch.complex64
_DEVICES = []


def _device_object(index):
    while len(_DEVICES) <= index:
        _DEVICES.append(torch.device("xla", len(_DEVICES)))
    return _DEVICES[index]


_now_ns = op_metrics.now_ns
_record_op = op_metrics.record_op
_tensor_counts = op_metrics.tensor_counts  # CreateXlaTensor/DestroyXlaTensor


def _load_dispatch(func, args, kwargs):
    from torchtpu.lowering import dispatch
    _dispatch_fn[0] = dispatch
    return dispatch(func, args, kwargs)


# The lowering table's entry point (imported on first use: the lowering
# package imports this module).
_dispatch_fn = [_load_dispatch]


class XlaTensor(torch.Tensor):
    """Inner tensor: holds an engine handle; never seen by user code."""

    __slots__ = ("_h",)

    @staticmethod
    def __new__(cls, handle, requires_grad=False):
        dtype = TT_TO_TORCH[handle.dtype]
        if dtype is _COMPLEX64:
            complex_in_use[0] = True
        index = handle.device
        try:
            device = _DEVICES[index]
        except IndexError:
            device = _device_object(index)
        r = _make_wrapper_subclass(cls, handle.shape, dtype=dtype, device=device,
                                   requires_grad=requires_grad)
        r._h = handle
        _tensor_counts[0] += 1
        return r

    def __del__(self, _counts=_tensor_counts):
        # Bound as a default: module globals may be gone at interpreter exit.
        _counts[1] += 1

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Counted and timed as PyTorch/XLA counts its ops (xla::<op>,
        # LazyTracing): torchtpu/op_metrics.py.
        t0 = _now_ns()
        out = _dispatch_fn[0](func, args, kwargs or {})
        _record_op(func, _now_ns() - t0)
        return out

    def __repr__(self):
        return f"XlaTensor(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"


def wrap_inner(handle):
    return XlaTensor(handle)


def wrap_user(handle):
    """A user-facing xla tensor (functional wrapper) over an engine handle."""
    return torch._to_functional_tensor(XlaTensor(handle))


def inner_of(t):
    """The XlaTensor under a user-facing xla tensor (syncing pending view
    updates first)."""
    if isinstance(t, XlaTensor):
        return t
    if torch._is_functional_tensor(t):
        torch._sync(t)
        inner = torch._from_functional_tensor(t)
        if isinstance(inner, XlaTensor):
            return inner
    raise RuntimeError(f"expected an xla tensor, got a tensor on {t.device}")


def handle_of(t):
    return inner_of(t)._h


def upload(cpu_tensor, index, defer=False):
    """Copies a CPU tensor to device index; returns an engine handle.
    defer: in SPMD mode the engine keeps the copy on the host until an op
    reads it or it is sharded (PyTorch/XLA's virtual device does so with
    data copied to it); the transfer and its metrics happen then."""
    c = cpu_tensor.detach()
    if c.dtype not in TORCH_TO_TT:
        raise TypeError(f"dtype {c.dtype} is not supported on xla devices")
    dt = tt_dtype(c.dtype)
    if TT_STORAGE_TORCH[dt] is not c.dtype:  # XLA_USE_BF16 and friends
        c = c.to(TT_STORAGE_TORCH[dt])
    c = c.contiguous()
    if c.is_conj() or c.is_neg():
        c = c.resolve_conj().resolve_neg()
    nbytes = c.numel() * c.element_size()
    t0 = _now_ns()
    h = _C.from_host(index, dt, tuple(c.shape), c.data_ptr(), nbytes, defer)
    # PyTorch/XLA's name for a host tensor becoming device data (the engine
    # records the transfer itself: OutboundData, CreateDataHandles; and
    # TensorToData too for a held value, when it moves).
    if not (defer and h.on_host):
        _C.metric_add("TensorToData", 0, float(_now_ns() - t0))
    return h


# Set by torchtpu.modes: called as on_download(handle) before a value is
# read to the host (full_graph regions refuse reads that would execute;
# the dynamo bridge counts reads while tracing). None when unused.
on_download = None


def download(handle):
    """Runs what handle needs and returns its value as a CPU tensor."""
    if on_download is not None:
        on_download(handle)
    # Shards of other processes' devices come over their all-gather.
    from torchtpu import spmd_read
    handle = spmd_read.gathered(handle)
    out = torch.empty(handle.shape, dtype=TT_STORAGE_TORCH[handle.dtype])
    # The engine records a read from the device (InboundData); a value
    # still held on the host is copied from there.
    _C.to_host(handle, out.data_ptr(), out.numel() * out.element_size())
    seen = TT_TO_TORCH[handle.dtype]
    return out if seen is out.dtype else out.to(seen)


# ------------------------------------------------- factory kernels on XLA
_lib = torch.library.Library("aten", "IMPL")


def want_inner():
    """True below functionalization (the Functionalize key excluded): inside
    our __torch_dispatch__ under it, and in torch.tensor()'s builder (which
    excludes Functionalize and Python together, then lifts the result: the
    lift_fresh lowering wraps that inner tensor, as PyTorch/XLA's lift_fresh
    does). There an op returns the inner tensor; at top level the
    user-facing functional wrapper."""
    excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
    return excluded(torch._C.DispatchKey.Functionalize)


def wrap_result(handle):
    return XlaTensor(handle) if want_inner() else wrap_user(handle)


def replace_value(dst, handle):
    """Makes dst (an xla tensor, wrapped or inner) hold handle: the one
    place an inner tensor changes value, used by out= factories and copies
    that reach the XLA key directly."""
    inner = dst
    if torch._is_functional_tensor(dst):
        torch._sync(dst)
        inner = torch._from_functional_tensor(dst)
    if not isinstance(inner, XlaTensor):
        raise RuntimeError(f"expected an xla tensor as the destination, got one on {dst.device}")
    if handle.dtype != inner._h.dtype:
        from torchtpu import ir
        handle = ir.convert(handle, dtype=inner._h.dtype)
    if tuple(handle.shape) != tuple(inner.shape):
        if _numel(handle.shape) != _numel(inner.shape):
            # PyTorch would resize out=; a tensor's shape is fixed here.
            raise RuntimeError(f"out tensor of shape {tuple(inner.shape)} cannot hold a result "
                               f"of shape {tuple(handle.shape)}")
        from torchtpu import ir
        handle = ir.reshape(handle, dims=tuple(inner.shape))
    inner._h = handle
    return dst


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _empty_handle(size, dtype, device):
    dtype = dtype if dtype is not None else torch.get_default_dtype()
    index = device_index(device)
    dt = tt_dtype(dtype)
    if dt == TT_C64:
        from torchtpu.lowering.complex_ops import factory_value
        return factory_value(dtype, 0, index, [int(s) for s in size])
    zero = _C.scalar(index, dt, 0)
    from torchtpu import ir
    return ir.broadcast(zero, dims=tuple(int(s) for s in size))


# Set by torchtpu.modes while eager mode is in effect, called with each
# empty's result: PyTorch/XLA's empty is a zero fill, and its eager mode runs
# that fill at once like any op (torch.randn(..., device=xla) runs two graphs
# there, torch.tensor(..., device=xla) one). None costs one global read.
on_empty = None


def _empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None,
                         memory_format=None):
    out = wrap_result(_empty_handle(size, dtype, device))
    if on_empty is not None:
        on_empty(out)
    return out


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    out = wrap_result(_empty_handle(size, dtype, device))
    if on_empty is not None:
        on_empty(out)
    return out


def _copy_from_xla_key(src, dst, non_blocking=False):
    """Copies reaching the XLA key directly (the Python key excluded, as
    torch.tensor(..., device='xla') does while it builds its result)."""
    index = inner_of(dst)._h.device
    if isinstance(src, torch.Tensor) and src.device.type == "xla":
        h = handle_of(src)
        if h.device != index:
            h = _C.to_device(h, index)
    else:
        h = upload(src, index, defer=True)
    if tuple(h.shape) != tuple(dst.shape):
        from torchtpu import ir
        h = ir.broadcast(h, dims=tuple(dst.shape))
    return replace_value(dst, h)


_lib.impl("empty.memory_format", _empty_memory_format, "XLA")
_lib.impl("empty_strided", _empty_strided, "XLA")
_lib.impl("_copy_from", _copy_from_xla_key, "XLA")

