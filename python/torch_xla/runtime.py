"""torch_xla.runtime (xr): facts about the PJRT-style runtime, with
PyTorch/XLA 2.9's names, signatures and return types.

Each process drives CPU_NUM_DEVICES devices of one kind ('CPU'). Inside
torch_xla.launch / xmp.spawn each device's thread is a replica
(torchtpu.replicas): world_size() is the device count and the ordinals are
the thread's device index; outside a launch world_size() is 1 and every
ordinal is 0. Under torchrun with several processes (torchtpu.processes)
process RANK of WORLD_SIZE holds the replicas RANK * L .. RANK * L + L - 1
(L = CPU_NUM_DEVICES): world_size() is WORLD_SIZE * L everywhere in the
process and a thread outside a launch is the replica of its device.
"""
import os
from typing import Dict, List, Optional

from torchtpu import _C, config

import torch_xla.core.xla_env_vars as xenv


def set_device_type(pjrt_device: str) -> None:
    """Sets PJRT_DEVICE. Must be called before any xla device is used;
    changing the type afterwards raises RuntimeError."""
    if config.runtime_initialized() and os.environ.get(xenv.PJRT_DEVICE) != pjrt_device:
        raise RuntimeError("Can't change device type after XLA runtime is initialized")
    os.environ[xenv.PJRT_DEVICE] = pjrt_device
    if not config.runtime_initialized():
        config._device_type = None  # validated again, from the new value, at start


def device_type() -> Optional[str]:
    """The runtime's device type ('CPU' here)."""
    return config.device_type()


def is_bf16_supported() -> bool:
    """Whether torch.bfloat16 tensors can be made on the xla device."""
    import torch
    try:
        torch.tensor([1.], dtype=torch.bfloat16, device='xla')
        return True
    except Exception:
        return False


def using_pjrt() -> bool:
    return True


def world_size() -> int:
    """Number of replicas: the devices of a launch inside one of its
    threads, else 1."""
    from torchtpu import replicas
    return replicas.world_size()


def global_ordinal() -> int:
    """This replica's ordinal among all replicas (its device index inside
    a launch; 0 outside)."""
    from torchtpu import replicas
    return replicas.ordinal()


def local_ordinal() -> int:
    """This replica's ordinal on its host: PJRT_LOCAL_PROCESS_RANK times
    the devices per process plus its device's index in this process."""
    from torchtpu import processes, replicas
    local_rank = int(os.environ.get(xenv.PJRT_LOCAL_PROCESS_RANK) or 0)
    in_process = replicas.ordinal() - processes.device_base()
    return local_rank * addressable_device_count() + in_process


def process_index() -> int:
    """This process's index in the job (torchrun's RANK; 0 alone)."""
    from torchtpu import processes
    return processes.index() if processes.launched() else 0


def process_count() -> int:
    """Processes in the job (torchrun's WORLD_SIZE; 1 alone)."""
    from torchtpu import processes
    return processes.count() if processes.launched() else 1


def host_index() -> int:
    """Index of this host in a multi-host job (0: one host)."""
    return 0


def local_process_count() -> int:
    """Processes on this host (PJRT_LOCAL_PROCESS_COUNT, default 1)."""
    raw = os.environ.get(xenv.PJRT_LOCAL_PROCESS_COUNT)
    return 1 if raw is None else int(raw)


def global_device_count() -> int:
    """Devices of the whole job, every process's (1 in SPMD mode: one virtual device)."""
    n = config.ensure_runtime()
    return 1 if is_spmd() else n * process_count()


def local_device_count() -> int:
    """Devices on this host: processes on the host times devices per
    process."""
    return local_process_count() * addressable_device_count()


def addressable_device_count() -> int:
    """Devices this process drives (1 in SPMD mode: one virtual device)."""
    n = config.ensure_runtime()
    return 1 if is_spmd() else n


def global_runtime_device_count() -> int:
    """Runtime devices of the whole job (the same as global_device_count
    outside SPMD's single virtual device)."""
    return config.ensure_runtime() * process_count()


def addressable_runtime_device_count() -> int:
    """Runtime devices this process drives."""
    return config.ensure_runtime()


def _device_attributes(index: int) -> Dict[str, object]:
    return {
        'name': f'{device_type()}:{index}',
        'id': index,
        'process_index': process_index(),
        'device_kind': 'cpu',
        'core_on_chip': 0,
        'coords': [index, 0, 0],
    }


def runtime_device_attributes(device: str) -> Dict[str, object]:
    """Attributes of a runtime device named like 'CPU:0' (see
    global_runtime_device_attributes)."""
    kind, _, index = str(device).partition(':')
    n = config.ensure_runtime()
    if kind.upper() != device_type() or not index.isdigit() or int(index) >= n:
        raise RuntimeError(
            f"Invalid device {device!r}: runtime devices are "
            f"{device_type()}:0..{device_type()}:{n - 1}")
    return _device_attributes(int(index))


def global_runtime_device_attributes() -> List[Dict[str, object]]:
    """One dict per runtime device: name, id, process_index, device_kind,
    core_on_chip and coords (the values a PJRT CPU client reports)."""
    return [_device_attributes(i) for i in range(config.ensure_runtime())]


def get_master_ip() -> str:
    """The master worker's IP; only TPU and Neuron runtimes can discover
    it, so this raises RuntimeError here as it does on CPU upstream."""
    raise RuntimeError(f'IP discovery not supported for device: {device_type()}')


def save(data, file_or_path, master_only: bool = True, global_master: bool = False):
    """xm.save: saves data with its xla tensors moved to the CPU."""
    from torch_xla.core import xla_model as xm
    xm.save(data, file_or_path, master_only=master_only, global_master=global_master)


# SPMD mode: on after use_spmd(), or when XLA_USE_SPMD was set at import
# (PyTorch/XLA reads that variable; deleting it turns the mode off again).
_spmd = os.environ.get("XLA_USE_SPMD", "").lower() in ("1", "true", "yes")


def _start_spmd_partitioning():
    """The engine's partitioned execution on (each annotated program runs as
    one program per device, tiled values held as shards; docs/spmd.md
    "Partitioned execution"), unless TORCHTPU_SPMD_PARTITION=0 keeps sharded
    programs running whole on one device."""
    off = os.environ.get("TORCHTPU_SPMD_PARTITION", "1").strip().lower() in ("0", "false", "no")
    _C.spmd_set_partitioning(not off)
    # PyTorch/XLA's virtual device: data copied to xla stays on the host
    # until used or sharded, every execution is a replicated one.
    _C.spmd_set_virtual_device(True)


if _spmd:
    _start_spmd_partitioning()


def use_spmd(auto=False):
    """Turns on SPMD mode: programs are written for the whole mesh and
    annotated with torch_xla.distributed.spmd.mark_sharding. Here the engine
    runs each annotated program partitioned, one program per device, each
    device holding only its shards (docs/spmd.md "Partitioned execution");
    xs.run_spmd partitions through a PJRT plugin.
    auto=True (XLA's auto-sharding) is not supported."""
    global _spmd
    if auto:
        raise NotImplementedError("use_spmd(auto=True): XLA auto-sharding is not supported")
    _spmd = True
    os.environ["XLA_USE_SPMD"] = "1"
    _start_spmd_partitioning()


def is_spmd():
    """True after use_spmd() while XLA_USE_SPMD stays set."""
    return _spmd and os.environ.get("XLA_USE_SPMD", "").lower() in ("1", "true", "yes")


def initialize_cache(path: str, readonly: bool = False):
    """Keeps tier-1 compiled kernels in `path` across processes (several
    processes may share it); with readonly=True the directory is only read.
    Entries are keyed by graph hash, engine version, compile flags and CPU
    features, written atomically and verified when loaded. Tier-0 graphs
    compile in microseconds and are not persisted."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"initialize_cache expects a directory path, got {path!r}")
    _C.persistent_cache_init(path, bool(readonly))


def get_num_cached_compilation_graph():
    """Number of graphs in the in-memory compilation cache."""
    return _C.cached_graphs()
