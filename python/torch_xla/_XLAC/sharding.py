"""_XLAC's sharding calls over torch_xla.distributed.spmd's annotations.

OpSharding(tile_assignment, group_assignment, replication_groups,
sharding_type) is built the way PyTorch/XLA builds its xla::OpSharding
(ShardingType numbering: REPLICATED 0, MAXIMAL 1, TUPLE 2, TILED 3,
MANUAL 4, PARTIAL 5, UNKNOWN 6) and held as the engine's sharding tuple.
Values are never partitioned by this engine's own backend: a tensor's
local shards are cut from its global value (torchtpu.spmd.shard_of), one
per runtime device of the annotation."""
import numpy as np

from torchtpu import _C, bridge


class OpSharding:
    """A sharding annotation, as PyTorch/XLA's _XLAC.OpSharding."""

    def __init__(self, tile_assignment, group_assignment, replication_groups, sharding_type):
        kind = int(sharding_type)
        tiles = np.asarray(tile_assignment, dtype=np.int64)
        # A replication that names no devices (XLA's HloSharding::Replicate())
        # fits any device count: a region leaving through it spans the
        # region's devices.
        self.names_no_devices = kind in (0, 1) and not tiles.size
        if kind in (0, 1):  # REPLICATED; MAXIMAL is replicated, as PyTorch/XLA makes it
            n = int(tiles.size) if tiles.size else 1
            self.spec = ("replicated", (), (), False, n)
        elif kind == 3:
            devices = tiles.reshape(-1).tolist()
            self.spec = ("tiled", tuple(tiles.shape), tuple(devices), False, len(devices))
        elif kind == 5:
            if len(replication_groups) == 0:
                raise RuntimeError("ShardingType.PARTIAL requires non-empty replication groups.")
            groups = np.asarray(group_assignment, dtype=np.int64)
            members = [list(g) for g in replication_groups]
            if groups.size != len(members):
                raise RuntimeError(f"PARTIAL sharding: {groups.size} tiles but "
                                   f"{len(members)} replication groups")
            devices = [int(d) for g in groups.reshape(-1).tolist() for d in members[g]]
            dims = tuple(groups.shape) + (len(members[0]),)
            self.spec = ("tiled", dims, tuple(devices), True, len(devices))
        else:
            names = {2: "TUPLE", 4: "MANUAL", 6: "UNKNOWN"}
            raise NotImplementedError(
                f"OpSharding of type {names.get(kind, kind)} is not supported here: only "
                "REPLICATED, MAXIMAL, TILED and PARTIAL annotations (use "
                "xs.enable_manual_sharding for manual regions)")
        self.type = kind

    def __repr__(self):
        return f"OpSharding({self.spec})"

    @classmethod
    def from_spec(cls, spec):
        """The OpSharding holding the engine sharding tuple spec (Mesh.get_op_sharding)."""
        op = cls.__new__(cls)
        op.spec = spec
        op.type = 0 if spec[0] == "replicated" else 4 if spec[0] == "manual" else (
            5 if spec[3] else 3)
        return op


def _xla_mark_sharding(tensor, op_sharding):
    import torch_xla.distributed.spmd as xs
    xs._check_xla(tensor, "_xla_mark_sharding")
    if not isinstance(op_sharding, OpSharding):
        raise TypeError(f"_xla_mark_sharding expects an OpSharding, got "
                        f"{type(op_sharding).__name__}")
    from torch_xla.distributed.spmd import annotations
    annotations.set_spec(tensor, op_sharding.spec, "_xla_mark_sharding", check_existing=True)


def _xla_annotate_custom_sharding(tensor, op_sharding):
    """Replaces tensor's annotation with op_sharding's (no existing-annotation check)."""
    from torch_xla.distributed.spmd import annotations
    if not isinstance(op_sharding, OpSharding):
        raise TypeError(f"_xla_annotate_custom_sharding expects an OpSharding, got "
                        f"{type(op_sharding).__name__}")
    annotations.set_spec(tensor, op_sharding.spec, "_xla_annotate_custom_sharding",
                         check_existing=False)


def _xla_get_auto_sharding():
    """Whether XLA's auto-sharding is on: never here (runtime.use_spmd
    refuses auto=True)."""
    return False


def _xla_clear_sharding(tensor):
    import torch_xla.distributed.spmd as xs
    xs.clear_sharding(tensor)


def _get_xla_sharding_spec(tensor):
    """HloSharding text ('{devices=[2,1]0,1}'), or '' when unannotated."""
    import torch_xla.distributed.spmd as xs
    return xs.get_sharding_spec(tensor)


def _get_xla_sharding_specs(tensors):
    return [_get_xla_sharding_spec(t) for t in tensors]


def _get_xla_sharding_type(tensor):
    import torch_xla.distributed.spmd as xs
    t = xs.get_sharding_type(tensor)
    return None if t is None else int(t)


def _sharded(tensor):
    from torch_xla.distributed.spmd import annotations
    spec = annotations.reported_spec_of(tensor)  # a synced value's layout counts too
    if spec is None:
        raise RuntimeError("Tensor is not sharded")
    return spec


def _get_local_shards(tensors):
    """For each sharded tensor, [(shard as a CPU tensor, 'CPU:i'), ...], one
    per device of its annotation in device order, shards zero-padded to
    XLA's shard shape (the engine's shard buffers, docs/spmd.md)."""
    from torch_xla.distributed.spmd import local_shards
    out = []
    for t in tensors:
        spec = _sharded(t)
        out.append(list(zip(local_shards.shards_of(t, spec), local_shards.device_names(spec))))
    return out


def _get_local_shard_replica_and_indices(tensors):
    """For each sharded tensor, [(replica_id, indices), ...] in device order."""
    from torch_xla.distributed.spmd import local_shards
    return [local_shards.layout(_sharded(t), tuple(t.shape)) for t in tensors]


def _load_local_shards(tensor, shards, devices):
    """Writes one padded CPU shard per device (devices: 'CPU:i' names) into tensor."""
    from torch_xla.distributed.spmd import local_shards
    import torch
    spec = _sharded(tensor)
    names = local_shards.device_names(spec)
    if len(shards) != len(devices) or sorted(devices) != sorted(names):
        raise RuntimeError(f"Shards are for devices {list(devices)}, the sharding's devices are "
                           f"{names}")
    order = {d: i for i, d in enumerate(names)}
    pieces = [s for _, s in sorted(zip(devices, shards), key=lambda p: order[p[0]])]
    if len(names) < local_shards.num_devices(spec):
        # Several processes: this one's devices only; the engine loads them.
        if not local_shards.load_held(tensor, spec, pieces):
            raise RuntimeError("Loading local shards over several processes needs SPMD mode")
        return
    value = local_shards.assemble(pieces, spec, tuple(tensor.shape), tensor.dtype)
    if local_shards.load_held(tensor, spec, pieces):  # each device gets its shard
        return
    with torch.no_grad():
        tensor.copy_(value.to(tensor.device))


def _global_tensor_from_cpu_shards(shards, op_sharding, global_shape=None):
    """An xla tensor assembled from one CPU shard per device of op_sharding
    (global_shape defaults to the shards' shape times the tiles), annotated."""
    from torch_xla.distributed.spmd import annotations, local_shards
    spec = op_sharding.spec
    n = spec[4]
    if len(shards) != n:
        raise RuntimeError(f"Expected {n} shards (one per device of the sharding), got "
                           f"{len(shards)}")
    shard_shape = tuple(shards[0].shape)
    if any(tuple(s.shape) != shard_shape for s in shards):
        raise RuntimeError(f"Shards must all have one shape, got "
                           f"{sorted({tuple(s.shape) for s in shards})}")
    if spec[0] == "replicated":
        if global_shape is not None and tuple(global_shape) != shard_shape:
            raise RuntimeError(f"Global shape {tuple(global_shape)} of a replicated tensor must "
                               f"be its shards' shape {shard_shape}")
        value = shards[0]
    else:
        tiles = spec[1][:len(shard_shape)]
        if global_shape is None:
            global_shape = tuple(s * t for s, t in zip(shard_shape, tiles))
        global_shape = tuple(global_shape)
        # Each dim's shard is ceil(dim / tiles): less data is padding, more
        # (or padding of a whole shard) does not fit the shards.
        if len(global_shape) != len(shard_shape) or any(
                -(-g // t) != s for g, t, s in zip(global_shape, tiles, shard_shape)):
            raise RuntimeError(f"Global shape {global_shape} does not fit shards of shape "
                               f"{shard_shape} tiled {tuple(tiles)}")
        value = local_shards.assemble(list(shards), spec, global_shape, shards[0].dtype)
    t = value.to("xla")
    annotations.set_spec(t, spec, "_global_tensor_from_cpu_shards", check_existing=False)
    return t


def _spmd_full_to_shard_shape(tensor):
    """Each device's shard of tensor, split as its annotation says (manual region)."""
    from torch_xla.distributed.spmd import manual
    return manual.full_to_shard_of_annotation(tensor)


def _spmd_shard_to_full_shape(tensor, op_sharding, full_shape, dtype):
    """The full tensor of full_shape from a {manual} shard tensor, split as op_sharding says."""
    from torch_xla.distributed.spmd import manual
    if dtype != tensor.dtype:
        raise RuntimeError(f"_spmd_shard_to_full_shape: dtype {dtype} differs from the "
                           f"tensor's {tensor.dtype}")
    return manual.shard_to_full_of(tensor, op_sharding, full_shape)
