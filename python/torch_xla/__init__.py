"""PyTorch/XLA's Python API, served by the torchtpu engine.

Same module paths and names as PyTorch/XLA: torch_xla.device(),
torch_xla.sync(), torch_xla.step(), torch_xla.core.xla_model,
torch_xla.runtime, torch_xla.debug.metrics, ...
"""
import contextlib

import torch

import torchtpu  # noqa: F401  (loads the engine, registers the xla device)
from torchtpu import _C, bridge, config
from torchtpu.lowering import misc_ops as _rng

__version__ = "2.9.0+torchtpu"


def device(index=None):
    """The xla device with the given index (the current one if None)."""
    config.ensure_runtime()
    if index is None:
        index = bridge.current_device_index()
    n = _C.device_count()
    if not isinstance(index, int) or index < 0 or index >= n:
        raise RuntimeError(
            f"Invalid device index {index}: {n} xla device(s) available (xla:0..xla:{n - 1}); "
            "set CPU_NUM_DEVICES for more")
    return torch.device("xla", index)


def devices():
    """All addressable xla devices."""
    return [torch.device("xla", i) for i in range(config.ensure_runtime())]


def device_count():
    return config.ensure_runtime()


def real_devices():
    """Runtime device names, e.g. ['CPU:0', 'CPU:1']."""
    return [f"{config.device_type()}:{i}" for i in range(config.ensure_runtime())]


def sync(wait=False, reset_scope=True):
    """Cuts the graph of every live tensor with pending work, compiles (or
    fetches from the cache) and queues it; with wait=True also blocks until
    the device is done. Runs step closures afterwards."""
    from torch_xla.core import xla_model as xm
    config.ensure_runtime()
    _C.counter_add("MarkStep", 1)
    _C.sync(-1, bool(wait), None)
    xm._run_step_closures()


@contextlib.contextmanager
def step():
    """Marks one training step: pending work is synced before the body, and
    the body's graph is cut and queued when it exits."""
    sync()
    try:
        yield
    finally:
        sync()


def manual_seed(seed, device=None):
    """Seeds the device RNG (dropout, rand/randn on xla)."""
    config.ensure_runtime()
    _rng.manual_seed(seed, None if device is None else bridge.device_index(device))


def compile(fn=None, full_graph=False, name=None, max_different_graphs=None):
    """Traces fn (or the `with` body) as one graph: pending work is synced
    before, and the traced region is synced after."""
    if fn is None:
        @contextlib.contextmanager
        def ctx():
            sync()
            try:
                yield
            finally:
                sync()
        return ctx()

    def wrapped(*args, **kwargs):
        sync()
        out = fn(*args, **kwargs)
        sync()
        return out
    wrapped.__wrapped__ = fn
    return wrapped


def is_xla_tensor(t):
    return isinstance(t, torch.Tensor) and t.device.type == "xla"


from torch_xla import runtime  # noqa: E402,F401
from torch_xla.core import xla_model  # noqa: E402,F401
