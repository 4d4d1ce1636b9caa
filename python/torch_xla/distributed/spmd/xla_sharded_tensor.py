"""XLAShardedTensor: a sharded xla tensor as PyTorch/XLA presents it.

Contract:
- XLAShardedTensor(t, mesh_shape=None, partition_spec=None, requires_grad=False)
  wraps the xla tensor t (kept as .global_tensor); it is a DTensor subclass
  (torch.distributed.tensor.DTensor) with t's shape, dtype and device.
- Ops on it run on the global tensors and return XLAShardedTensor results
  (so `model(xst)` prints as XLAShardedTensor). A wrapper created with
  requires_grad=True is an autograd leaf of its own: ops on it are recorded
  against it and its .grad is filled by backward.
- local_shards: one XLAShard per device of the annotation, read from the
  engine's shard buffers (or cut from the global value on the host when it
  is not held as shards: local_shards.py); load_local_shards_ writes a
  full set back (RuntimeError for a partial set, wrong shapes, or a
  replicated tensor); sharding_spec / sharding_type read the annotation.
"""
from dataclasses import dataclass
from typing import List, Union

import torch
from torch.distributed.tensor import DTensor
from torch.utils._pytree import tree_map


@dataclass
class XLAShard:
    """One device's shard: data (CPU, zero-padded to the shard shape),
    indices into the global tensor (Ellipsis when replicated; no padding),
    the device it belongs to, and its replica id."""
    data: torch.Tensor
    indices: Union[type(Ellipsis), List[slice]]
    shard_device: str
    replica_id: int

    def _unpadded_index(self):
        if self.indices is Ellipsis:
            return Ellipsis
        return tuple(slice(0, s.stop - s.start) for s in self.indices)

    @property
    def unpadded_data(self) -> torch.Tensor:
        return self.data[self._unpadded_index()]

    @unpadded_data.setter
    def unpadded_data(self, t):
        self.data[self._unpadded_index()] = t


def _unwrap(x):
    return x.global_tensor if isinstance(x, XLAShardedTensor) else x


def _wrap(x):
    return XLAShardedTensor(x) if isinstance(x, torch.Tensor) and not isinstance(
        x, XLAShardedTensor) and x.device.type == "xla" else x


def _run_below(func, args, kwargs):
    # Called from the Python dispatch key, which excludes every key above
    # it, Functionalize included; the global tensors are functional
    # wrappers, so functionalization is let back in for them.
    inc = torch._C._dispatch_tls_local_include_set()
    exc = torch._C._dispatch_tls_local_exclude_set().remove(torch._C.DispatchKey.Functionalize)
    with torch._C._ForceDispatchKeyGuard(inc, exc):
        return func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))


class XLAShardedTensor(DTensor):
    """A wrapper around an xla tensor with a sharding annotation."""

    __slots__ = ["global_tensor", "mesh_shape", "partition_spec", "_cached_spec", "_axis_names"]

    @staticmethod
    def __new__(cls, elem, mesh_shape=None, partition_spec=None, *args, **kwargs):
        axis_names = None
        if isinstance(elem, XLAShardedTensor):
            mesh_shape = mesh_shape or elem.mesh_shape
            partition_spec = partition_spec or elem.partition_spec
            axis_names = elem._axis_names
            elem = elem.global_tensor
        if not isinstance(elem, torch.Tensor):
            raise TypeError(f"XLAShardedTensor wraps a tensor, got {type(elem).__name__}")
        requires_grad = bool(kwargs.get("requires_grad", False))
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=requires_grad)
        r.global_tensor = elem.detach() if requires_grad else elem
        r.mesh_shape = mesh_shape
        r.partition_spec = partition_spec
        r._cached_spec = None
        r._axis_names = axis_names
        return r

    # ------------------------------------------------------------ shards
    def _annotation(self):
        from torch_xla.distributed.spmd import annotations
        spec = annotations.spec_tuple_of(self.global_tensor)
        if spec is None:
            raise RuntimeError("XLAShardedTensor: the tensor carries no sharding annotation "
                               "(xs.mark_sharding)")
        return spec

    @property
    def local_shards(self) -> List[XLAShard]:
        from torch_xla.distributed.spmd import local_shards
        spec = self._annotation()
        names = local_shards.device_names(spec)
        everywhere = local_shards.layout(spec, tuple(self.global_tensor.shape))
        here = [everywhere[d] for d in local_shards.local_devices(spec)]
        return [XLAShard(data, idx, dev, rep) for data, (rep, idx), dev in zip(
            local_shards.shards_of(self.global_tensor, spec), here, names)]

    def load_local_shards_(self, shards: List[XLAShard]):
        from torch_xla._XLAC.sharding import _load_local_shards
        _load_local_shards(self.global_tensor, [s.data for s in shards],
                           [s.shard_device for s in shards])
        self._cached_spec = None

    @property
    def sharding_spec(self):
        from torch_xla.distributed.spmd import annotations
        return annotations.get_sharding_spec(self.global_tensor)

    @property
    def sharding_type(self):
        from torch_xla.distributed.spmd import annotations
        from torch_xla.distributed.spmd.mesh import ShardingType
        t = annotations.get_sharding_type(self.global_tensor)
        return ShardingType.REPLICATED if t is None else ShardingType(t)

    def invalidate_spec_cache(self):
        self._cached_spec = None

    # ---------------------------------------------------- DTensor view
    def _mesh_dims_of(self, entry):
        """The mesh dims (ints) a partition-spec entry names."""
        axes = () if entry is None else entry if isinstance(entry, tuple) else (entry,)
        names = self._axis_names or ()
        return [names.index(a) if isinstance(a, str) and a in names else a for a in axes]

    @property
    def _spec(self):
        """The DTensorSpec equivalent of the annotation: a DeviceMesh('xla')
        of the runtime's devices in mesh_shape, Shard(d) for each mesh dim
        that splits tensor dim d, Replicate() for the others."""
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
        from torch.distributed.tensor.placement_types import Replicate, Shard
        if self._cached_spec is not None:
            return self._cached_spec
        if self.mesh_shape is None or self.partition_spec is None:
            raise ValueError("mesh_shape and partition_spec must be set to create a DTensorSpec "
                             "(mark_sharding sets them; a tensor wrapped from an op result "
                             "has neither)")
        n = 1
        for d in self.mesh_shape:
            n *= d
        mesh = DeviceMesh("xla", torch.arange(n).reshape(tuple(self.mesh_shape)),
                          _init_backend=False)
        placements = [Replicate() for _ in self.mesh_shape]
        for tensor_dim, entry in enumerate(self.partition_spec):
            for mesh_dim in self._mesh_dims_of(entry):
                placements[mesh_dim] = Shard(tensor_dim)
        g = self.global_tensor
        self._cached_spec = DTensorSpec(mesh=mesh, placements=tuple(placements),
                                        tensor_meta=TensorMeta(shape=g.shape, stride=g.stride(),
                                                               dtype=g.dtype))
        return self._cached_spec

    @property
    def placements(self):
        try:
            return self._spec.placements
        except ValueError as e:
            raise ValueError("Placements not available: XLAShardedTensor requires mesh_shape "
                             "and partition_spec to be set. Use mark_sharding() to properly "
                             "initialize sharding information.") from e

    def redistribute(self, device_mesh, placements, *, async_op=False):
        """A new XLAShardedTensor annotated as placements on device_mesh (an
        xs.Mesh) describe; async_op annotates a copy instead of this tensor's
        value. Partial placements are NotImplementedError."""
        from torch.distributed.tensor.placement_types import Partial, Shard
        from torch_xla.distributed.spmd import annotations
        if len(placements) != len(device_mesh.mesh_shape):
            raise ValueError(f"Number of placements ({len(placements)}) must match mesh "
                             f"dimensions ({len(device_mesh.mesh_shape)})")
        if any(isinstance(p, Partial) for p in placements):
            raise NotImplementedError("Partial placement is not yet implemented and may have "
                                      "unexpected behavior. Use Shard or Replicate placements "
                                      "instead.")
        spec = [None] * self.global_tensor.dim()
        for mesh_dim, p in enumerate(placements):
            if isinstance(p, Shard):
                if p.dim >= len(spec):
                    raise IndexError(f"Shard dimension {p.dim} is out of bounds for tensor with "
                                     f"{len(spec)} dimensions")
                spec[p.dim] = mesh_dim
        g = self.global_tensor
        # A copy needs a value of its own (a clone shares g's, and the
        # annotation lives on the value): g times a one of g's dtype.
        target = g * torch.ones((), dtype=g.dtype, device=g.device) if async_op else g
        out = annotations.annotate_custom_sharding(target, device_mesh, tuple(spec))
        out._axis_names = device_mesh.axis_names
        return out

    def __repr__(self):
        return f"XLAShardedTensor({self.global_tensor})"

    # --------------------------------------------------------- dispatch
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return tree_map(_wrap, _run_below(func, args, kwargs or {}))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            # A wrapper that requires grad is an autograd leaf of its own:
            # it goes through the dispatcher (its grad lives on it).
            # Everything else runs on the global tensors directly, so
            # autograd records on those.
            if any(isinstance(a, XLAShardedTensor) and a.requires_grad
                   for a in torch.utils._pytree.tree_leaves((args, kwargs))):
                return func(*args, **kwargs)
            out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        if func in (torch.Tensor.__repr__, torch.Tensor.__str__, torch.Tensor.__format__):
            return out
        return tree_map(_wrap, out)
