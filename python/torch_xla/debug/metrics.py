"""torch_xla.debug.metrics: counters and metrics kept by the C engine, with
PyTorch/XLA's names and report format.

Per-op counts and samples accumulate in Python (torchtpu/op_metrics.py)
and are moved into the C service before anything here reads it. Two
counters are derived when read: CreateCompileHandles follows
UncachedCompile (each compile makes one executable, which is what
PyTorch/XLA counts under that name)."""
from torchtpu import _C, op_metrics
from torchtpu.lowering.fallback import fallback_names as _fallback_names

_SHORT_METRICS = ["CompileTime", "ExecuteTime", "ExecuteReplicatedTime",
                  "TransferToDeviceTime", "TransferFromDeviceTime"]
_SHORT_COUNTERS = ["CachedCompile", "MarkStep"]

# UncachedCompile's value when CreateCompileHandles was last brought up to
# date (reset with the counters).
_compiles_seen = [0]


def _sync_counts():
    op_metrics.flush()
    compiles = _C.counter_value("UncachedCompile") or 0
    if compiles > _compiles_seen[0]:
        _C.counter_add("CreateCompileHandles", compiles - _compiles_seen[0])
    _compiles_seen[0] = compiles


def metrics_report():
    """The full report: every metric, then every non-zero counter."""
    _sync_counts()
    return _C.metrics_report(None)


def short_metrics_report(counter_names: list = None, metric_names: list = None):
    """A report of a few metrics and counters plus every aten:: fallback
    counter."""
    _sync_counts()
    counter_names = _SHORT_COUNTERS if counter_names is None else counter_names
    metric_names = _SHORT_METRICS if metric_names is None else metric_names
    return _C.metrics_report("\n".join(list(metric_names) + list(counter_names)))


def counter_names():
    _sync_counts()
    return _C.counter_names()


def counter_value(name):
    """Value of a counter, or None if it does not exist or was cleared
    (PyTorch/XLA treats a cleared counter as absent)."""
    _sync_counts()
    value = _C.counter_value(name)
    return value if value else None


def metric_names():
    _sync_counts()
    return _C.metric_names()


def metric_data(name):
    """(TotalSamples, Accumulator, [(timestamp_ns, value), ...]) or None."""
    _sync_counts()
    return _C.metric_data(name)


def increment_counter(name, value=1):
    """Adds value to counter name, creating it (torch_xla._XLAC's
    _xla_increment_counter)."""
    _sync_counts()
    _C.counter_add(name, int(value))


def clear_counters():
    op_metrics.discard_counts()
    _C.clear_counters()
    _compiles_seen[0] = 0


def clear_metrics():
    op_metrics.discard_samples()
    _C.clear_metrics()


def clear_all():
    clear_counters()
    clear_metrics()


_LOCAL_SCALAR_DENSE = "aten::_local_scalar_dense"


def executed_fallback_ops():
    """Names of the ops that ran on the CPU fallback path since the counters
    were last cleared (aten::<op>[.<overload>], or prims::<op> for PyTorch
    prims), and aten::_local_scalar_dense once a value was read to a Python
    number (.item(), if t:), which PyTorch/XLA runs as a CPU fallback and
    lists here."""
    names = set(_fallback_names())
    names.add(_LOCAL_SCALAR_DENSE)
    return [n for n in counter_names() if n in names]
