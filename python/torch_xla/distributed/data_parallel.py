"""torch_xla.distributed.data_parallel: PyTorch/XLA's thread-per-device
DataParallel (deprecated upstream in favour of multi-process launches,
kept for code that still uses it).

DataParallel(network, device_ids) keeps one copy of the model per device;
calling it with loop_fn(model, device_loader, device, context) and a
loader runs one epoch: each device's thread gets its own ParallelLoader
stream of batches, and the list of loop_fn results (in device order) is
returned. An exception in a loop_fn is raised again in the caller (upstream
exits the process instead, since its other threads would hang in
collectives; here they are simply joined first).

With device_ids xla:0..xla:N-1 (the default: every device) each thread is
a replica of a launch (torchtpu.replicas, docs/collectives.md): its
xr.world_size() is N and its ordinal its device index, so
xm.optimizer_step averages the gradients across the devices, as upstream's
replication does; an exception in one thread aborts the collectives so the
others do not wait for it.
"""
from copy import deepcopy
import threading

import torch

import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torchtpu import _C, bridge, replicas


class Context(object):
  """Per-device state that lives as long as the DataParallel object."""

  def __init__(self, device):
    self.device = device

  def getattr_or(self, name, defval):
    value = getattr(self, name, None)
    if value is None:
      value = defval() if callable(defval) else defval
      setattr(self, name, value)
    return value


class ThreadResult(object):

  def __init__(self):
    self.result = None


class DataParallel(object):
  """Replicates network (a module, or a callable returning one) on
  device_ids (default: every xla device); with an empty device_ids the
  network runs as it is, on its own device."""

  def __init__(self, network, device_ids=None, **kwargs):
    if device_ids is None:
      device_ids = xm.get_xla_supported_devices()
    self._device_ids = [str(x) for x in device_ids]
    self._native_run = False
    self._models = []
    self._contexts = []
    self._kwargs = kwargs
    module = network if isinstance(network, torch.nn.Module) else network()
    for device in self._device_ids:
      self._models.append(deepcopy(module).to(device=torch.device(device)))
      self._contexts.append(Context(torch.device(device)))
    if not self._models:
      device = self._get_model_device(module)
      self._models.append(module)
      self._device_ids.append(device)
      self._contexts.append(Context(torch.device(device)))
      self._native_run = True

  @property
  def devices(self):
    return self._device_ids

  @property
  def models(self):
    return self._models

  def _get_model_device(self, model):
    devices = {str(p.device) for p in model.parameters()}
    if len(devices) > 1:
      raise RuntimeError('Model uses more than one device: {}'.format(list(devices)))
    return devices.pop() if devices else 'cpu'

  def _module_runner(self, loop_fn, device, module, loader, context, result, replica,
                     **kwargs):
    xm.set_replication(device, self._device_ids)
    if replica is not None:  # (ordinal, world size)
      replicas.enter(*replica)
      bridge._single_threaded_autograd()
    try:
      result.result = loop_fn(module, loader, torch.device(device), context, **kwargs)
    except Exception as e:  # re-raised by __call__
      result.result = e
      if replica is not None:
        _C.collective_abort(f'replica {replica[0]} raised {type(e).__name__}: {e}')
    finally:
      if replica is not None:
        replicas.leave()

  def __call__(self, loop_fn, loader, batchdim=0, **kwargs):
    """Runs one epoch; returns loop_fn's result for each device."""
    if self._native_run:
      return [
          loop_fn(self._models[0], enumerate(loader), torch.device(self._device_ids[0]),
                  self._contexts[0], **kwargs)
      ]
    xm.wait_device_ops()
    para_loader = pl.ParallelLoader(loader, self._device_ids, batchdim=batchdim,
                                    **self._kwargs)
    results = [ThreadResult() for _ in self._device_ids]
    n = len(self._device_ids)
    replicated = n > 1 and self._device_ids == [f'xla:{i}' for i in range(n)]
    runs = [(self._module_runner,
             (loop_fn, device, module, para_loader.per_device_loader(device), context,
              result, (i, n) if replicated else None))
            for i, (module, device, context, result) in enumerate(
                zip(self._models, self._device_ids, self._contexts, results))]
    if len(runs) == 1:
      fn, args = runs[0]
      fn(*args, **kwargs)
    else:
      threads = [threading.Thread(target=fn, args=args, kwargs=kwargs) for fn, args in runs]
      if replicated:
        _C.collective_reset()
        _C.collective_set_world_size(n)
      try:
        for t in threads:
          t.start()
        for t in threads:
          t.join()
        if replicated:
          _C.wait(-1)  # the replicas' queued collectives run with their world size
      finally:
        if replicated:
          _C.collective_set_world_size(1)
          _C.collective_reset()
    for r in results:
      if isinstance(r.result, Exception):
        raise r.result
    return [r.result for r in results]
