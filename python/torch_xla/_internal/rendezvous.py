"""The `xla://` init method of torch.distributed (registered by
torch_xla.distributed.xla_backend): rank and world size come from the xla
runtime, so `dist.init_process_group("xla", init_method="xla://")` needs no
RANK / WORLD_SIZE of its own.

Ranks are one per process: torch.distributed keeps its default group per
process, so the rank is the process's replica ordinal (xr.global_ordinal())
and the world is xr.world_size(). A torch_xla.launch / xmp.spawn that runs
several replicas as threads of this process cannot give each thread a rank
of that one group; there the handler (and the xla backend) raise a
RuntimeError saying so (refuse_threaded_launch). Under SPMD the ranks are
process indices, as in PyTorch/XLA.

The store is what the process group uses to meet: a TCPStore at
MASTER_ADDR:MASTER_PORT (defaults localhost:12355) hosted by process 0 when
several processes take part; with one process an in-memory HashStore, so a
single-process program opens no port."""
import datetime
import threading

import torch.distributed as dist

import torch_xla.runtime as xr
import torch_xla.utils.utils as xu

_store = None
_store_lock = threading.Lock()


def refuse_threaded_launch():
    """RuntimeError when the calling thread is one of several replica
    threads of this process (a multi-device torch_xla.launch): the default
    process group is per process, the replicas are per thread."""
    from torchtpu import replicas
    if replicas.current() is None or xr.world_size() <= xr.process_count():
        return
    raise RuntimeError(
        f"torch.distributed's 'xla' process group cannot be created inside a torch_xla.launch "
        f"(or xmp.spawn) that runs {xr.world_size()} replicas as threads of one process: "
        "the default process group is per process, so the replica threads cannot each be a "
        "rank of it. Inside the launch use the xm collectives (xm.all_reduce, xm.all_gather, "
        "xm.reduce_scatter, ...), which run over the replica threads; or run one process per "
        "device (launch with nprocs=1, or no launch) and init_process_group('xla') in each.")


def _make_store(timeout):
    if xr.process_count() == 1:
        return dist.HashStore()
    host = xu.getenv_as("MASTER_ADDR", str) or "localhost"
    port = xu.getenv_as("MASTER_PORT", int, 12355)
    kwargs = {} if timeout is None else {"timeout": timeout}
    return dist.TCPStore(host, port, xr.process_count(), is_master=xr.process_index() == 0,
                         **kwargs)


def pjrt_rendezvous_handler(url: str, timeout: datetime.timedelta = None, **kwargs):
    """Yields (store, rank, world_size) once, as torch.distributed's
    rendezvous handlers do; the store is shared by every group of the
    process."""
    global _store
    if not xr.is_spmd():
        refuse_threaded_launch()
    with _store_lock:
        if _store is None:
            _store = _make_store(timeout)
    if xr.is_spmd():  # one rank per process, as PyTorch/XLA does under SPMD
        yield (_store, xr.process_index(), xr.process_count())
    else:
        yield (_store, xr.global_ordinal(), xr.world_size())
