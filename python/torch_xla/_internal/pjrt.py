"""torch_xla._internal.pjrt: the launcher under xmp.spawn and
torch_xla.launch.

Contract (PyTorch/XLA's semantics on a CPU host, docs/collectives.md):
- spawn(fn, nprocs=None) and run_multiprocess run the replicas in one new
  process started with `start_method`, one thread per xla device of
  CPU_NUM_DEVICES (default 1); each thread's default device is its own
  xla:i, and xr.world_size() / global_ordinal() / local_ordinal() /
  xm.get_ordinal() answer for that thread (torchtpu.replicas). The results
  come back as {ordinal: result}. They refuse to start once this process
  has used an xla device (PyTorch/XLA's RuntimeError): the new process must
  open the devices itself.
- An exception in one replica aborts the collectives (_C.collective_abort),
  so peers waiting for it fail instead of hanging; once every thread has
  ended, the first replica's exception to be raised is re-raised, its
  message prefixed with its ordinal ("[ordinal 1] ...", and a note).
- spawn(fn, nprocs=1) calls fn(0, *args) in this process on its current
  device, as the only replica; nprocs equal to the device count is the
  same as None; any other nprocs is PyTorch/XLA's ValueError.
- spawn_threads runs the replicas in threads of this process.
- Under torchrun with several processes (torchtpu.processes) spawn runs
  the replicas in threads of this process (its devices are the process's
  own): the thread of local device i is the replica with global ordinal
  process index x devices per process + i, in a world of every device of
  every process; results come back for this process's ordinals.
"""
import concurrent.futures
import functools
import os
import threading
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


def _name_ordinal(exc: BaseException, ordinal: int) -> BaseException:
    """exc with its message prefixed by the replica's ordinal (same type,
    same traceback) and a note saying which replica raised it."""
    tag = f'[ordinal {ordinal}]'
    if exc.args and isinstance(exc.args[0], str) and not exc.args[0].startswith(tag):
        exc.args = (f'{tag} {exc.args[0]}',) + tuple(exc.args[1:])
    elif not exc.args:
        exc.args = (tag,)
    if hasattr(exc, 'add_note'):
        exc.add_note(f'raised by the replica with ordinal {ordinal} (torch_xla.launch)')
    return exc


def _run_thread_per_device(local_rank: int, local_world_size: int, fn: Callable[[], R],
                           initializer_fn: Callable[[int, int], None]) -> Dict[int, R]:
    """Runs fn() in one thread per device of this process, each thread the
    replica of its device (see the contract); returns {ordinal: result}."""
    from torchtpu import _C, bridge, config, point_to_point, processes, replicas
    initializer_fn(local_rank, local_world_size)
    n = config.ensure_runtime()
    # Several processes: this process's replicas are a slice of the job's.
    base, world = processes.device_base(), max(n, processes.world_size())
    failures = []  # (ordinal, exception), in the order raised
    lock = threading.Lock()
    # Every replica starts on a thread of its own: the pool hands a task to
    # an idle thread, so a replica that finished before the next was
    # submitted would lend its thread, and the thread-local state it left
    # (accelerate's per-thread Accelerator state, for one) to the next.
    all_started = threading.Barrier(n)

    def _thread_fn(index: int):
        all_started.wait()
        ordinal = base + index
        replicas.enter(ordinal, world)
        bridge.set_current_device_index(index)
        # Per-thread autograd state: backward runs on the calling thread
        # (as bridge sets for the importing thread), not on a device queue.
        bridge._single_threaded_autograd()
        try:
            return fn()
        except BaseException as e:
            with lock:
                failures.append((ordinal, e))
            _C.collective_abort(f'replica {ordinal} raised {type(e).__name__}: {e}')
            point_to_point.abort(f'replica {ordinal} raised {type(e).__name__}: {e}')
            if processes.launched():  # the other processes' collectives name it
                from torchtpu import process_transport
                process_transport.publish_failure(e)
            raise
        finally:
            replicas.leave()

    _C.collective_reset()
    _C.collective_set_world_size(world)
    point_to_point.reset()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=n) as executor:
            try:
                futures = [executor.submit(_thread_fn, i) for i in range(n)]
            except BaseException:
                all_started.abort()  # the replicas started wait for no more
                raise
            concurrent.futures.wait(futures)
        # Work the replicas queued (collectives among it) runs with the
        # launch's replica count: wait for it before restoring 1.
        _C.wait(-1)
    finally:
        _C.collective_set_world_size(processes.world_size())
        _C.collective_reset()
    if failures:
        ordinal, exc = failures[0]
        raise _name_ordinal(exc, ordinal)
    return _merge_replica_results((base + i, f.result()) for i, f in enumerate(futures))


def run_multiprocess(fn: Callable[..., R], *args, start_method: str = 'spawn',
                     **kwargs) -> Dict[int, R]:
    """Runs fn(*args, **kwargs) on every device of this host, one thread
    per device, in a new process; returns {ordinal: result}."""
    import torch.multiprocessing
    from torchtpu import config
    config.check_runtime_not_initialized()
    num_processes = 1
    with concurrent.futures.ProcessPoolExecutor(
            max_workers=num_processes,
            mp_context=torch.multiprocessing.get_context(start_method)) as executor:
        body = functools.partial(_run_thread_per_device, local_world_size=num_processes,
                                 fn=functools.partial(fn, *args, **kwargs),
                                 initializer_fn=initialize_multiprocess)
        results = []
        for process_result in executor.map(body, range(num_processes)):
            results.extend(process_result.items())
    return _merge_replica_results(results)


class _SpawnFn:
    """Picklable fn(ordinal, *args) for the replicas."""

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
    from torchtpu import processes
    if processes.launched():  # torchrun started the processes: threads here
        _run_thread_per_device(local_rank=int(os.environ.get('LOCAL_RANK', 0)),
                               local_world_size=int(os.environ.get('LOCAL_WORLD_SIZE', 1)),
                               fn=spawn_fn, initializer_fn=initialize_multiprocess)
        return None
    if nprocs is not None:
        from torch_xla._internal import tpu
        if nprocs != tpu.num_available_devices():
            raise ValueError(
                'Unsupported nprocs (%d). Please use nprocs=1 or None (default). If None, spawn '
                'will use all available devices. Use the environment variable X_NUM_DEVICES '
                '(where X is CPU, TPU, NEURONCORE, etc) to limit the number of devices used.'
                % nprocs)
    run_multiprocess(spawn_fn, start_method=start_method)
    return None


def spawn_threads(fn: Callable, args: Tuple = ()) -> None:
    """fn(ordinal, *args) in one thread per device of this process."""
    _run_thread_per_device(local_rank=0, local_world_size=1, fn=_SpawnFn(fn, *args),
                           initializer_fn=initialize_multiprocess)
