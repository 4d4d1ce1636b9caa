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


def _xla_mark_sharding(tensor, op_sharding):
    import torch_xla.distributed.spmd as xs
    xs._check_xla(tensor, "_xla_mark_sharding")
    if not isinstance(op_sharding, OpSharding):
        raise TypeError(f"_xla_mark_sharding expects an OpSharding, got "
                        f"{type(op_sharding).__name__}")
    _C.sharding_set(bridge.handle_of(tensor), op_sharding.spec)
    xs._remember(tensor, op_sharding.spec)


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


def _get_local_shards(tensors):
    """For each sharded tensor, [(shard as a CPU tensor, 'CPU:i'), ...], one
    per device of its annotation, shards zero-padded to XLA's shard shape."""
    import torch_xla.distributed.spmd as xs
    from torchtpu import config, spmd
    xs.reapply_shardings()
    out = []
    for t in tensors:
        spec = _C.sharding_get(bridge.handle_of(t))
        if spec is None:
            raise RuntimeError("Tensor is not sharded")
        value = t.cpu()
        n = spec[4]
        out.append([(spmd.shard_of(value, spec, p), f"{config.device_type()}:{p}")
                    for p in range(n)])
    return out
