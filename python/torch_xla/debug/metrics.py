"""torch_xla.debug.metrics: counters and metrics kept by the C engine, with
PyTorch/XLA's names and report format."""
from torchtpu import _C
from torchtpu.lowering.fallback import fallback_names as _fallback_names

_SHORT_METRICS = ["CompileTime", "ExecuteTime", "ExecuteReplicatedTime",
                  "TransferToDeviceTime", "TransferFromDeviceTime"]
_SHORT_COUNTERS = ["CachedCompile", "MarkStep"]


def metrics_report():
    """The full report: every metric, then every non-zero counter."""
    return _C.metrics_report(None)


def short_metrics_report(counter_names: list = None, metric_names: list = None):
    """A report of a few metrics and counters plus every aten:: fallback
    counter."""
    counter_names = _SHORT_COUNTERS if counter_names is None else counter_names
    metric_names = _SHORT_METRICS if metric_names is None else metric_names
    return _C.metrics_report("\n".join(list(metric_names) + list(counter_names)))


def counter_names():
    return _C.counter_names()


def counter_value(name):
    """Value of a counter, or None if no such counter exists."""
    return _C.counter_value(name)


def metric_names():
    return _C.metric_names()


def metric_data(name):
    """(TotalSamples, Accumulator, [(timestamp_ns, value), ...]) or None."""
    return _C.metric_data(name)


def clear_counters():
    _C.clear_counters()


def clear_metrics():
    _C.clear_metrics()


def clear_all():
    clear_counters()
    clear_metrics()


def executed_fallback_ops():
    """Names of the ops that ran on the CPU fallback path since the counters
    were last cleared (aten::<op>, or prims::<op> for PyTorch prims)."""
    names = set(_fallback_names())
    return [n for n in _C.counter_names() if n in names]

