"""Manual SPMD regions: enable_manual_sharding / disable_manual_sharding.

Contract: enable_manual_sharding(t, spec, *, mesh=None) returns each
device's shard of t (shape ceil(dim / tiles)); collectives on it act per
device; disable_manual_sharding(t, spec, full_shape, *, mesh=None) makes
the shards the full tensor again. mesh defaults to the global mesh.
Both return plain xla tensors (PyTorch/XLA: XLAShardedTensor) so that
collectives (xm.all_reduce, ...) take them directly. In SPMD mode the
engine's own partitioner runs the region on every partition of the mesh
(docs/spmd.md "Partitioner", manual regions); outside it, only a
one-device mesh runs on the engine's own backend.
"""
from torchtpu import bridge, ir

from torch_xla.distributed.spmd import annotations
from torch_xla.distributed.spmd.mesh import spec_tuple


def _manual_sharding(mesh, partition_spec, rank, what):
    from torch_xla.distributed.spmd import get_global_mesh
    if mesh is None:
        mesh = get_global_mesh()
    if mesh is None:
        raise ValueError(f"{what}: no mesh given and no global mesh set (xs.set_global_mesh)")
    return manual_sharding_of(spec_tuple(mesh, partition_spec, rank), rank, what)


def manual_sharding_of(spec, rank, what):
    """The region ops' ManualSharding for an engine sharding tuple."""
    kind, tile_dims, devices, last, n = spec
    if kind == "manual":
        raise RuntimeError(f"{what}: a {{manual}} sharding does not say how to split")
    if kind == "replicated":  # every device holds the whole tensor
        tile_dims, devices, last = (1,) * rank + (n,), tuple(range(n)), True
    # The op's spec holds num_tile_dims, the replicate flag, the tile dims,
    # num_devices, the devices and (leaving a region) the full dims:
    # TT_MAX_IATTRS ints at most.
    if 3 + len(tile_dims) + len(devices) + rank > 32:
        raise ValueError(f"{what}: a sharding over {n} devices is too large for a manual region "
                         f"of a rank-{rank} tensor here")
    return ir.ManualSharding(tile_dims=tuple(tile_dims), last_tile_dim_replicate=bool(last),
                             devices=tuple(devices))


def enable_manual_sharding(t, partition_spec, *, mesh=None):
    """Enters a manual SPMD region: t split by partition_spec on mesh; the
    result is each device's own shard."""
    t = annotations.unwrap(t)
    annotations.check_xla(t, "enable_manual_sharding")
    spec = _manual_sharding(mesh, partition_spec, t.dim(), "enable_manual_sharding")
    return bridge.wrap_user(ir.spmd_full_to_shard(bridge.handle_of(t), spec=spec))


def disable_manual_sharding(t, partition_spec, full_shape, *, mesh=None):
    """Leaves a manual region: every device's shard t becomes the full
    tensor of full_shape, split by partition_spec on mesh."""
    t = annotations.unwrap(t)
    annotations.check_xla(t, "disable_manual_sharding")
    full_shape = tuple(int(d) for d in full_shape)
    spec = _manual_sharding(mesh, partition_spec, len(full_shape), "disable_manual_sharding")
    return bridge.wrap_user(ir.spmd_shard_to_full(bridge.handle_of(t),
                                                  spec=spec._replace(full_dims=full_shape)))


def mark_manual(t):
    """PyTorch/XLA's _mark_manual_sharding: annotates a computed (not
    device-data) tensor {manual}, the layout inside a manual region."""
    import torch_xla.runtime as xr
    from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShardedTensor
    g = annotations.unwrap(t)
    annotations.check_xla(g, "_mark_manual_sharding")
    if not bridge.handle_of(g).pending:
        raise RuntimeError("_mark_manual_sharding: a device data tensor cannot be marked "
                           "{manual}; mark the result of a computation inside the region")
    annotations.set_spec(g, ("manual", (), (), False, xr.global_runtime_device_count()),
                         "_mark_manual_sharding", check_existing=False)
    return t if isinstance(t, XLAShardedTensor) else XLAShardedTensor(g)


def full_to_shard_of_annotation(t):
    """_XLAC._spmd_full_to_shard_shape: enters a manual region split as t's
    own annotation says (RuntimeError when t has none)."""
    spec = annotations.spec_tuple_of(t)
    if spec is None:
        raise RuntimeError("_spmd_full_to_shard_shape: the tensor has no sharding annotation")
    ms = manual_sharding_of(spec, t.dim(), "_spmd_full_to_shard_shape")
    out = bridge.wrap_user(ir.spmd_full_to_shard(bridge.handle_of(t), spec=ms))
    # The shards are {manual}, as PyTorch/XLA reports them.
    annotations.set_spec(out, ("manual", (), (), False, spec[4]), "_spmd_full_to_shard_shape",
                         check_existing=False)
    return out


def shard_to_full_of(t, op_sharding, full_shape):
    """_XLAC._spmd_shard_to_full_shape: leaves a manual region; t must be
    annotated {manual} (RuntimeError otherwise)."""
    spec = annotations.spec_tuple_of(t)
    if spec is None or spec[0] != "manual":
        raise RuntimeError("_spmd_shard_to_full_shape: the tensor must carry a {manual} "
                           f"sharding, it has {annotations.get_sharding_spec(t) or 'none'}")
    full_shape = tuple(int(d) for d in full_shape)
    target = op_sharding.spec
    if getattr(op_sharding, "names_no_devices", False):
        target = target[:4] + (spec[4],)  # the region's devices
    ms = manual_sharding_of(target, len(full_shape), "_spmd_shard_to_full_shape")
    return bridge.wrap_user(ir.spmd_shard_to_full(bridge.handle_of(t),
                                                  spec=ms._replace(full_dims=full_shape)))
