"""Reading a value sharded over several processes (docs/spmd.md "Several
processes").

Contract: in SPMD mode under torchrun with more than one process, each
process holds only the shards of its own devices. gathered(handle) returns
a handle whose value is handle's, held whole in this process: for a
tensor held as shards, a copy annotated replicated is run through the
partitioner, whose all-gather crosses the processes (so every process
must read the same value at the same point, as with PyTorch/XLA's
multi-host SPMD); any other handle is returned as it is. One process:
nothing changes (the shards are all here)."""
from torchtpu import _C, ir, processes


def gathered(handle):
    if not processes.launched() or not _C.spmd_partitioning():
        return handle
    layout = _C.tensor_storage_layout(handle)  # runs handle's pending graph
    if layout is None:
        return handle
    whole = ir.reshape(handle, dims=tuple(handle.shape))
    _C.sharding_set(whole, ("replicated", (), (), False, layout[-1]))
    _C.sync_tensors([whole], False)
    return whole
