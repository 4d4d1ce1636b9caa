"""PyTorch/XLA's per-op counters and tracing metric, kept cheaply.

Every aten op reaching the engine (XlaTensor.__torch_dispatch__) is
counted and timed here in Python dicts and lists, not through the C
metrics service: a C call per op would cost more than the bookkeeping is
worth. flush() moves what accumulated into the C service; the metrics
readers (torch_xla.debug.metrics, torch_xla._XLAC) flush before they
read, and the buffers flush themselves every FLUSH_AT ops, so nothing
grows without bound.

What becomes of the counts (PyTorch/XLA's names and meanings):
  xla::<op>            ops that have an engine lowering (PyTorch/XLA counts
                       the ops its XLA kernels implement); ops that
                       decompose are counted as the ops they decompose
                       into, ops that fall back to the CPU as aten::<op>
                       (lowering/fallback.py)
  LazyTracing          a timed metric, one sample per op: the time spent
                       recording it into the graph
  aten::_local_scalar_dense   every read of a value to a Python number
                       (.item(), bool(t), if t:), which PyTorch/XLA runs as a
                       CPU fallback
  DeviceDataCacheMiss  a Python number (or CPU scalar) operand made into
                       device data; this engine keeps no cache of them, so
                       every one counts (PyTorch/XLA counts only the values
                       its scalar cache had not seen)
  CreateXlaTensor /    each Python xla tensor (bridge.XlaTensor) made /
  DestroyXlaTensor     freed, as PyTorch/XLA counts its XLATensor objects:
                       one per op result or upload, not per engine value
                       (tensor_counts, two integers bumped by the bridge)
"""
import time

import torch

from torchtpu import _C

FLUSH_AT = 1024
_NS = 0  # TT_UNIT_NANOSECONDS

_ops = {}        # OpOverload -> count since the last flush
_counters = {}   # counter name -> delta since the last flush
_tracing = []    # LazyTracing samples (ns) since the last flush
_pending = [0]   # ops recorded since the last flush
# [created, destroyed] Python xla tensors since the last flush: the bridge
# bumps these in XlaTensor.__new__/__del__ (a list item, cheaper than a call).
tensor_counts = [0, 0]

now_ns = time.perf_counter_ns
_LOCAL_SCALAR_DENSE = torch.ops.aten._local_scalar_dense.default


def record_op(func, ns):
    """One op traced in ns nanoseconds (called from the dispatch entry)."""
    _ops[func] = _ops.get(func, 0) + 1
    _tracing.append(ns)
    _pending[0] += 1
    if _pending[0] >= FLUSH_AT:
        flush()


def count(name, delta=1):
    """Adds delta to counter name at the next flush."""
    _counters[name] = _counters.get(name, 0) + delta


def _lowered():
    from torchtpu.lowering.core import LOWERINGS
    return LOWERINGS


def flush():
    """Moves the accumulated counts and samples into the C service."""
    _pending[0] = 0
    if _ops:
        lowered = _lowered()
        ops = list(_ops.items())
        _ops.clear()
        for func, n in ops:
            if func is _LOCAL_SCALAR_DENSE:
                _C.counter_add("aten::_local_scalar_dense", n)
            elif func in lowered and func.namespace == "aten":
                _C.counter_add("xla::" + func._opname, n)
    created, destroyed = tensor_counts
    if created or destroyed:
        tensor_counts[0] -= created
        tensor_counts[1] -= destroyed
        if created:
            _C.counter_add("CreateXlaTensor", created)
        if destroyed:
            _C.counter_add("DestroyXlaTensor", destroyed)
    if _counters:
        items = list(_counters.items())
        _counters.clear()
        for name, n in items:
            _C.counter_add(name, n)
    if _tracing:
        samples = list(_tracing)
        _tracing.clear()
        for ns in samples:
            _C.metric_add("LazyTracing", _NS, float(ns))


def discard_counts():
    """Drops unflushed counts (the counters are being cleared)."""
    _ops.clear()
    _counters.clear()
    tensor_counts[0] = tensor_counts[1] = 0


def discard_samples():
    """Drops unflushed metric samples (the metrics are being cleared)."""
    _tracing.clear()
