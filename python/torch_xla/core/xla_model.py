"""torch_xla.core.xla_model (xm): PyTorch/XLA 2.9's classic API.

Same names, signatures, defaults, return types and errors as PyTorch/XLA,
for this engine's single process, whose replicas are the device threads of
torch_xla.launch. The cross-replica functions (all_reduce, rendezvous,
mesh_reduce, collective_broadcast, ...) are recorded as collectives or
exchanged through them; with xr.world_size() == 1 they
return what PyTorch/XLA returns for a world of one (their input, or a
one-element list), without a device round trip where none is observable.
"""
import contextlib
import io
import itertools
import logging
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, TextIO, Tuple, TypedDict, Union

import torch
import torch.optim as optim
from typing_extensions import deprecated

import torch_xla
from torch_xla import runtime
from torch_xla import runtime as xr
import torch_xla.core.xla_env_vars as xenv  # noqa: F401  (PyTorch/XLA exposes it here)
import torch_xla.utils.utils as xu
import torch_xla.utils.closures as xc
from torchtpu import _C, bridge, config
from torchtpu.lowering import misc_ops as _rng

XLA_LIB = None

# Collectives (torchtpu/collectives.py): recorded as IR ops, lowered to the
# StableHLO collectives; the engine runs them between the replica threads of
# torch_xla.launch (docs/collectives.md).
from torchtpu.collectives import (  # noqa: E402,F401
    REDUCE_AND, REDUCE_MAX, REDUCE_MIN, REDUCE_MUL, REDUCE_OR, REDUCE_SUM, all_gather,
    all_reduce, all_to_all, collective_permute, reduce_scatter)


# ------------------------------------------------------------ devices
class DeviceContext(object):
  """Per-device state kept by this module (step closures, replication)."""

  def __init__(self, device: Union[str, torch.device]):
    self.device = device


_DEVICE_CONTEXTS = dict()
_DEVICE_CONTEXTS_LOCK = threading.Lock()


def _default_device_str() -> str:
  config.ensure_runtime()
  return f"xla:{bridge.current_device_index()}"


def _get_device_context(
    device: Optional[Union[str, torch.device]] = None) -> DeviceContext:
  device = _default_device_str() if device is None else str(device)
  with _DEVICE_CONTEXTS_LOCK:
    devctx = _DEVICE_CONTEXTS.get(device)
    if devctx is None:
      devctx = DeviceContext(device)
      _DEVICE_CONTEXTS[device] = devctx
    return devctx


def is_xla_tensor(tensor: torch.Tensor) -> bool:
  return tensor.device.type == 'xla'


def get_xla_supported_devices(max_devices: Optional[int] = None) -> List[str]:
  """['xla:0', 'xla:1', ...], at most max_devices of them."""
  n = 1 if runtime.is_spmd() else config.ensure_runtime()  # SPMD: one virtual device
  if max_devices:
    n = min(n, max_devices)
  return [f'xla:{i}' for i in range(n)]


def get_local_ordinal() -> int:
  """This process's replication ordinal on its host."""
  return runtime.local_ordinal()


def get_ordinal(defval: int = 0) -> int:
  """Older name of xr.global_ordinal()."""
  return runtime.global_ordinal()


def xrt_world_size(defval: int = 1) -> int:
  """Older name of xr.world_size()."""
  return runtime.world_size()


def is_master_ordinal(local: bool = True) -> bool:
  """Whether this process is ordinal 0 (on its host when local, else of the
  whole job)."""
  ordinal = get_local_ordinal() if local else runtime.global_ordinal()
  return ordinal == 0


def master_print(*args: Any,
                 fd: TextIO = sys.stdout,
                 local: bool = False,
                 flush: bool = False):
  """print(*args) on the master ordinal only."""
  if is_master_ordinal(local=local):
    print(*args, file=fd, flush=flush)


@deprecated("Use torch_xla.device instead")
def xla_device(n: Optional[int] = None,
               devkind: Optional[str] = None) -> torch.device:
  """torch_xla.device(n); devkind is ignored, as in PyTorch/XLA 2.9."""
  del devkind
  return torch_xla.device(n)


def xla_devices(devkind: Optional[str] = None) -> List[torch.device]:
  """Older name of torch_xla.devices() (kept for code written before 2.0)."""
  return torch_xla.devices()


def _xla_real_device(device: Union[str, torch.device]) -> str:
  m = re.match(r'xla:(\d+)$', str(device))
  if not m:
    raise RuntimeError('Invalid device format: {}'.format(device))
  index = int(m.group(1))
  n = config.ensure_runtime()
  if index >= n:
    raise RuntimeError(f'Invalid device: {device} ({n} xla device(s))')
  return f'{config.device_type()}:{index}'


def xla_real_devices(devices: Optional[List[torch.device]] = None) -> List[str]:
  """Runtime names of devices (all of them when None), e.g. ['CPU:0']."""
  if not devices:
    devices = get_xla_supported_devices()
  return [_xla_real_device(d) for d in devices]


def xla_device_hw(device: Union[str, torch.device]) -> str:
  """Hardware type of an xla device ('CPU' here)."""
  return _xla_real_device(device).split(':')[0]


def xla_device_kind(device: Optional[Union[str, torch.device]] = None) -> str:
  """The vendor's name for the kind of device: the engine runs on the
  host CPU, so this is 'cpu', as PJRT's CPU client reports."""
  if device is not None:
    _xla_real_device(device)  # validates it
  return 'cpu'


def xla_replication_devices(
    local_devices: Optional[List[torch.device]] = None) -> List[str]:
  """Runtime names of the devices a replicated program runs on: every
  device of the kind, which must be exactly local_devices' count."""
  real = xla_real_devices(local_devices)
  kinds = {d.split(':')[0] for d in real}
  if len(kinds) != 1:
    raise RuntimeError(
        'Cannot replicate across different device types: devices={}/{}'.format(
            local_devices, real))
  all_devices = get_xla_supported_devices()
  if local_devices is not None and len(all_devices) != len(local_devices):
    raise RuntimeError(
        'Cannot replicate if number of devices ({}) is different from {}'.format(
            len(local_devices), len(all_devices)))
  return xla_real_devices(all_devices)


def unlazy(tensors: List[torch.Tensor]):
  """Blocks until tensors are computed (benchmarking aid)."""
  from torch_xla.utils import serialization as xser
  xser._sync_tensors(list(tensors))


def set_replication(device: torch.device,
                    devices: Optional[List[torch.device]]):
  """Makes device the current one and records the replication group it
  belongs to (the devices of a replicated run)."""
  device = str(device)
  devctx = _get_device_context(device=device)
  devices = [str(x) for x in (devices or [])]
  if devices:
    devctx.replication_devices = xla_replication_devices(devices)
    devctx.device_index = devices.index(device)
  else:
    devctx.replication_devices = []
    devctx.device_index = 0
  bridge.set_current_device_index(bridge.device_index(torch.device(device)))


# ------------------------------------------------------------ rates
class RateTracker(object):
  """Exponentially smoothed rate (e.g. samples/second); the smoothing
  factor defaults to RATE_TRACKER_SMOOTHING or 0.4."""

  def __init__(self, smooth_factor: Optional[float] = None):
    self._smooth_factor = xu.getenv_as(
        'RATE_TRACKER_SMOOTHING', float,
        0.4) if smooth_factor is None else smooth_factor
    self._start_time = time.time()
    self._partial_time = self._start_time
    self._partial_count = 0.0
    self._partial_rate = None
    self._count = 0.0

  def _update(self, now: float, rate: float):
    self._partial_count += self._count
    self._count = 0.0
    self._partial_time = now
    self._partial_rate = rate

  def add(self, count: float):
    self._count += count

  def _smooth(self, current_rate: float) -> float:
    if self._partial_rate is None:
      return current_rate
    return ((1 - self._smooth_factor) * current_rate +
            self._smooth_factor * self._partial_rate)

  def rate(self):
    now = time.time()
    delta = now - self._partial_time
    report_rate = 0.0
    if delta > 0:
      report_rate = self._smooth(self._count / delta)
      self._update(now, report_rate)
    return report_rate

  def global_rate(self):
    delta = time.time() - self._start_time
    count = self._partial_count + self._count
    return count / delta if delta > 0 else 0.0


class ToXlaTensorArena(object):
  """Converts every tensor that select_fn accepts in a nested structure
  with one convert_fn(list_of_tensors) call (one graph, one transfer)."""

  def __init__(self, convert_fn: Callable[[List[torch.Tensor]],
                                          List[torch.Tensor]],
               select_fn: Callable[[torch.Tensor], bool]):
    self._convert_fn = convert_fn
    self._select_fn = select_fn
    self._tensors = []

  def transform(self, inputs: Any):
    self._tensors = []
    xu.for_each_instance(inputs, self._select_fn, self._tensors.append)
    converted = self._convert_fn(self._tensors) if self._tensors else []
    by_id = {id(t): c for t, c in zip(self._tensors, converted)}
    return xu.for_each_instance_rewrite(inputs, self._select_fn,
                                        lambda t: by_id[id(t)])


def check_view_sharing(obj):
  """Raises RuntimeError when two tensors in the nested structure obj are
  views of one another (saving them would lose the sharing)."""
  tensors = set()
  aliases = dict()

  def tensor_info(t):
    return '{}{}'.format(t.dtype, list(t.size()))

  def tensor_id(t):
    return id(t), 'xla' if is_xla_tensor(t) else 'torch'

  def alias_id(t):
    if is_xla_tensor(t):
      # Functionalization keeps autograd's view links: every view leads to
      # its root base, which identifies the shared data.
      root = t
      while root._base is not None:
        root = root._base
      return id(root), 'xla'
    return t.untyped_storage().data_ptr(), 'torch'

  def check_object(t):
    tid = tensor_id(t)
    if tid in tensors:
      return
    tensors.add(tid)
    aid = alias_id(t)
    if aid in aliases:
      other = aliases[aid]
      raise RuntimeError(
          'Tensor ID {} ({}) is sharing a view with tensor ID {} ({})'.format(
              tid, tensor_info(t), tensor_id(other), tensor_info(other)))
    aliases[aid] = t

  xu.for_each_instance(obj, lambda x: type(x) == torch.Tensor, check_object)


def _fetch_gradients(optimizer: optim.Optimizer) -> List[torch.Tensor]:
  """The .grad.data of every parameter of optimizer that has one."""
  gradients = []
  for param_group in optimizer.__getstate__()['param_groups']:
    for p in param_group['params']:
      if isinstance(p, torch.Tensor) and p.grad is not None:
        gradients.append(p.grad.data)
  return gradients


# ------------------------------------------------------------ collectives
class CoalescingBuckets(object):
  """Groups tensors into buckets of at most bucket_cap_mb MiB and calls
  func(inputs, outputs) once per bucket; returns the results in order."""

  def __init__(self, func: Callable, input_list: Any, output_list: Any = None,
               bucket_cap_mb: int = 160):
    if not isinstance(input_list, list) or any(
        not isinstance(v, torch.Tensor) for v in input_list):
      raise TypeError(
          f'`input_list` needs to be a list of Tensors, but given {type(input_list)}')
    if output_list is not None:
      if not isinstance(output_list, list) or any(
          not isinstance(v, torch.Tensor) for v in output_list):
        raise TypeError(
            f'`output_list` needs to be a list of Tensors, but given {type(output_list)}')
      if len(output_list) != len(input_list):
        raise ValueError('`output_list` length doesn\'t match `input_list` length')
    self._func = func
    self._input_list = input_list
    self._output_list = output_list
    self._cap = bucket_cap_mb * 1024 * 1024

  def __call__(self) -> List[torch.Tensor]:
    """One result per input tensor, in order (a list, even for one)."""
    results = []
    bucket, outs, total = [], [], 0

    def flush():
      nonlocal bucket, outs, total
      if len(bucket) == 1:  # one tensor: the plain (non-coalesced) call
        results.append(self._func(bucket[0], outs[0] if outs else None))
      elif bucket:
        results.extend(self._func(bucket, outs or None))
      bucket, outs, total = [], [], 0

    for i, t in enumerate(self._input_list):
      nbytes = t.numel() * t.element_size()
      if nbytes > self._cap and total < 0.5 * self._cap and total + nbytes <= 2 * self._cap:
        # A big tensor joins a small bucket rather than leaving it alone.
        flush_after = True
      else:
        flush_after = False
        if total + nbytes > self._cap:
          flush()
      bucket.append(t)
      if self._output_list is not None:
        outs.append(self._output_list[i])
      total += nbytes
      if flush_after:
        flush()
    flush()
    return results


def _per_tensor(fn, inputs, outputs):
  if isinstance(inputs, torch.Tensor):
    return fn(inputs, outputs)
  outs = outputs or [None] * len(inputs)
  return [fn(t, o) for t, o in zip(inputs, outs)]


def all_gather_bucketized(input_list: List[torch.Tensor],
                          dim: int = 0,
                          groups: Optional[List[List[int]]] = None,
                          output: Optional[List[torch.Tensor]] = None,
                          pin_layout: bool = False,
                          bucket_cap_mb=160) -> List[torch.Tensor]:
  """all_gather of each tensor of input_list, issued in buckets."""

  def gather(inputs, outputs):
    return _per_tensor(
        lambda t, o: all_gather(t, dim=dim, groups=groups, output=o,
                                pin_layout=pin_layout), inputs, outputs)

  return CoalescingBuckets(gather, input_list, output, bucket_cap_mb)()


def reduce_scatter_bucketized(reduce_type: str,
                              input_list: List[torch.Tensor],
                              scale: float,
                              scatter_dim: int,
                              shard_count: int,
                              groups: Optional[List[List[int]]] = None,
                              output: Optional[List[torch.Tensor]] = None,
                              pin_layout: bool = False,
                              bucket_cap_mb: int = 160) -> List[torch.Tensor]:
  """reduce_scatter of each tensor of input_list, issued in buckets."""

  def scatter(inputs, outputs):
    return _per_tensor(
        lambda t, o: reduce_scatter(reduce_type, t, scale, scatter_dim,
                                    shard_count, groups=groups, output=o,
                                    pin_layout=pin_layout), inputs, outputs)

  return CoalescingBuckets(scatter, input_list, output, bucket_cap_mb)()


def collective_broadcast(tensors: List[torch.Tensor],
                         root_ordinal: int = 0,
                         groups: Optional[List[int]] = None,
                         pin_layout: bool = True) -> None:
  """Overwrites tensors, in place, with root_ordinal's values. Each replica
  scales its copy by 1 (the root) or 0 and the group sums them, so every
  replica runs the same graph. With one replica, root_ordinal 0 leaves the
  values as they are (and any other root zeroes them, as in PyTorch/XLA)."""
  with torch.no_grad():
    for tensor in tensors:
      scale = 1 if runtime.global_ordinal() == root_ordinal else 0
      tensor.mul_(torch.tensor(scale, dtype=tensor.dtype).to(tensor.device))
    # In place on parameters too: not something autograd should record.
    all_reduce(REDUCE_SUM, tensors, groups=groups, pin_layout=pin_layout)


def send(value: torch.Tensor, channel_id: int) -> torch.Tensor:
  """Sends value to the replica that calls recv on channel_id and returns
  value (as PyTorch/XLA's send does). The k-th send on a channel goes to
  the k-th recv on it; the send is buffered (it runs what value depends on
  and returns without waiting for the receiver): torchtpu/point_to_point.py."""
  from torchtpu import point_to_point
  return point_to_point.send(value, ('channel', _channel_id(channel_id)),
                             f'send on channel {channel_id}')


def recv(output: torch.Tensor, channel_id: int) -> torch.Tensor:
  """Receives what the matching send on channel_id sent: a new tensor with
  output's shape, dtype and device (output itself is left as it is, as in
  PyTorch/XLA). Syncs this replica's pending graph, then waits for the
  send (TORCHTPU_COLLECTIVE_TIMEOUT_S)."""
  from torchtpu import point_to_point
  return point_to_point.recv(output, ('channel', _channel_id(channel_id)),
                             f'recv on channel {channel_id}')


def _channel_id(channel_id):
  if isinstance(channel_id, bool) or not isinstance(channel_id, int):
    raise TypeError(f'channel_id must be an int, got {type(channel_id).__name__}')
  return int(channel_id)


def all_reduce_bucketized_gradients(gradients: List[torch.Tensor],
                                    scale: float,
                                    groups: Optional[List[List[int]]],
                                    pin_layout: bool,
                                    bucket_cap_mb: int = 0):
  """all_reduce(REDUCE_SUM) of gradients in place, in buckets of at most
  bucket_cap_mb MiB (a bucket holds at least one tensor)."""
  cap = bucket_cap_mb * 1024 * 1024
  bucket, total = [], 0
  for grad in gradients:
    nbytes = grad.numel() * grad.element_size()
    if bucket and total + nbytes > cap:
      all_reduce(REDUCE_SUM, bucket, scale=scale, groups=groups,
                 pin_layout=pin_layout)
      bucket, total = [], 0
    bucket.append(grad)
    total += nbytes
  if bucket:
    all_reduce(REDUCE_SUM, bucket, scale=scale, groups=groups,
               pin_layout=pin_layout)


def reduce_gradients(optimizer: optim.Optimizer,
                     groups: Optional[List[List[int]]] = None,
                     pin_layout: bool = True):
  """Averages the gradients of optimizer's parameters over the replicas
  (nothing to do with one replica). ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB > 0
  reduces them in buckets, last layer first."""
  count = runtime.world_size()
  if count <= 1:
    return
  gradients = _fetch_gradients(optimizer)
  bucket_cap_mb = int(os.getenv('ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB', 0))
  if bucket_cap_mb > 0:
    all_reduce_bucketized_gradients(list(reversed(gradients)), scale=1.0 / count,
                                    groups=groups, pin_layout=pin_layout,
                                    bucket_cap_mb=bucket_cap_mb)
  else:
    all_reduce(REDUCE_SUM, gradients, scale=1.0 / count, groups=groups,
               pin_layout=pin_layout)


def optimizer_step(optimizer: optim.Optimizer,
                   barrier: bool = False,
                   optimizer_args: Dict = {},
                   groups: Optional[List[List[int]]] = None,
                   pin_layout: bool = True):
  """reduce_gradients, then optimizer.step(**optimizer_args) (whose value
  is returned); barrier=True also cuts the graph (torch_xla.sync())."""
  reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
  loss = optimizer.step(**optimizer_args)
  if barrier:
    torch_xla.sync()
  return loss


def broadcast_master_param(model: torch.nn.Module) -> None:
  """Overwrites model's parameters and buffers with the master's."""
  collective_broadcast(list(itertools.chain(model.parameters(), model.buffers())))
  torch_xla.sync()


# ------------------------------------------------------------ rendezvous
def _rendezvous_group(ordinals: Optional[List[int]]) -> Optional[List[int]]:
  """The replica group of a rendezvous over ordinals (None: every replica),
  checked against this replica; None when it spans every replica."""
  if not ordinals:
    return None
  world = runtime.world_size()
  group = [int(o) for o in ordinals]
  bad = [o for o in group if not 0 <= o < world]
  if bad:
    raise ValueError(f'rendezvous replicas {group}: ordinals {bad} are not in '
                     f'[0, {world})')
  if len(set(group)) != len(group):
    raise ValueError(f'rendezvous replicas {group} name a replica twice')
  ordinal = runtime.global_ordinal()
  if ordinal not in group:
    raise ValueError(f'replica {ordinal} joined a rendezvous over replicas '
                     f'{group}, which does not include it')
  return None if len(group) == world else group


def xla_rendezvous(payload: bytes = b'',
                   ordinals: Optional[List[int]] = None,
                   tag: Optional[str] = None) -> List[bytes]:
  """Exchanges payload with the replicas in ordinals (None or empty: every
  replica); returns their payloads in the order of ordinals (by ordinal
  for every replica). Only those replicas call it. Syncs pending work
  first. tag is only logged.

  PyTorch/XLA raises ValueError('Only global rendezvous is supported') for
  a subset of the replicas; here the subset meets as one replica group
  (docs/collectives.md)."""
  group = _rendezvous_group(ordinals)
  if not isinstance(payload, bytes):
    raise TypeError('`payload` must be bytes, not {}'.format(type(payload)))
  torch_xla.sync()
  if tag:
    logging.info(f"Joining rendezvous '{tag}'...")
  if runtime.world_size() == 1:
    return [payload]
  groups = [group] if group else None
  device = torch_xla.device()
  size = torch.tensor([len(payload)], dtype=torch.int32, device=device)
  sizes = all_gather(size, groups=groups).cpu()
  max_size = int(sizes.max())
  if max_size < 1:
    return [b'' for _ in range(sizes.numel())]
  data = torch.zeros(max_size, dtype=torch.uint8)
  data[:len(payload)] = torch.tensor(list(payload), dtype=torch.uint8)
  gathered = all_gather(data.to(device), groups=groups).cpu().split(max_size)
  return [bytes(d[:int(n)].tolist()) for d, n in zip(gathered, sizes)]


def rendezvous(tag: str,
               payload: bytes = b'',
               replicas: List[int] = []) -> List[bytes]:
  """Waits for the replicas (empty: every replica) to reach the rendezvous
  named tag and returns their payloads, replicas[i]'s (ordinal i's for
  every replica) at position i."""
  return xla_rendezvous(payload, replicas or None, tag=tag)


def do_on_ordinals(
    target: Callable[..., Any],
    data: Union[Tuple, Any] = (),
    ordinals: Union[List[int], Set[int], int] = (0,)
) -> Optional[Any]:
  """target(*data) with data's xla tensors moved to the CPU, on the given
  ordinals only (None elsewhere); every replica then meets at a
  rendezvous."""
  running = runtime.global_ordinal() in ordinals
  cpu_data = _maybe_convert_to_cpu(data, convert=running)
  result = target(*cpu_data) if running else None
  rendezvous('torch_xla.core.xla_model.do_on_ordinals')
  return result


def mesh_reduce(tag: str, data,
                reduce_fn: Callable[..., Any]) -> Union[Any, ToXlaTensorArena]:
  """reduce_fn(list of every replica's data), data's xla tensors moved to
  the CPU and exchanged through a rendezvous."""
  cpu_data = _maybe_convert_to_cpu(data)
  bio = io.BytesIO()
  torch.save(cpu_data, bio)
  exchanged = rendezvous(tag, bio.getvalue())
  values = [torch.load(io.BytesIO(b), weights_only=False) for b in exchanged]
  return reduce_fn(values) if values else cpu_data


# ------------------------------------------------------------ step closures
def add_step_closure(closure: Callable[..., Any],
                     args: Tuple[Any, ...] = (),
                     run_async: bool = False):
  """Runs closure(*args) after the next torch_xla.sync(), when the tensors
  it reads are computed. Closures run in the order added; with
  run_async=True on a worker thread (sync does not wait for them; an
  exception there is raised by a later sync as RuntimeError)."""
  devctx = _get_device_context()
  kind = 'async_step_closures' if run_async else 'step_closures'
  with _DEVICE_CONTEXTS_LOCK:
    closures = getattr(devctx, kind, None)
    if closures is None:
      closures = []
      setattr(devctx, kind, closures)
    closures.append(lambda a=args: closure(*a))


def _run_step_closures() -> DeviceContext:
  # torch_xla.sync() ends here. As in PyTorch/XLA, a sync inside an open
  # xp.Trace scope raises (before the step's closures run).
  import torch_xla.debug.profiler as xp
  xp.check_scope_empty()
  devctx = _get_device_context()
  with _DEVICE_CONTEXTS_LOCK:
    async_closures = getattr(devctx, 'async_step_closures', None) or []
    devctx.async_step_closures = []
    closures = getattr(devctx, 'step_closures', None) or []
    devctx.step_closures = []
  if async_closures:
    handler = getattr(devctx, 'async_closure_handler', None)
    if handler is None:
      handler = xc.AsyncClosureHandler()
      devctx.async_closure_handler = handler
    handler.run_all(async_closures)
  for closure in closures:
    closure()
  # torch_xla.sync() ends here: the step's metrics go to XLA_METRICS_FILE.
  import torch_xla.debug.metrics_saver as ms
  ms.save_metrics()
  return devctx


@deprecated("Use torch_xla.sync instead")
def mark_step(wait: bool = False, reset_scope: bool = True):
  torch_xla.sync(wait, reset_scope)


def wait_device_ops(devices: List[str] = []):
  """Blocks until the queued work of devices (all when empty) is done."""
  config.ensure_runtime()
  if not devices:
    _C.wait(-1)
  else:
    for d in devices:
      _C.wait(bridge.device_index(torch.device(d) if isinstance(d, str) else d))


# ------------------------------------------------------------ data movement
def send_cpu_data_to_device(datas: Any,
                            device: Union[str, torch.device],
                            input_sharding=None) -> Any:
  """datas with every CPU tensor copied to device (through lists, tuples,
  dicts, sets and objects' attributes). As in PyTorch/XLA a lone tensor
  comes back as a one-element list, and tuples as lists."""

  def convert_fn(tensors):
    # Device data directly (no pending empty tensor for a sync on another
    # thread to catch), as PyTorch/XLA's transfer does.
    out = torch_xla._XLAC._xla_tensors_from_aten(tensors, [device] * len(tensors))
    if input_sharding is not None:  # a ShardingSpec (spmd/input_sharding.py)
      from torch_xla.distributed.spmd.input_sharding import shard_batch
      shard_batch(out, input_sharding)
    return out

  def select_fn(v):
    return type(v) == torch.Tensor and v.device.type == 'cpu'

  if type(datas) is torch.Tensor:
    datas = [datas]
  return ToXlaTensorArena(convert_fn, select_fn).transform(datas)


def _maybe_convert_to_cpu(data, convert=True):
  """Runs the pending work of the xla tensors in data as one graph and, if
  convert, returns data with each replaced by a CPU copy (through dicts,
  lists, tuples, sets and objects' attributes, as PyTorch/XLA does)."""
  from torch_xla.utils import serialization as xser
  _, tensors = xser._collect_references(data)
  xser._sync_tensors(tensors)
  if not convert:
    return data
  return xser._rewrite(data, xser._is_xla_tensor, lambda t: t.cpu(), {})


def save(data, file_or_path, master_only=True, global_master=False):
  """Saves data with torch.save after moving its xla tensors to the CPU
  (so torch.load gives CPU tensors). A path is replaced atomically: a
  process killed during the save leaves the previous file intact.

  Args:
    data: any nested combination of Python objects and tensors.
    file_or_path: a path, or a file object (written directly).
    master_only (bool): only the master ordinal writes.
    global_master (bool): with master_only, only the global master
      (ordinal 0) writes instead of each host's.
  """
  from torch_xla.utils import serialization as xser
  should_write = not master_only or is_master_ordinal(local=not global_master)
  cpu_data = _maybe_convert_to_cpu(data, convert=should_write)
  if should_write:
    if isinstance(file_or_path, (str, os.PathLike)):
      xser._atomic_torch_save(cpu_data, file_or_path)
    else:
      torch.save(cpu_data, file_or_path)


# ------------------------------------------------------------ RNG
def _rng_device(device) -> int:
  return bridge.device_index(torch.device(device) if isinstance(device, str) else device)


def set_rng_state(seed: int, device: Optional[str] = None):
  """Makes seed the RNG state of device (the current one when None)."""
  _rng.set_rng_state(seed, _rng_device(device))


def get_rng_state(device: Optional[str] = None) -> int:
  """The RNG state of device (the current one when None), an int."""
  return _rng.get_rng_state(_rng_device(device))[0]


@contextlib.contextmanager
def fork_rng(device: Optional[str] = None, enabled: bool = True):
  """Restores device's RNG state when the block exits (a no-op when
  enabled is False)."""
  if not enabled:
    yield
    return
  state = get_rng_state(device=device)
  try:
    yield
  finally:
    set_rng_state(state, device=device)


# ------------------------------------------------------------ memory
class MemoryInfo(TypedDict):
  bytes_used: int
  bytes_limit: int
  peak_bytes_used: int


def _host_memory_bytes() -> int:
  try:
    return os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
  except (ValueError, OSError):
    return 0


def get_memory_info(device: Optional[torch.device] = None) -> MemoryInfo:
  """Device memory: bytes held by live device buffers, their peak, and
  the limit (the device's buffers live in host memory, so the host's
  physical memory)."""
  index = bridge.device_index(torch_xla.device() if device is None else
                              (torch.device(device) if isinstance(device, str) else device))
  in_use, peak = _C.memory_stats(index)
  return {
      'bytes_used': int(in_use),
      'bytes_limit': _host_memory_bytes(),
      'peak_bytes_used': int(peak),
  }


def optimization_barrier_(tensors: List[torch.Tensor]):
  """Keeps the compiler from moving computation across this point for
  tensors (PyTorch/XLA uses it to keep gradient checkpointing from being
  undone, and FSDP to keep gradients from being fused across layers).
  Records one optimization barrier over all of them (the engine's
  OPT_BARRIER op: `opt-barrier` in HLO text, stablehlo.optimization_barrier
  in StableHLO) and replaces each tensor's value in place by its result;
  the values do not change. Tensors on several devices get one barrier per
  device."""
  for t in tensors:
    if not isinstance(t, torch.Tensor):
      raise TypeError(f'optimization_barrier_ expects tensors, got {type(t).__name__}')
  from torchtpu import ir
  handles = [bridge.handle_of(t) for t in tensors]
  by_device = {}
  for pos, h in enumerate(handles):
    by_device.setdefault(h.device, []).append(pos)
  for positions in by_device.values():
    group = [handles[pos] for pos in positions]
    results = [ir.opt_barrier(*group, index=k) for k in range(len(group))]
    for pos, old, h in zip(positions, group, results):
      # The barrier is the identity: a sharding annotation on the value
      # (an FSDP gradient's) stays with the tensor's new value.
      spec = _C.sharding_get(old)
      if spec is not None:
        _C.sharding_set(h, spec)
      bridge.replace_value(tensors[pos], h)


# ------------------------------------------------------------ StableHLO
def _stablehlo_handles(tensors):
    """Engine handles of tensors, or of every live tensor with pending IR
    on the current device when tensors is None or empty (the whole graph a
    sync would cut)."""
    import torch_xla.distributed.spmd as xs
    xs.reapply_shardings()  # annotations survive in-place updates
    if tensors:
        return [bridge.handle_of(t) for t in tensors]
    import gc
    dev = bridge.current_device_index()
    seen, handles = set(), []
    for o in gc.get_objects():
        if type(o) is bridge.XlaTensor:  # exact: isinstance would probe every object
            h = o._h
            if h.pending and h.device == dev and id(h) not in seen:
                seen.add(id(h))
                handles.append(h)
    return handles


def get_stablehlo(tensors=None):
    """StableHLO text (an MLIR module with one function, @main) of the graph
    that computes tensors; with tensors None or empty, of every pending
    tensor on the current device. @main's arguments are the graph's inputs
    (device data, and runtime scalars as 0-d tensors), its results the
    tensors in order. Nothing is executed. See docs/stablehlo.md."""
    return _C.stablehlo_text(_stablehlo_handles(tensors))


def _mlir_opt():
    """Path of MLIR's mlir-opt (LLVM 19), or None."""
    import os
    import shutil
    for name in ("mlir-opt-19", "/usr/lib/llvm-19/bin/mlir-opt", "mlir-opt"):
        path = shutil.which(name)
        if path and os.access(path, os.X_OK):
            return path
    return None


def get_stablehlo_bytecode(tensors=None):
    """get_stablehlo's module as MLIR bytecode (bytes). The engine writes
    text; the bytecode is made by MLIR's own mlir-opt (package
    mlir-19-tools), so this raises RuntimeError when that is not
    installed."""
    import subprocess
    text = get_stablehlo(tensors)
    tool = _mlir_opt()
    if tool is None:
        raise RuntimeError("get_stablehlo_bytecode needs mlir-opt (apt-get install mlir-19-tools); "
                           "use get_stablehlo for the text form")
    r = subprocess.run([tool, "--allow-unregistered-dialect", "--emit-bytecode"],
                       input=text.encode(), capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("mlir-opt rejected the StableHLO module: " +
                           r.stderr.decode(errors="replace")[-2000:])
    return r.stdout
