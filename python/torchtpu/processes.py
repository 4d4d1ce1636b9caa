"""The processes of a multi-process launch (torchrun; docs/collectives.md).

Contract: under torchrun (torch.distributed elastic: TORCHELASTIC_RUN_ID
set) with WORLD_SIZE > 1, this process is process RANK of WORLD_SIZE and
drives its own CPU_NUM_DEVICES devices (L, default 1, the same in every
process); the replica on its local device i has the global ordinal
RANK * L + i, and the job has WORLD_SIZE * L replicas. Anywhere else there
is one process (index 0 of 1) and nothing here changes the engine.

start(local_devices) runs once, when the runtime starts: it tells the
collective layer its place (_C.collective_set_process_layout), sets the
replica count for collectives over every replica, sets PyTorch/XLA's
PJRT_LOCAL_PROCESS_RANK / COUNT from torchrun's LOCAL_RANK /
LOCAL_WORLD_SIZE (unless set), and starts the cross-process transport
(torchtpu.process_transport).

store(timeout) is the job's TCPStore client (the torchrun agent's store
at MASTER_ADDR:MASTER_PORT when the agent offers one, as PyTorch/XLA's
xla:// rendezvous uses it; otherwise process 0 hosts it), made once and
shared by the transport and torch.distributed's xla:// init method."""
import datetime
import os
import threading

_store = None
_store_lock = threading.Lock()
_started = False


def launched():
    """Whether this process is one of several started by torchrun."""
    return bool(os.environ.get("TORCHELASTIC_RUN_ID")) and count() > 1


def _env_int(name, default):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise RuntimeError(f"{name} must be an integer, got {raw!r}") from None


def index():
    """This process's index among the job's processes (torchrun's RANK)."""
    if not os.environ.get("TORCHELASTIC_RUN_ID"):
        return 0
    return _env_int("RANK", 0)


def count():
    """The job's process count (torchrun's WORLD_SIZE)."""
    if not os.environ.get("TORCHELASTIC_RUN_ID"):
        return 1
    return max(1, _env_int("WORLD_SIZE", 1))


def local_devices():
    """Devices each process drives (CPU_NUM_DEVICES, default 1)."""
    from torchtpu import config
    return config.num_devices_from_env()


def device_base():
    """Global ordinal of this process's device 0."""
    return index() * local_devices() if launched() else 0


def world_size():
    """Replicas of the whole job outside an in-process launch: every
    device of every process under torchrun, else 1."""
    return count() * local_devices() if launched() else 1


def timeout_s():
    """TORCHTPU_COLLECTIVE_TIMEOUT_S (default 300), the deadline of every
    collective and of the transport's connections."""
    raw = os.environ.get("TORCHTPU_COLLECTIVE_TIMEOUT_S", "")
    try:
        value = float(raw) if raw.strip() else 300.0
    except ValueError:
        value = 300.0
    return value if value > 0 else 300.0


def store(timeout=None):
    """The job's TCPStore (see the contract), made once."""
    global _store
    import torch.distributed as dist
    with _store_lock:
        if _store is None:
            host = os.environ.get("MASTER_ADDR") or "localhost"
            port = _env_int("MASTER_PORT", 12355)
            if timeout is None:
                timeout = datetime.timedelta(seconds=timeout_s())
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
                attempt = _env_int("TORCHELASTIC_RESTART_COUNT", 0)
                tcp = dist.TCPStore(host, port, count(), is_master=False, timeout=timeout)
                _store = dist.PrefixStore(f"/worker/attempt_{attempt}", tcp)
            else:
                _store = dist.TCPStore(host, port, count(), is_master=index() == 0,
                                       timeout=timeout)
        return _store


def store_connection(timeout=None):
    """A new client connection to the job's store (the same keys as
    `store()`, which must have been made first): Gloo groups opened by
    concurrent transport threads each get their own socket, since one
    TCPStore client shared by threads that connect groups at the same
    time was seen to lose a peer's key."""
    import torch.distributed as dist
    store(timeout)
    host = os.environ.get("MASTER_ADDR") or "localhost"
    port = _env_int("MASTER_PORT", 12355)
    if timeout is None:
        timeout = datetime.timedelta(seconds=timeout_s())
    tcp = dist.TCPStore(host, port, count(), is_master=False, timeout=timeout,
                        wait_for_workers=False)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        attempt = _env_int("TORCHELASTIC_RESTART_COUNT", 0)
        return dist.PrefixStore(f"/worker/attempt_{attempt}", tcp)
    return tcp


def start(local_device_count):
    """Called once the runtime has started (torchtpu.config): see the
    contract. A no-op outside a multi-process launch."""
    global _started
    if _started or not launched():
        return
    _started = True
    from torchtpu import _C, process_transport
    os.environ.setdefault("PJRT_LOCAL_PROCESS_RANK", os.environ.get("LOCAL_RANK", "0"))
    os.environ.setdefault("PJRT_LOCAL_PROCESS_COUNT", os.environ.get("LOCAL_WORLD_SIZE", "1"))
    _C.collective_set_process_layout(index(), count(), int(local_device_count))
    _C.collective_set_world_size(count() * int(local_device_count))
    process_transport.start(index(), count(), int(local_device_count))
