"""Each device's shard of a sharded tensor, computed from its global value.

Contract (PyTorch/XLA's local-shard semantics, on an engine whose own
backend does not split data: every shard is cut on the host from the
tensor's global value, so it is exactly what a partitioned backend would
hold):
- layout(spec, shape) -> [(replica_id, indices)] for devices 0..n-1 of the
  annotation. indices is Ellipsis for a replicated tensor, else one
  slice(start, stop, 1) per dim into the global tensor, without padding.
  Shard length along a dim cut into t tiles is ceil(dim / t) (XLA's shard
  shape); the last shards may be short or empty and are zero-padded.
  replica_id: 0 for tiled, the index in the replication group for partial
  replication, the device ordinal for replicated.
- shards(value, spec) -> [padded CPU tensor] in the same device order.
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


def device_names(spec):
    """The runtime device names of the annotation's devices ('CPU:0', ...)."""
    from torchtpu import config
    return [f"{config.device_type()}:{d}" for d in range(num_devices(spec))]

