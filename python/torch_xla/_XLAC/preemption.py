"""PyTorch/XLA's preemption sync point, by its _XLAC names.

Contract:
- _ensure_xla_coordinator_initialized(global_rank, world_size, master_addr,
  master_port=None): records the coordinator's address (PyTorch/XLA starts
  its distributed runtime client here; this engine has none, so the
  record is all there is). Returns None.
- _activate_preemption_sync_manager(): installs a SIGTERM handler that
  records the preemption notice (the previous handler is kept and put
  back by _deactivate_preemption_sync_manager). From the main thread
  only (Python's signal rule): ValueError otherwise.
- _sync_point_reached(step) -> bool: False until a notice arrived; the
  first call after it fixes the sync step and returns True for that step
  only (later steps are False, as PyTorch/XLA's manager answers). With an
  initialized torch.distributed group of several ranks every call takes
  part in one all_reduce (MAX) of the notice flag, so all ranks agree on
  the step even when one rank alone got the signal; every rank must then
  call it at the same steps. Without an active manager: RuntimeError.
"""
import signal
import threading

_state = {"coordinator": None, "active": False, "previous": None, "noticed": False,
          "sync_step": None}
_lock = threading.Lock()


def _ensure_xla_coordinator_initialized(global_rank, world_size, master_addr, master_port=None):
    if not isinstance(global_rank, int) or not isinstance(world_size, int):
        raise TypeError("global_rank and world_size must be ints")
    if not 0 <= global_rank < world_size:
        raise ValueError(f"global_rank {global_rank} is outside world_size {world_size}")
    _state["coordinator"] = (global_rank, world_size, master_addr, master_port)


def _on_sigterm(signum, frame):
    _state["noticed"] = True


def _activate_preemption_sync_manager():
    with _lock:
        if _state["active"]:
            return
        _state["previous"] = signal.signal(signal.SIGTERM, _on_sigterm)
        _state.update(active=True, noticed=False, sync_step=None)


def _deactivate_preemption_sync_manager():
    with _lock:
        if not _state["active"]:
            return
        signal.signal(signal.SIGTERM, _state["previous"] or signal.SIG_DFL)
        _state.update(active=False, previous=None, noticed=False, sync_step=None)


def _agreed_notice(noticed):
    import torch
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return noticed
    flag = torch.tensor([1 if noticed else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _sync_point_reached(step):
    if not _state["active"]:
        raise RuntimeError("The preemption sync manager is not active "
                           "(_activate_preemption_sync_manager)")
    if _state["sync_step"] is None and _agreed_notice(_state["noticed"]):
        _state["sync_step"] = step
    return _state["sync_step"] == step
