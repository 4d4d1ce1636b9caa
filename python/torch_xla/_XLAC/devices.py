"""_XLAC's runtime and device calls over the engine's runtime.

Device strings are PyTorch/XLA's: 'xla:N' for PyTorch devices,
'<TYPE>:N' (e.g. 'CPU:0') for runtime devices."""
import torch

from torchtpu import _C, bridge, config

_state = {"replication_devices": []}


def _index(device):
    """Engine device index of 'xla:N', 'CPU:N', torch.device or '' (current)."""
    if device in (None, ""):
        return bridge.current_device_index()
    if isinstance(device, torch.device):
        return bridge.device_index(device)
    text = str(device)
    kind, _, n = text.partition(":")
    if kind.lower() == "xla":
        return bridge.device_index(torch.device(text))
    if kind.upper() == config.device_type() and n.isdigit():
        index = int(n)
        if index >= config.ensure_runtime():
            raise RuntimeError(f"Invalid device {text}: {config.ensure_runtime()} device(s)")
        return index
    raise RuntimeError(f"Invalid device specification: {text}")


def _init_computation_client():
    config.ensure_runtime()


def _xla_runtime_is_initialized():
    return config.runtime_initialized()


def _xla_get_devices():
    return [f"{config.device_type()}:{i}" for i in range(config.ensure_runtime())]


_xla_get_all_devices = _xla_get_devices
_xla_get_runtime_devices = _xla_get_devices
_xla_get_all_runtime_devices = _xla_get_devices


def _xla_num_devices():
    return config.ensure_runtime()


_xla_num_runtime_devices = _xla_num_devices
_xla_num_global_devices = _xla_num_devices


def _xla_real_devices(devices=None):
    """Runtime device names of the given xla devices (all local ones when None)."""
    if devices is None:
        return _xla_get_devices()
    return [f"{config.device_type()}:{_index(d)}" for d in devices]


def _xla_device_kind(device=""):
    _index(device)
    return config.device_type()


def _xla_get_default_device():
    return f"xla:{bridge.current_device_index()}"


def _xla_get_default_device_ordinal():
    return bridge.current_device_index()


def _xla_set_default_device(device):
    bridge.set_current_device_index(_index(device))


def _xla_get_device_ordinal(device):
    return _index(device)


def _xla_get_process_index():
    return 0


def _xla_get_num_processes():
    return 1


def _xla_set_replication_devices(devices):
    _state["replication_devices"] = [str(d) for d in devices]


def _xla_get_replication_devices():
    return list(_state["replication_devices"])


def _xla_get_replication_devices_count():
    return len(_state["replication_devices"])


def _xla_memory_info(device=""):
    """{'bytes_used', 'bytes_limit', 'peak_bytes_used'} of a device."""
    from torch_xla.core import xla_model as xm
    return xm.get_memory_info(torch.device("xla", _index(device)))


def _xla_wait_device_ops(devices=()):
    config.ensure_runtime()
    if not devices:
        _C.wait(-1)
        return
    for d in devices:
        _C.wait(_index(d))


def _xla_step_marker(device="", devices=(), wait=True, reset_scope=True):
    """A step boundary: syncs every device's pending work (PyTorch/XLA
    cuts the graph of device, or of the current one)."""
    import torch_xla
    torch_xla.sync(wait=wait)


def _xla_sync_multi(tensors, devices, wait=True, sync_xla_data=True):
    """Cuts and runs the graphs computing tensors (one per device)."""
    config.ensure_runtime()
    handles = [bridge.handle_of(t) for t in tensors]
    if handles:
        _C.sync_tensors(handles, bool(wait))


def _xla_warm_up_cache(tensors, devices):
    """PyTorch/XLA compiles without executing; here the graph is compiled
    and run (this engine has no compile-only path)."""
    _xla_sync_multi(tensors, devices, wait=False)


def _xla_tensors_from_aten(tensors, devices, shardings=None):
    """Copies of CPU tensors on the given xla devices (one device string
    per tensor), keeping requires_grad."""
    if len(devices) != len(tensors):
        raise RuntimeError(f"_xla_tensors_from_aten: {len(tensors)} tensors but "
                           f"{len(devices)} devices")
    out = []
    for i, (t, d) in enumerate(zip(tensors, devices)):
        index = _index(d)
        if t.dtype in bridge.TORCH_TO_TT:
            # Straight to device data: `.to()` would first make an empty
            # (pending) xla tensor that a sync on another thread could
            # catch and compile, as the data loader's transfer thread does.
            x = bridge.wrap_user(bridge.upload(t, index))
        else:
            x = t.detach().to(torch.device("xla", index))
        if shardings is not None and shardings[i] is not None:
            from torch_xla._XLAC.sharding import _xla_mark_sharding
            _xla_mark_sharding(x, shardings[i])
        elif _C.spmd_virtual_device():
            # PyTorch/XLA's virtual device loads data without a sharding
            # replicated over every device, and the tensor says so.
            from torch_xla.distributed.spmd import annotations
            annotations.set_replicated(x)
        out.append(x.requires_grad_(t.requires_grad) if t.is_floating_point() else x)
    return out


def _xla_get_cpu_tensors(tensors):
    return [t.cpu() for t in tensors]


def _xla_get_num_cached_compilation_graph():
    return _C.cached_graphs()


def _xla_computation_cache_is_initialized():
    return config.runtime_initialized()


def _get_xla_tensor_dimension_size(tensor, dim):
    return torch.tensor(tensor.shape[dim], dtype=torch.int32, device=tensor.device)


def _get_git_revs():
    import torch_xla
    return {"torch": torch.__version__, "xla": torch_xla.__version__}
