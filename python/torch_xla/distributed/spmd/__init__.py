"""torch_xla.distributed.spmd: sharding annotations (PyTorch/XLA's SPMD API).

    import torch_xla.distributed.spmd as xs
    mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
    xs.mark_sharding(t, mesh, ("data", None))

A sharding is an annotation on the IR node of the tensor (C: tt_sharding_t,
include/torchtpu/ir.h), hashed into the graph and written into the emitted
StableHLO as `mhlo.sharding` attributes (xm.get_stablehlo). Values never
change: the engine's own CPU backend computes the program unpartitioned.
`xs.run_spmd(tensors)` runs the graph through XLA's SPMD partitioner on a
PJRT plugin, one device per mesh device. docs/stablehlo.md, docs/pjrt.md.

Deviations from PyTorch/XLA: mark_sharding returns the tensor itself (no
XLAShardedTensor wrapper); the mesh's devices are partition ids of the
emitted program, not engine devices (every tensor stays on its xla device).
"""
import collections
import math
import weakref
from enum import IntEnum

import numpy as np
import torch

from torchtpu import _C, bridge, ir

__all__ = [
    "Mesh", "HybridMesh", "ShardingType", "ShardingSpec", "mark_sharding", "clear_sharding",
    "get_1d_mesh", "set_global_mesh", "get_global_mesh", "get_sharding_spec", "run_spmd",
    "SpmdSpecError", "enable_manual_sharding", "disable_manual_sharding",
]


class SpmdSpecError(ValueError, AssertionError):
    """A mesh or partition spec that does not fit. PyTorch/XLA signals these
    with assertions; this is both a ValueError and an AssertionError, so
    code catching either sees it."""


class Mesh:
    """The logical device mesh: device_ids (a flat list, reshaped to
    mesh_shape in C order) and optional axis names."""

    def __init__(self, device_ids, mesh_shape, axis_names=None):
        ids = np.asarray(device_ids).reshape(-1)
        mesh_shape = tuple(int(s) for s in mesh_shape)
        if ids.size != math.prod(mesh_shape):
            raise SpmdSpecError(f"Number of device IDs ({ids.size}) must match mesh size "
                                f"({math.prod(mesh_shape)}, mesh_shape {mesh_shape})")
        if len(set(ids.tolist())) != ids.size:
            raise SpmdSpecError(f"Device IDs must be unique, got {ids.tolist()}")
        if ids.size and (ids.min() < 0 or ids.max() >= ids.size):
            raise SpmdSpecError(f"Device IDs must be 0..{ids.size - 1} (partition ids), got "
                                f"{sorted(ids.tolist())}")
        if axis_names is not None:
            axis_names = tuple(axis_names)
            if len(axis_names) != len(mesh_shape):
                raise SpmdSpecError(f"Number of axis names ({len(axis_names)}) must match mesh "
                                    f"dimensions ({len(mesh_shape)})")
            if len(set(axis_names)) != len(axis_names):
                raise SpmdSpecError(f"Axis names must be unique, got {axis_names}")
        self.device_ids = ids
        self.mesh_shape = mesh_shape
        self.axis_names = axis_names

    def size(self):
        return int(math.prod(self.mesh_shape))

    def shape(self):
        names = self.axis_names or tuple(range(len(self.mesh_shape)))
        return collections.OrderedDict(zip(names, self.mesh_shape))

    def get_logical_mesh(self):
        return self.device_ids.reshape(self.mesh_shape)

    def get_axis_name_idx(self, name):
        if self.axis_names is None or name not in self.axis_names:
            return None
        return self.axis_names.index(name)

    def _axis(self, a):
        if isinstance(a, str):
            idx = self.get_axis_name_idx(a)
            if idx is None:
                raise SpmdSpecError(f"Partition spec names axis {a!r}, which the mesh (axes "
                                    f"{self.axis_names}) does not have")
            return idx
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise SpmdSpecError(f"Partition spec entries must be ints, axis names, None or "
                                f"tuples of those, got {a!r}")
        if not 0 <= int(a) < len(self.mesh_shape):
            raise SpmdSpecError(f"Partition spec names mesh axis {a}, outside the mesh's "
                                f"{len(self.mesh_shape)} axes")
        return int(a)

    def __eq__(self, other):
        return (isinstance(other, Mesh) and self.mesh_shape == other.mesh_shape
                and self.axis_names == other.axis_names
                and np.array_equal(self.device_ids, other.device_ids))

    def __hash__(self):
        return hash((self.mesh_shape, self.axis_names, tuple(self.device_ids.tolist())))

    def __repr__(self):
        return f"Mesh(device_ids={self.device_ids.tolist()}, mesh_shape={self.mesh_shape}, " \
               f"axis_names={self.axis_names})"


class HybridMesh(Mesh):
    """PyTorch/XLA's multi-slice mesh, here one slice: ici_mesh_shape
    (times dcn_mesh_shape, all ones) over devices 0..n-1 in order."""

    def __init__(self, *, ici_mesh_shape, dcn_mesh_shape=None, axis_names=None):
        dcn = tuple(dcn_mesh_shape or (1,) * len(ici_mesh_shape))
        if any(d != 1 for d in dcn):
            raise NotImplementedError("HybridMesh: several slices (dcn_mesh_shape != 1) are not "
                                      "supported")
        shape = tuple(i * d for i, d in zip(ici_mesh_shape, dcn))
        super().__init__(np.arange(math.prod(shape)), shape, axis_names)


class ShardingType(IntEnum):
    """PyTorch/XLA's ShardingType (xla::OpSharding::Type numbering)."""
    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


def _spec_of(mesh, partition_spec, rank):
    """The engine's sharding tuple for partition_spec on a tensor of rank:
    (kind, tile_dims, devices, last_tile_dim_replicate, num_devices)."""
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mark_sharding expects a Mesh, got {type(mesh).__name__}")
    spec = tuple(partition_spec)
    if len(spec) != rank:
        raise SpmdSpecError(f"Partition spec length ({len(spec)}) should be equal to the input "
                            f"rank ({rank}).")
    per_dim, used = [], []
    for entry in spec:
        axes = () if entry is None else tuple(entry) if isinstance(entry, tuple) else (entry,)
        idx = tuple(mesh._axis(a) for a in axes)
        for a in idx:
            if a in used:
                raise SpmdSpecError(f"Partition spec {spec} uses mesh axis {a} twice")
            used.append(a)
        per_dim.append(idx)
    n = mesh.size()
    if not used:
        return ("replicated", (), (), False, n)
    rest = [a for a in range(len(mesh.mesh_shape)) if a not in used]
    tile_dims = [int(math.prod(mesh.mesh_shape[a] for a in axes)) for axes in per_dim]
    replicas = int(math.prod(mesh.mesh_shape[a] for a in rest))
    order = [a for axes in per_dim for a in axes] + rest
    grid = mesh.get_logical_mesh().transpose(order)
    last = replicas > 1
    if last:
        tile_dims.append(replicas)
    devices = grid.reshape(tile_dims).reshape(-1).tolist()
    return ("tiled", tuple(tile_dims), tuple(int(d) for d in devices), last, n)


class ShardingSpec:
    """A mesh and a partition spec, applied later (PyTorch/XLA's
    ShardingSpec, used by data loaders)."""

    def __init__(self, mesh, partition_spec, minibatch=False):
        self.mesh = mesh
        self.partition_spec = tuple(partition_spec)
        self.minibatch = minibatch

    def apply(self, t):
        mark_sharding(t, self.mesh, self.partition_spec)

    def can_apply(self, t):
        return len(self.partition_spec) == t.dim()


# Annotated tensors: id -> (weakref, spec). The engine keeps the annotation
# on the tensor's current value (handle); an in-place update under
# functionalization gives the tensor a new value, so the annotation is put
# back on it whenever it is read or emitted (reapply_shardings).
_annotated = {}


def _remember(t, spec):
    key = id(t)
    if spec is None:
        _annotated.pop(key, None)
        return
    _annotated[key] = (weakref.ref(t, lambda _r, k=key: _annotated.pop(k, None)), spec)


def reapply_shardings():
    """Puts every annotated tensor's sharding back on its current value
    (after in-place updates). Called before emission and by
    get_sharding_spec; cheap when nothing is annotated."""
    for ref, spec in list(_annotated.values()):
        t = ref()
        if t is None:
            continue
        h = bridge.handle_of(t)
        if _C.sharding_get(h) is None:
            _C.sharding_set(h, spec)


def _check_xla(t, what):
    if not isinstance(t, torch.Tensor) or t.device.type != "xla":
        raise TypeError(f"{what} expects a tensor on an xla device, got "
                        f"{getattr(t, 'device', type(t).__name__)}")


def mark_sharding(t, mesh, partition_spec):
    """Annotates t with the sharding partition_spec describes on mesh: entry
    i names the mesh axis (an int, an axis name, or a tuple of them) that
    tensor dim i is split over, or None (not split). Mesh axes no entry
    names replicate (last_tile_dim_replicate). Returns t."""
    _check_xla(t, "mark_sharding")
    spec = _spec_of(mesh, partition_spec, t.dim())
    _C.sharding_set(bridge.handle_of(t), spec)
    _remember(t, spec)
    return t


def clear_sharding(t):
    """Removes t's sharding annotation. Returns t."""
    _check_xla(t, "clear_sharding")
    _C.sharding_set(bridge.handle_of(t), None)
    _remember(t, None)
    return t


def get_sharding_spec(t):
    """t's sharding as XLA's HloSharding text ("{devices=[2,1]0,1}"), or
    "" when unannotated (PyTorch/XLA: torch_xla._XLAC._get_xla_sharding_spec)."""
    reapply_shardings()
    spec = _C.sharding_get(bridge.handle_of(t))
    return "" if spec is None else _C.sharding_text(spec, t.dim())


def get_sharding_type(t):
    """ShardingType of t's annotation, or None."""
    reapply_shardings()
    spec = _C.sharding_get(bridge.handle_of(t))
    if spec is None:
        return None
    if spec[0] == "replicated":
        return ShardingType.REPLICATED
    if spec[0] == "manual":
        return ShardingType.MANUAL
    return ShardingType.PARTIAL if spec[3] else ShardingType.TILED


def _manual_sharding(mesh, partition_spec, rank, what):
    if mesh is None:
        mesh = get_global_mesh()
    if mesh is None:
        raise ValueError(f"{what}: no mesh given and no global mesh set (xs.set_global_mesh)")
    kind, tile_dims, devices, last, n = _spec_of(mesh, partition_spec, rank)
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
    """Enters a manual SPMD region: t is split by partition_spec on mesh and
    the result is each device's own shard (shape ceil(dim / tiles)), on which
    collectives (xm.all_reduce, ... with groups of device ids) act per
    device. Returns the shard tensor (PyTorch/XLA: an XLAShardedTensor).
    The engine's own backend runs it only on a one-device mesh."""
    _check_xla(t, "enable_manual_sharding")
    spec = _manual_sharding(mesh, partition_spec, t.dim(), "enable_manual_sharding")
    return bridge.wrap_user(ir.spmd_full_to_shard(bridge.handle_of(t), spec=spec))


def disable_manual_sharding(t, partition_spec, full_shape, *, mesh=None):
    """Leaves a manual region: every device's shard t becomes the full tensor
    of full_shape, split by partition_spec on mesh."""
    _check_xla(t, "disable_manual_sharding")
    full_shape = tuple(int(d) for d in full_shape)
    spec = _manual_sharding(mesh, partition_spec, len(full_shape), "disable_manual_sharding")
    return bridge.wrap_user(ir.spmd_shard_to_full(bridge.handle_of(t),
                                                  spec=spec._replace(full_dims=full_shape)))


def get_1d_mesh(axis_name=None):
    """A mesh of every runtime device along one axis."""
    import torch_xla.runtime as xr
    n = xr.global_runtime_device_count()
    return Mesh(np.arange(n), (n,), None if axis_name is None else (axis_name,))


_global_mesh = None


def set_global_mesh(mesh):
    global _global_mesh
    if not isinstance(mesh, Mesh):
        raise TypeError(f"set_global_mesh expects a Mesh, got {type(mesh).__name__}")
    _global_mesh = mesh


def get_global_mesh():
    return _global_mesh


def run_spmd(tensors, client=None, with_shards=False):
    """The global values (CPU tensors) of tensors, computed by running their
    lazy graph through XLA's SPMD partitioner on a PJRT plugin, one device
    per partition (torchtpu.spmd.run_spmd)."""
    from torchtpu import spmd
    return spmd.run_spmd(tensors, client=client, with_shards=with_shards)


# nn.Linear that keeps a rank-3 input's dimensions (patched_linear.py).
from torch_xla.distributed.spmd.patched_linear import (  # noqa: E402,F401
    EinsumLinear, XLAPatchedLinear, apply_xla_patch_to_nn_linear, xla_patched_nn_linear_forward)
