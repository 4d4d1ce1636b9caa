"""XLAShardedTensor: a sharded xla tensor as PyTorch/XLA presents it.

Contract:
- XLAShardedTensor(t, mesh_shape=None, partition_spec=None, requires_grad=False)
  wraps the xla tensor t (kept as .global_tensor); it is a DTensor subclass
  (torch.distributed.tensor.DTensor) with t's shape, dtype and device.
- Ops on it run on the global tensors and return XLAShardedTensor results
  (so `model(xst)` prints as XLAShardedTensor). A wrapper created with
  requires_grad=True is an autograd leaf of its own: ops on it are recorded
  against it and its .grad is filled by backward.
- local_shards: one XLAShard per device of the annotation, cut from the
  global value on the host (local_shards.py); load_local_shards_ writes a
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

    __slots__ = ["global_tensor", "mesh_shape", "partition_spec", "_cached_spec"]

    @staticmethod
    def __new__(cls, elem, mesh_shape=None, partition_spec=None, *args, **kwargs):
        if isinstance(elem, XLAShardedTensor):
            mesh_shape = mesh_shape or elem.mesh_shape
            partition_spec = partition_spec or elem.partition_spec
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
        value = self.global_tensor.detach().cpu()
        names = local_shards.device_names(spec)
        return [XLAShard(data, idx, dev, rep) for data, (rep, idx), dev in zip(
            local_shards.shards(value, spec), local_shards.layout(spec, tuple(value.shape)),
            names)]

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
