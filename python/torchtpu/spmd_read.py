"""Reading and re-laying a value sharded over several processes
(docs/spmd.md "Several processes").

Contract: in SPMD mode under torchrun with more than one process, each
process holds only the shards of its own devices. gathered(handle) returns
a handle whose value is handle's, held whole in this process: for a
tensor held as shards, a copy annotated replicated is run through the
partitioner, whose all-gather crosses the processes (so every process
must read the same value at the same point, as with PyTorch/XLA's
multi-host SPMD); any other handle is returned as it is. One process:
nothing changes (the shards are all here).

relaid(t, handle, spec) is the value of xla tensor t (engine handle
handle) moved to the layout of annotation spec (None: replicated) before
the annotation changes: when t is held as shards over several processes
in another layout, a copy annotated spec runs through the partitioner
(its collectives move the shards between processes; every process must
re-annotate together) and t takes that copy's value; otherwise handle is
returned and the engine re-lays it itself."""
from torchtpu import _C, ir, processes


def _stored(handle):
    """handle's storage layout when it is held as shards over several
    processes, else None."""
    if not processes.launched() or not _C.spmd_partitioning():
        return None
    return _C.tensor_storage_layout(handle)  # runs handle's pending graph


def _copy_in(handle, spec):
    moved = ir.reshape(handle, dims=tuple(handle.shape))
    _C.sharding_set(moved, spec)
    _C.sync_tensors([moved], False)
    return moved


def gathered(handle):
    layout = _stored(handle)
    if layout is None:
        return handle
    return _copy_in(handle, ("replicated", (), (), False, layout[-1]))


def _same(a, b):
    return (b is not None and a[0] == b[0] and tuple(a[1]) == tuple(b[1])
            and tuple(a[2]) == tuple(b[2]) and bool(a[3]) == bool(b[3])
            and int(a[4]) == int(b[4]))


def relaid(t, handle, spec):
    if handle.pending:  # a pending value is annotated, not moved
        return handle
    layout = _stored(handle)
    if layout is None or _same(layout, spec):
        return handle
    from torchtpu import bridge
    moved = _copy_in(handle, spec or ("replicated", (), (), False, layout[-1]))
    bridge.replace_value(t, moved)
    return bridge.handle_of(t)
