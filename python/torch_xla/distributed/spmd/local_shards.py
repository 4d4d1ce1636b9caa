"""Each device's shard of a sharded tensor.

Contract (PyTorch/XLA's local-shard semantics). In SPMD mode the engine
holds a tiled tensor as shards, one buffer per device (docs/spmd.md
"Partitioned execution"): held(t, spec) / load_held(t, spec, pieces) read
and write those buffers themselves. A tensor not held in its annotation's
layout (replicated, or partitioning switched off) has its shards cut on the
host from its global value (shards(value, spec)): the same values and
indices.
- layout(spec, shape) -> [(replica_id, indices)] for devices 0..n-1 of the
  annotation. indices is Ellipsis for a replicated tensor, else one
  slice(start, stop, 1) per dim into the global tensor, without padding.
  Shard length along a dim cut into t tiles is ceil(dim / t) (XLA's shard
  shape); the last shards may be short or empty and are zero-padded.
  replica_id: 0 for tiled, the index in the replication group for partial
  replication, the device ordinal for replicated.
- shards_of(t, spec) -> [padded CPU tensor] in device order: the held
  shards when t is held in spec's layout, else shards(t's value, spec);
  only the devices of local_devices(spec).
- local_devices(spec) -> the annotation's devices this process drives:
  all of them, except in SPMD mode under torchrun with several processes,
  where it holds only its own devices' shards (global ids device_base ..
  device_base + L - 1; docs/spmd.md "Several processes"), as PyTorch/XLA's
  local shards are the addressable devices'. device_names(spec) names
  those devices (global ids).
- assemble(shards, spec, shape) -> the global value from padded shards
  (refusing a wrong count or shard shape with RuntimeError, as
  PyTorch/XLA's shard loading does).
"""
import numpy as np
import torch


def _coords(spec, device):
    """The tile coordinates (one per tile dim) device holds under spec."""
    _kind, tile_dims, devices, _last, _n = spec
    return np.unravel_index(list(devices).index(device), tile_dims)


def num_devices(spec):
    return int(spec[4])


def layout(spec, shape):
    kind, tile_dims, _devices, last, n = spec
    out = []
    for d in range(n):
        if kind != "tiled":
            out.append((d, Ellipsis))
            continue
        c = _coords(spec, d)
        idx = []
        for i, size in enumerate(shape):
            step = -(-size // tile_dims[i]) if size else 0
            start = min(int(c[i]) * step, size)
            idx.append(slice(start, min(start + step, size), 1))
        out.append((int(c[-1]) if last else 0, idx))
    return out


def shard_shape(spec, shape):
    if spec[0] != "tiled":
        return tuple(shape)
    return tuple(-(-s // t) for s, t in zip(shape, spec[1]))


def shards(value, spec):
    shape = tuple(value.shape)
    full = shard_shape(spec, shape)
    out = []
    for _replica, idx in layout(spec, shape):
        if idx is Ellipsis:
            out.append(value.clone())
            continue
        piece = value[tuple(idx)]
        if tuple(piece.shape) != full:
            padded = torch.zeros(full, dtype=value.dtype)
            padded[tuple(slice(0, s) for s in piece.shape)] = piece
            piece = padded
        out.append(piece.contiguous().clone())
    return out


def assemble(pieces, spec, shape, dtype):
    """The global tensor (CPU) from one padded shard per device."""
    n = num_devices(spec)
    if len(pieces) != n:
        raise RuntimeError(f"Expected {n} shards (one per device of the sharding), got "
                           f"{len(pieces)}")
    if spec[0] != "tiled":
        raise RuntimeError("Loading local shards requires a tiled sharding: a replicated "
                           "tensor has one value, assign it instead")
    full = shard_shape(spec, shape)
    out = torch.zeros(tuple(shape), dtype=dtype)
    for p, (_replica, idx) in zip(pieces, layout(spec, shape)):
        if tuple(p.shape) != full:
            raise RuntimeError(f"Shard of shape {tuple(p.shape)} does not match the sharding's "
                               f"shard shape {full}")
        out[tuple(idx)] = p[tuple(slice(0, s.stop - s.start) for s in idx)].to(dtype)
    return out


def local_devices(spec):
    from torchtpu import _C, processes
    n = num_devices(spec)
    if not processes.launched() or not _C.spmd_partitioning():
        return list(range(n))
    base = processes.device_base()
    return [d for d in range(n) if base <= d < base + processes.local_devices()]


def device_names(spec):
    """The runtime device names of the annotation's local devices ('CPU:0', ...)."""
    from torchtpu import config
    return [f"{config.device_type()}:{d}" for d in local_devices(spec)]



def _same_spec(a, b):
    """Two spec tuples (kind, tile_dims, devices, last_tile_dim_replicate, n) alike."""
    return (a[0] == b[0] and tuple(a[1]) == tuple(b[1]) and tuple(a[2]) == tuple(b[2])
            and bool(a[3]) == bool(b[3]) and int(a[4]) == int(b[4]))


def held(t, spec):
    """t's shard buffers (padded CPU tensors, device order) when the engine
    holds t as shards laid out by spec; None otherwise."""
    from torchtpu import _C, bridge
    if spec[0] != "tiled":
        return None
    h = bridge.handle_of(t)
    stored = _C.tensor_storage_layout(h)
    if stored is None or not _same_spec(stored, spec):
        return None
    full = shard_shape(spec, tuple(t.shape))
    out = []
    for p in local_devices(spec):
        piece = torch.empty(full, dtype=bridge.TT_STORAGE_TORCH[h.dtype])
        _C.tensor_shard_to_host(h, p, piece.data_ptr(), piece.numel() * piece.element_size())
        out.append(piece if piece.dtype is t.dtype else piece.to(t.dtype))
    return out


def shards_of(t, spec):
    got = held(t, spec)
    if got is not None:
        return got
    every = shards(t.detach().cpu(), spec)
    return [every[d] for d in local_devices(spec)]


def load_held(t, spec, pieces):
    """Writes padded shards (device order) as t's held shards; False when
    the engine does not hold tensors as shards (the caller assigns the
    assembled value instead)."""
    from torchtpu import _C, bridge
    if spec[0] != "tiled" or not _C.spmd_partitioning():
        return False
    # A fresh value receives the shards (t's own engine value may be shared
    # with its clones); t then takes that value, as an assignment would.
    fresh = torch.empty(tuple(t.shape), dtype=t.dtype, device=t.device)
    h = bridge.handle_of(fresh)
    storage = bridge.TT_STORAGE_TORCH[h.dtype]
    full = shard_shape(spec, tuple(t.shape))
    data = []
    for p in pieces:
        if tuple(p.shape) != full:
            raise RuntimeError(f"Shard of shape {tuple(p.shape)} does not match the sharding's "
                               f"shard shape {full}")
        data.append(p.detach().to(storage).contiguous())
    nbytes = data[0].numel() * data[0].element_size()
    # pieces are local_devices(spec)'s (every device's in one process);
    # another process loads the others (0: none here).
    ptrs = [0] * num_devices(spec)
    for d, piece in zip(local_devices(spec), data):
        ptrs[d] = piece.data_ptr()
    _C.tensor_load_shards(h, spec, ptrs, nbytes)
    with torch.no_grad():
        t.copy_(fresh)
    return True
