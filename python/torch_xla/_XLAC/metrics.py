"""_XLAC's metrics and counters calls (torch_xla.debug.metrics wraps them
in PyTorch/XLA; here they share its implementation)."""
from torch_xla.debug import metrics as _met


def _xla_metrics_report():
    return _met.metrics_report()


def _short_xla_metrics_report(counter_names, metric_names):
    return _met.short_metrics_report(list(counter_names), list(metric_names))


def _xla_counter_names():
    return _met.counter_names()


def _xla_counter_value(name):
    return _met.counter_value(name)


def _xla_increment_counter(name, inc_val):
    if inc_val < 0:
        raise TypeError("_xla_increment_counter(): incompatible function arguments "
                        f"(inc_val must be a non-negative int, got {inc_val})")
    _met.increment_counter(name, inc_val)


def _xla_metric_names():
    return _met.metric_names()


def _xla_metric_data(name):
    return _met.metric_data(name)


def _clear_xla_counters():
    _met.clear_counters()


def _clear_xla_metrics():
    _met.clear_metrics()


def _get_executed_fallback_ops():
    return _met.executed_fallback_ops()
