"""torch_xla.test.test_utils (xtu): helpers PyTorch/XLA's examples and
tests use: isolated-process tests, training/test progress lines, and
TensorBoard summaries of the metrics."""
from datetime import datetime
import multiprocessing
import time
import unittest

import torch_xla.runtime as xr
import torch_xla.debug.metrics as met
import torch_xla.debug.metrics_compare_utils as mcu


def mp_test(func):
  """Decorates a test method so that it runs in a child process (fork); a
  non-zero exit code of the child fails the test."""

  def wrapper(*args, **kwargs):
    proc = multiprocessing.Process(target=func, args=args, kwargs=kwargs)
    proc.start()
    proc.join()
    if args and isinstance(args[0], unittest.TestCase):
      args[0].assertEqual(proc.exitcode, 0)
    return proc.exitcode

  return wrapper


def _get_device_spec(device):
  ordinal = xr.global_ordinal()
  return str(device) if ordinal < 0 else '{}/{}'.format(device, ordinal)


def write_to_summary(summary_writer,
                     global_step=None,
                     dict_to_write={},
                     write_xla_metrics=False):
  """Adds dict_to_write's scalars to summary_writer (nothing when it is
  None); with write_xla_metrics, also every parsed metric of the metrics
  report and their aten:: sum as 'aten_ops_sum'."""
  if summary_writer is None:
    return
  for k, v in dict_to_write.items():
    summary_writer.add_scalar(k, v, global_step)
  if write_xla_metrics:
    aten_ops_sum = 0
    for name, value in mcu.parse_metrics_report(met.metrics_report()).items():
      if name.startswith('aten::'):
        aten_ops_sum += value
      summary_writer.add_scalar(name, value, global_step)
    summary_writer.add_scalar('aten_ops_sum', aten_ops_sum, global_step)


def close_summary_writer(summary_writer):
  """Flushes and closes summary_writer (if not None)."""
  if summary_writer is not None:
    summary_writer.flush()
    summary_writer.close()


def get_summary_writer(logdir):
  """A tensorboardX SummaryWriter on logdir (None when logdir is empty)."""
  if logdir:
    from tensorboardX import SummaryWriter
    writer = SummaryWriter(log_dir=logdir)
    write_to_summary(writer, 0, dict_to_write={'TensorboardStartTimestamp': time.time()})
    return writer
  return None


def now(format='%H:%M:%S'):
  return datetime.now().strftime(format)


def print_training_update(device,
                          step,
                          loss,
                          rate,
                          global_rate,
                          epoch=None,
                          summary_writer=None):
  """Prints '| Training Device=xla:0/0 Epoch=E Step=S Loss=L Rate=R
  GlobalRate=G Time=HH:MM:SS' (Epoch only when given)."""
  items = [
      'Training', 'Device={}'.format(_get_device_spec(device)),
      'Epoch={}'.format(epoch) if epoch is not None else None,
      'Step={}'.format(step), 'Loss={:.5f}'.format(loss),
      'Rate={:.2f}'.format(rate), 'GlobalRate={:.2f}'.format(global_rate),
      'Time={}'.format(now())
  ]
  print('|', ' '.join(i for i in items if i), flush=True)
  if summary_writer:
    write_to_summary(summary_writer, dict_to_write={
        'examples/sec': rate,
        'average_examples/sec': global_rate,
    })


def print_test_update(device, accuracy, epoch=None, step=None):
  """Prints '| Test Device=xla:0/0 Step=S Epoch=E Accuracy=A Time=...'."""
  items = [
      'Test', 'Device={}'.format(_get_device_spec(device)),
      'Step={}'.format(step) if step is not None else None,
      'Epoch={}'.format(epoch) if epoch is not None else None,
      'Accuracy={:.2f}'.format(accuracy) if accuracy is not None else None,
      'Time={}'.format(now())
  ]
  print('|', ' '.join(i for i in items if i), flush=True)
