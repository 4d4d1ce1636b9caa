"""The logical device mesh and the tile assignment a partition spec gives.

Contract:
- Mesh(device_ids, mesh_shape, axis_names=None): device_ids (flat, reshaped
  to mesh_shape in C order) are partition ids 0..size-1 of the emitted
  program. Unlike PyTorch/XLA the mesh may be smaller than the runtime's
  device count (the engine's own backend computes sharded programs whole,
  so a mesh is a description, not an allocation; docs/spmd.md).
- Mesh.get_op_sharding(spec) -> torch_xla._XLAC.OpSharding, cached per spec.
- str(mesh) / Mesh.from_str(text): PyTorch/XLA's text form
  "{'device_ids': [...], 'mesh_shape': (...), 'axis_names': (...)}";
  from_str returns None for text it cannot read.
- spec_tuple(mesh, spec, rank): the engine's sharding tuple
  (kind, tile_dims, devices, last_tile_dim_replicate, num_devices).
Mistakes raise SpmdSpecError (a ValueError and an AssertionError).
"""
import ast
import collections
import math
from enum import IntEnum

import numpy as np


class SpmdSpecError(ValueError, AssertionError):
    """A mesh or partition spec that does not fit. PyTorch/XLA signals these
    with assertions (and ValueError for unknown axis names); this is both,
    so code catching either sees it."""


class ShardingType(IntEnum):
    """PyTorch/XLA's ShardingType (xla::OpSharding::Type numbering)."""
    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


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
            raise SpmdSpecError(f"Device IDs must be less than mesh size ({ids.size}), got "
                                f"{sorted(ids.tolist())}")
        if axis_names is not None:
            axis_names = tuple(axis_names)
            if len(axis_names) != len(mesh_shape):
                raise SpmdSpecError(f"Number of axis names ({len(axis_names)}) must match mesh "
                                    f"dimensions ({len(mesh_shape)})")
            if len(set(axis_names)) != len(axis_names):
                raise SpmdSpecError(f"Axis names must be unique, got: {axis_names}")
        self.device_ids = ids
        self.mesh_shape = mesh_shape
        self.axis_names = axis_names
        self._op_shardings = {}

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
                raise SpmdSpecError(f"Axis name {a} is not defined in the given mesh: partition "
                                    f"spec names axis {a!r}, which the mesh (axes "
                                    f"{self.axis_names}) does not have")
            return idx
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise SpmdSpecError(f"Spec type {type(a)} is not supported in partition spec "
                                f"(entries are ints, axis names, None or tuples of those)")
        if not 0 <= int(a) < len(self.mesh_shape):
            raise SpmdSpecError(f"partition_spec contains out of bound index into mesh_shape: "
                                f"mesh axis {a}, outside the mesh's {len(self.mesh_shape)} axes")
        return int(a)

    def get_op_sharding(self, partition_spec):
        """The _XLAC.OpSharding of partition_spec on this mesh (cached)."""
        from torch_xla._XLAC.sharding import OpSharding
        key = tuple(partition_spec)
        op = self._op_shardings.get(key)
        if op is None:
            from torchtpu import _C
            op = OpSharding.from_spec(spec_tuple(self, key, len(key)))
            self._op_shardings[key] = op
            _C.counter_add("CreateOpSharding")  # PyTorch/XLA counts each one it builds
        return op

    def get_jax_mesh(self):
        raise NotImplementedError("Mesh.get_jax_mesh: JAX interoperation is not supported here")

    def __str__(self):
        return (f"{{'device_ids': {self.device_ids.tolist()}, "
                f"'mesh_shape': {self.mesh_shape}, 'axis_names': {self.axis_names}}}")

    @classmethod
    def from_str(cls, mesh_str):
        """The Mesh str(mesh) describes, or None when mesh_str is not one."""
        try:
            d = ast.literal_eval(mesh_str.replace("Mesh", ""))
            return cls(device_ids=np.array(d["device_ids"]), mesh_shape=d["mesh_shape"],
                       axis_names=d["axis_names"])
        except (ValueError, SyntaxError, KeyError, TypeError, AttributeError):
            return None

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
    """PyTorch/XLA's ICI x DCN mesh: ici_mesh_shape within a slice (fast
    interconnect), dcn_mesh_shape across slices. Devices are taken from
    xr.global_runtime_device_attributes() (sorted by device index): with a
    `slice_index` they are grouped by slice, each slice's devices laid out
    by ici_mesh_shape and the slices by dcn_mesh_shape; on TPUs each slice
    is folded onto its chips' torus (tpu_mesh_layout.py), elsewhere devices
    are taken in order (one slice: partition ids 0..n-1, any n, as Mesh). As in PyTorch/XLA, several slices without a
    dcn_mesh_shape, a dcn_mesh_shape without slices, or counts that do not
    match are ValueError."""

    def __init__(self, *, ici_mesh_shape, dcn_mesh_shape=None, axis_names=None):
        import torch_xla.runtime as xr
        ici = tuple(int(i) for i in ici_mesh_shape)
        dcn = tuple(int(d) for d in (dcn_mesh_shape or (1,) * len(ici)))
        if len(ici) != len(dcn):
            raise SpmdSpecError(f"ici_mesh_shape {ici} and dcn_mesh_shape {dcn} must have the "
                                "same length")
        attrs = list(xr.global_runtime_device_attributes())
        attrs.sort(key=lambda a: int(str(a["name"]).rpartition(":")[2]))
        self.device_attributes = attrs
        self.ici_mesh_shape = ici
        self.dcn_mesh_shape = dcn
        sliced = bool(attrs) and "slice_index" in attrs[0]
        if sliced and math.prod(dcn) == 1:
            raise ValueError("Provide dcn_mesh_shape to create a mesh for multislice")
        if not sliced and math.prod(dcn) > 1:
            raise ValueError(f"Invalid dcn_mesh_shape for single slice mesh: {dcn} asks for "
                             "several slices, this runtime has one")
        if sliced and math.prod(dcn) > 1:
            mesh = self._multi_slice(ici, dcn)
        elif self._on_tpu():
            mesh = self._one_slice(ici, np.arange(xr.global_runtime_device_count()))
        else:
            # Partition ids in order, of any count, as for Mesh (module doc).
            mesh = np.arange(math.prod(ici))
        shape = tuple(i * d for i, d in zip(ici, dcn))
        super().__init__(mesh.reshape(-1), shape, axis_names)

    @staticmethod
    def _on_tpu():
        import torch_xla
        import torch_xla.core.xla_model as xm
        return xm.xla_device_hw(torch_xla.device()) == "TPU"

    def _one_slice(self, mesh_shape, devices):
        from torch_xla.distributed.spmd import tpu_mesh_layout
        devices = np.asarray(devices)
        if math.prod(mesh_shape) != len(devices):
            raise ValueError(f"Number of devices {len(devices)} must equal the product of "
                             f"mesh_shape {mesh_shape}")
        if self._on_tpu():
            physical = tpu_mesh_layout.physical_mesh(self.device_attributes, devices.tolist())
            return tpu_mesh_layout.fold_onto_torus(physical, mesh_shape)
        return devices.reshape(mesh_shape)

    def _multi_slice(self, ici, dcn):
        slices = {}
        for d, a in enumerate(self.device_attributes):
            slices.setdefault(a["slice_index"], []).append(d)
        groups = [slices[k] for k in sorted(slices)]
        if math.prod(dcn) != len(groups):
            raise ValueError(f"Number of slices {len(groups)} must equal the product of "
                             f"dcn_mesh_shape {dcn}")
        per_slice = [self._one_slice(ici, g) for g in groups]
        # Slice k's block sits at position k of the dcn grid: the global
        # mesh is the dcn grid of ici blocks.
        grid = np.arange(len(groups)).reshape(dcn)
        out = np.empty(tuple(i * d for i, d in zip(ici, dcn)), dtype=np.int64)
        for pos in np.ndindex(*dcn):
            sl = tuple(slice(p * i, (p + 1) * i) for p, i in zip(pos, ici))
            out[sl] = per_slice[grid[pos]]
        return out


def spec_tuple(mesh, partition_spec, rank):
    """The engine's sharding tuple for partition_spec on a tensor of rank:
    (kind, tile_dims, devices, last_tile_dim_replicate, num_devices).
    Tile assignment as PyTorch/XLA computes it: the logical mesh is
    transposed so the spec's axes come first, in spec order, then the
    unnamed ones, whose product (when > 1) is a trailing replicated dim."""
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mark_sharding expects a Mesh, got {type(mesh).__name__}")
    spec = tuple(partition_spec)
    if len(spec) != rank:
        raise SpmdSpecError(f"Partition spec length ({len(spec)}) should be equal to the input "
                            f"rank ({rank}).")
    per_dim, used = [], []
    for entry in spec:
        if isinstance(entry, tuple) and any(isinstance(a, tuple) for a in entry):
            raise SpmdSpecError("Partition spec cannot contain nested tuples")
        axes = () if entry is None else tuple(entry) if isinstance(entry, tuple) else (entry,)
        idx = tuple(mesh._axis(a) for a in axes)
        for a in idx:
            if a in used:
                raise SpmdSpecError(f"Each device mesh dimension should appear at most once in "
                                    f"partition_spec: {spec} uses mesh axis {a} twice")
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
    if math.prod(tile_dims) == 1:  # XLA's canonical form of an all-ones tiling
        return ("replicated", (), (), False, n)
    last = replicas > 1
    if last:
        tile_dims.append(replicas)
    devices = grid.reshape(tile_dims).reshape(-1).tolist()
    return ("tiled", tuple(tile_dims), tuple(int(d) for d in devices), last, n)
