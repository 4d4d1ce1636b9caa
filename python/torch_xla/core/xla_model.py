"""torch_xla.core.xla_model (xm): the classic PyTorch/XLA API."""
import sys
import threading
import time

import torch

import torch_xla
from torch_xla import runtime as xr
from torchtpu import _C, bridge, config
from torchtpu.lowering import misc_ops as _rng

XLA_LIB = None

# Collectives (torchtpu/collectives.py): recorded as IR ops, lowered to the
# StableHLO collectives; the engine runs one participant per group.
from torchtpu.collectives import (  # noqa: E402,F401
    REDUCE_AND, REDUCE_MAX, REDUCE_MIN, REDUCE_MUL, REDUCE_OR, REDUCE_SUM, all_gather,
    all_reduce, all_to_all, collective_permute, reduce_scatter)


def xla_device(n=None, devkind=None):
    """The xla device n (the current one when None). devkind is accepted for
    compatibility; only this runtime's kind exists."""
    if devkind is not None and devkind.upper() != config.device_type():
        raise RuntimeError(f"No devices of kind {devkind} (this runtime has {config.device_type()})")
    return torch_xla.device(n)


def xla_devices(devkind=None):
    return torch_xla.devices()


def xla_device_hw(device):
    """Hardware type of an xla device ('CPU')."""
    if isinstance(device, str):
        device = torch.device(device)
    if device.type != "xla":
        raise RuntimeError(f"Invalid device: {device}")
    return config.device_type()


def get_xla_supported_devices(devkind=None, max_devices=None):
    devs = [str(d) for d in torch_xla.devices()]
    return devs[:max_devices] if max_devices else devs


def xrt_world_size(defval=1):
    return xr.world_size()


def get_ordinal(defval=0):
    return xr.global_ordinal()


def get_local_ordinal(defval=0):
    return xr.local_ordinal()


def is_master_ordinal(local=True):
    return (xr.local_ordinal() if local else xr.global_ordinal()) == 0


def master_print(*args, fd=sys.stdout, finish=False, **kwargs):
    if is_master_ordinal(local=False):
        print(*args, file=fd, **kwargs)


def is_xla_tensor(tensor):
    return torch_xla.is_xla_tensor(tensor)


# ------------------------------------------------------------ step closures
_step_closures = []
_closure_lock = threading.Lock()


def add_step_closure(closure, args=(), run_async=False):
    """Runs closure(*args) after the next sync (mark_step), when the values
    it reads are materialised."""
    with _closure_lock:
        _step_closures.append((closure, args))


def _run_step_closures():
    with _closure_lock:
        pending = list(_step_closures)
        _step_closures.clear()
    for closure, args in pending:
        closure(*args)


def mark_step(wait=False, reset_scope=True):
    torch_xla.sync(wait=wait, reset_scope=reset_scope)


def wait_device_ops(devices=[]):
    """Blocks until all queued device work has finished."""
    config.ensure_runtime()
    if not devices:
        _C.wait(-1)
    else:
        for d in devices:
            _C.wait(bridge.device_index(torch.device(d) if isinstance(d, str) else d))


def optimizer_step(optimizer, barrier=False, optimizer_args={}, groups=None, pin_layout=True):
    """Reduces gradients across replicas (a no-op for one process), steps the
    optimizer, and with barrier=True cuts the graph."""
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**optimizer_args)
    if barrier:
        mark_step()
    return loss


def reduce_gradients(optimizer, groups=None, pin_layout=True):
    # One process: gradients are already the global ones.
    if xr.world_size() > 1:
        raise NotImplementedError("multi-process gradient reduction needs torch_xla.launch")


def set_rng_state(seed, device=None):
    """Seeds the device RNG of device (the current one when None)."""
    index = bridge.device_index(device)
    _rng.set_rng_state(seed, index)


def get_rng_state(device=None):
    index = bridge.device_index(device)
    return _rng.get_rng_state(index)[0]


def get_memory_info(device=None):
    index = bridge.device_index(device)
    in_use, peak = _C.memory_stats(index)
    return {"bytes_used": in_use, "peak_bytes_used": peak, "bytes_limit": 0}


def send_cpu_data_to_device(datas, device, input_sharding=None):
    """Moves every tensor in a nested structure to device."""
    def to(x):
        return x.to(device) if isinstance(x, torch.Tensor) else x
    return torch.utils._pytree.tree_map(to, datas)


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
    import os
    from torch_xla.utils import serialization as xser
    should_write = not master_only or is_master_ordinal(local=not global_master)
    cpu_data = _maybe_convert_to_cpu(data, convert=should_write)
    if should_write:
        if isinstance(file_or_path, (str, os.PathLike)):
            xser._atomic_torch_save(cpu_data, file_or_path)
        else:
            torch.save(cpu_data, file_or_path)


class RateTracker:
    """Exponentially smoothed rate (e.g. samples/second) as PyTorch/XLA has it."""

    def __init__(self, smooth_factor=None):
        self._smooth_factor = 0.4 if smooth_factor is None else smooth_factor
        self._start_time = time.time()
        self._partial_time = self._start_time
        self._partial_count = 0.0
        self._partial_rate = None
        self._count = 0.0

    def _update(self, now, rate):
        self._partial_count += self._count
        self._count = 0.0
        self._partial_time = now
        self._partial_rate = rate

    def add(self, count):
        self._count += count

    def _smooth(self, current_rate):
        if self._partial_rate is None:
            smoothed_rate = current_rate
        else:
            smoothed_rate = ((1 - self._smooth_factor) * current_rate +
                             self._smooth_factor * self._partial_rate)
        return smoothed_rate

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
