"""torch_xla.debug.metrics_saver: the per-step metrics dump that
XLA_METRICS_FILE asks for.

With XLA_METRICS_FILE set, every torch_xla.sync() appends
'[MetricsData; step=N]' and the full metrics report to that file (STDOUT and
STDERR name the standard streams), as PyTorch/XLA does. In a
multi-process job each local ordinal writes FILE.<ordinal>.
"""
import os
import sys
import threading

from torch_xla import runtime as xr
import torch_xla.debug.metrics as met

_STEP_METRICS_FILE_LOCK = threading.Lock()
_TLS = threading.local()


def _counter():
  n = getattr(_TLS, 'counter', 0)
  _TLS.counter = n + 1
  return n


def _extract_metrics_file():
  path = os.environ.get('XLA_METRICS_FILE')
  if path is not None and xr.world_size() > 1:
    path = '{}.{}'.format(path, xr.local_ordinal())
  return path


def _get_metrics_file():
  # Read once per thread: '' means not looked up yet (None means unset).
  path = getattr(_TLS, 'metrics_file', '')
  if path == '':
    path = _extract_metrics_file()
    _TLS.metrics_file = path
  return path


def save_metrics(metrics_file=None):
  """Appends the step's metrics report to metrics_file (default:
  XLA_METRICS_FILE; nothing when neither is set)."""
  if metrics_file is None:
    metrics_file = _get_metrics_file()
  if metrics_file is None:
    return
  data = '[MetricsData; step={}]\n{}\n'.format(_counter(), met.metrics_report())
  if metrics_file == 'STDERR':
    print(data, file=sys.stderr)
  elif metrics_file == 'STDOUT':
    print(data)
  else:
    with _STEP_METRICS_FILE_LOCK:
      with open(metrics_file, 'a') as fd:
        fd.write(data)
