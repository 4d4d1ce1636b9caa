"""torch_xla._internal.pjrt: the launcher under xmp.spawn and
torch_xla.launch.

Contract: the runtime runs one replica per process and one process per host
(xr.world_size() == 1; docs/clients.md), so every launch here runs `fn` as
that single replica, with ordinal 0:
- spawn(fn, nprocs=1) calls fn(0, *args) in this process;
- spawn(fn, nprocs=None) and run_multiprocess run it in one new process
  started with `start_method`, as PyTorch/XLA does on a CPU host, and
  refuse to start once this process has used an xla device (PyTorch/XLA's
  RuntimeError). PyTorch/XLA would run a replica on every device of the
  host; with more than one xla device (CPU_NUM_DEVICES > 1) they raise
  NotImplementedError rather than train on one device while the caller
  counts several;
- any other nprocs is PyTorch/XLA's ValueError.
spawn_threads (one thread per device in PyTorch/XLA) runs `fn` on the one
device there is; with several devices it raises NotImplementedError, since
replicas in threads of one process are not supported.
"""
import concurrent.futures
import os
from typing import Callable, Dict, Tuple, TypeVar

R = TypeVar('R')


def _merge_replica_results(replica_results):
    """[(ordinal, result), ...] -> {ordinal: result}; one result per ordinal."""
    results = {}
    for ordinal, result in replica_results:
        assert ordinal not in results, f'2 results for replica {ordinal}'
        results[ordinal] = result
    return results


def initialize_singleprocess():
    os.environ.setdefault('PJRT_LOCAL_PROCESS_COUNT', '1')


def initialize_multiprocess(local_rank: int, local_world_size: int):
    os.environ.setdefault('PJRT_LOCAL_PROCESS_RANK', str(local_rank))
    os.environ.setdefault('PJRT_LOCAL_PROCESS_COUNT', str(local_world_size))


def _run_singleprocess(fn: Callable[..., R], *args, **kwargs) -> R:
    initialize_singleprocess()
    return fn(*args, **kwargs)


def _run_replica(local_rank: int, local_world_size: int, fn: Callable[[], R]) -> Dict[int, R]:
    """Body of a launched process: the single replica of this host."""
    initialize_multiprocess(local_rank, local_world_size)
    import torch_xla.runtime as xr
    return {xr.global_ordinal(): fn()}


def run_multiprocess(fn: Callable[..., R], *args, start_method: str = 'spawn',
                     **kwargs) -> Dict[int, R]:
    """Runs fn(*args, **kwargs) as this host's replica in a new process;
    returns {ordinal: result}."""
    import functools
    import torch.multiprocessing
    from torchtpu import config
    from torch_xla._internal import tpu
    devices = tpu.num_available_devices()
    if devices > 1:
        raise NotImplementedError(
            f'xmp.spawn: {devices} xla devices on this host, but the runtime runs one replica '
            'per process and one process per host; set CPU_NUM_DEVICES=1, or use nprocs=1')
    config.check_runtime_not_initialized()
    num_processes = 1
    with concurrent.futures.ProcessPoolExecutor(
            max_workers=num_processes,
            mp_context=torch.multiprocessing.get_context(start_method)) as executor:
        body = functools.partial(_run_replica, local_world_size=num_processes,
                                 fn=functools.partial(fn, *args, **kwargs))
        results = []
        for process_result in executor.map(body, range(num_processes)):
            results.extend(process_result.items())
    return _merge_replica_results(results)


class _SpawnFn:
    """Picklable fn(ordinal, *args) for the launched process."""

    def __init__(self, fn: Callable[..., R], *args, **kwargs):
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def __call__(self):
        import torch_xla.runtime as xr
        return self.fn(xr.global_ordinal(), *self.args, **self.kwargs)


def spawn(fn: Callable, nprocs: int = None, start_method: str = 'spawn', args: Tuple = ()) -> None:
    """xmp.spawn: fn(ordinal, *args) on every replica (see the contract)."""
    spawn_fn = _SpawnFn(fn, *args)
    if nprocs == 1:
        _run_singleprocess(spawn_fn)
        return None
    if nprocs is not None:
        raise ValueError(
            'Unsupported nprocs (%d). Please use nprocs=1 or None (default). If None, spawn will '
            'use all available devices. Use the environment variable X_NUM_DEVICES (where X is '
            'CPU, TPU, NEURONCORE, etc) to limit the number of devices used.' % nprocs)
    run_multiprocess(spawn_fn, start_method=start_method)
    return None


def spawn_threads(fn: Callable, args: Tuple = ()) -> None:
    """fn(ordinal, *args) in one thread per addressable device: here the
    one device (see the contract)."""
    import torch_xla.runtime as xr
    n = xr.addressable_device_count()
    if n != 1:
        raise NotImplementedError(
            f'spawn_threads: {n} xla devices, but replicas in threads of one process are not '
            'supported (one replica per process here); use CPU_NUM_DEVICES=1')
    initialize_multiprocess(0, 1)
    _SpawnFn(fn, *args)()
