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

from torch_xla.version import __version__  # noqa: E402,F401  (the API level; see version.py)


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


def _reapply_spmd_annotations():
    """In SPMD mode, annotations follow in-place updates (optimizer steps)
    onto the values a sync computes: their layouts stay fixed from step to
    step (one compile), and the partitioned programs keep them sharded."""
    from torch_xla import runtime as xr
    if xr.is_spmd():
        from torch_xla.distributed.spmd import annotations
        annotations.reapply_shardings()


def sync(wait=False, reset_scope=True):
    """Cuts the graph of every live tensor with pending work, compiles (or
    fetches from the cache) and queues it; with wait=True also blocks until
    the device is done. Runs step closures afterwards."""
    from torch_xla.core import xla_model as xm
    from torchtpu import replicas
    config.ensure_runtime()
    _C.counter_add("MarkStep", 1)
    _reapply_spmd_annotations()
    # A replica of a launch syncs its own device; its peers sync theirs.
    _C.sync(replicas.sync_device(), bool(wait), None)
    xm._run_step_closures()


def step():
    """Marks one training step: pending work is synced before the body, and
    the body, traced lazily even in eager mode, is cut and queued when it
    exits. As in PyTorch/XLA, this is torch_xla.compile() as a context."""
    return compile()


def manual_seed(seed, device=None):
    """Seeds the device RNG (dropout, rand/randn on xla)."""
    config.ensure_runtime()
    _rng.manual_seed(seed, None if device is None else bridge.device_index(device))


def _sync_named(name):
    """torch_xla.sync() whose graph is labelled name in metrics and debug
    output."""
    from torch_xla.core import xla_model as xm
    from torchtpu import replicas
    config.ensure_runtime()
    _C.counter_add("MarkStep", 1)
    _reapply_spmd_annotations()
    _C.sync(replicas.sync_device(), False, name)
    xm._run_step_closures()


def compile(fn=None, full_graph=False, name=None, max_different_graphs=None,
            custom_compile_options=None):
    """Traces fn (or the body of `with torch_xla.compile():`) lazily as one
    graph and runs it, as PyTorch/XLA does.

    Usable as a decorator (@torch_xla.compile or @torch_xla.compile(...)),
    a wrapper (torch_xla.compile(fn)) or a context manager. Pending work is
    synced before the region (labelled name + '_clear_pending'), eager mode
    is suspended inside it, and its graph is cut and queued at the end
    (labelled name, which defaults to fn's name and appears in the metrics
    as CompiledRegion_<name> / CompiledRegionTime_<name> and in PT_XLA_DEBUG
    output).

    full_graph=True: anything in the region that would run the graph before
    the region ends (.item(), print, .cpu()) raises RuntimeError naming the
    line. max_different_graphs=N: fn may trace at most N distinct graphs
    (op sequences, shapes included) over its calls; one more raises
    RuntimeError naming the first op that differed. custom_compile_options:
    XLA compiler flag overrides, as set_custom_compile_options (torch_xla.py).
    """
    if custom_compile_options is not None:
        set_custom_compile_options(custom_compile_options)
    if max_different_graphs is not None and (
            not isinstance(max_different_graphs, int) or max_different_graphs < 1):
        raise ValueError(f"max_different_graphs must be a positive int or None, "
                         f"got {max_different_graphs!r}")
    import functools
    import sys
    import time
    import uuid
    import weakref
    from torchtpu import modes

    if name is None and fn is not None:
        name = getattr(fn, "__name__", None) or type(fn).__name__
    if fn is not None:
        session_key = f"{name}_{id(fn)}"
        try:
            weakref.finalize(fn, modes.forget_session, session_key)
        except TypeError:
            pass  # not weak-referenceable: the session lives on
    else:
        session_key = str(uuid.uuid4())

    @contextlib.contextmanager
    def region():
        # Both syncs run with eager mode off, as PyTorch/XLA's: their
        # graphs are sampled in CompileTime/ExecuteTime, not the Eager* ones.
        with modes.suspend_eager():
            _sync_named(f"{name}_clear_pending" if name else None)
        t0 = time.perf_counter_ns()
        compiles = _C.counter_value("UncachedCompile") or 0
        r = modes.enter_region(name, full_graph, session_key, max_different_graphs)
        ok = False
        try:
            yield
            ok = True
        finally:
            with modes.suspend_eager():
                modes.exit_region(r, ok)
                _sync_named(name)
            if name:
                _C.counter_add(f"CompiledRegion_{name}", 1)
                _C.metric_add(f"CompiledRegionTime_{name}", 0, float(time.perf_counter_ns() - t0))
            if modes.debug_enabled():
                fresh = (_C.counter_value("UncachedCompile") or 0) != compiles
                print(f"Compilation Analysis: torch_xla.compile region {name!r}"
                      f"{' (full_graph)' if full_graph else ''}: graph "
                      f"{'compiled' if fresh else 'found in the cache'}", file=sys.stderr)

    if fn is None:
        return region()

    @functools.wraps(fn)
    def compiled(*args, **kwargs):
        with region():
            return fn(*args, **kwargs)
    return compiled


def is_xla_tensor(t):
    return isinstance(t, torch.Tensor) and t.device.type == "xla"


from torch_xla import runtime  # noqa: E402,F401
from torch_xla.torch_xla import launch, set_custom_compile_options  # noqa: E402,F401
from torch_xla.core import xla_model  # noqa: E402,F401
from torch_xla import experimental  # noqa: E402,F401  (eager mode; XLA_USE_EAGER_DEBUG_MODE)
from torch_xla import amp  # noqa: E402,F401  (AutocastXLA kernels for torch.autocast('xla'))
from torch_xla import _XLAC  # noqa: E402,F401  (PyTorch/XLA extension-module names)
from torch_xla._patched_functions import _apply_patches  # noqa: E402
_apply_patches()  # torch.nn.utils.clip_grad_norm_, as PyTorch/XLA patches it
