"""Sharding annotations on xla tensors: mark, clear, read.

Contract:
- mark_sharding(t, mesh, spec) annotates tensor t (an xla tensor or an
  XLAShardedTensor) and returns an XLAShardedTensor wrapping it; marking an
  nn.Module annotates its parameters (module_sharding.py) and returns the
  module. The first annotation of a program switches SPMD mode on
  (spmd_mode.py). Re-marking a tensor that already carries a different,
  non-replicated sharding is a RuntimeError ("Existing annotation must be
  cleared first", as PyTorch/XLA); the same sharding again is a no-op.
- annotate_custom_sharding(t, mesh, spec) replaces the annotation without
  that check (PyTorch/XLA adds a custom-sharding node; here the one
  annotation of the tensor's value is replaced).
- clear_sharding(t) removes it and returns the plain tensor.
- get_sharding_spec(t): XLA's HloSharding text or "";
  get_sharding_type(t): ShardingType or None. Both also report a synced
  value's layout in SPMD mode (reported_spec_of).
The annotation lives on the tensor's engine value (C tt_sharding_t); since
an in-place update gives the tensor a new value under functionalization,
annotated tensors are remembered and their annotation put back before it
is read or emitted (reapply_shardings).
"""
import weakref

import torch

from torchtpu import _C, bridge, spmd_read

from torch_xla.distributed.spmd.mesh import ShardingType, spec_tuple
from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShardedTensor

# id(tensor) -> (weakref, spec tuple)
_annotated = {}


def _remember(t, spec):
    key = id(t)
    if spec is None:
        _annotated.pop(key, None)
        return
    _annotated[key] = (weakref.ref(t, lambda _r, k=key: _annotated.pop(k, None)), spec)


def reapply_shardings():
    """Puts every annotated tensor's sharding back on its current value
    (after in-place updates). Cheap when nothing is annotated."""
    for ref, spec in list(_annotated.values()):
        t = ref()
        if t is None:
            continue
        h = bridge.handle_of(t)
        if _C.sharding_get(h) is None:
            _C.sharding_set(h, spec)


def unwrap(t):
    return t.global_tensor if isinstance(t, XLAShardedTensor) else t


def check_xla(t, what):
    if not isinstance(t, torch.Tensor) or t.device.type != "xla":
        raise TypeError(f"{what} expects a tensor on an xla device, got "
                        f"{getattr(t, 'device', type(t).__name__)}")


def spec_tuple_of(t):
    """The engine's sharding tuple of t, or None."""
    reapply_shardings()
    return _C.sharding_get(bridge.handle_of(unwrap(t)))


def wrap_as_sharded_tensor(t, mesh_shape=None, partition_spec=None, axis_names=None):
    if not isinstance(t, XLAShardedTensor):
        t = XLAShardedTensor(t, mesh_shape=mesh_shape, partition_spec=partition_spec)
        t._axis_names = axis_names
        return t
    if axis_names is not None:
        t._axis_names = axis_names
    if mesh_shape is not None:
        t.mesh_shape = mesh_shape
    if partition_spec is not None:
        t.partition_spec = partition_spec
    t.invalidate_spec_cache()
    return t


def set_spec(t, spec, what, check_existing):
    """Puts the engine sharding tuple spec on xla tensor t."""
    from torch_xla.distributed.spmd import spmd_mode
    check_xla(t, what)
    spmd_mode.ensure_spmd(what)
    h = bridge.handle_of(t)
    if check_existing:
        reapply_shardings()
        current = _C.sharding_get(h)
        if current is not None and current != spec and current[0] != "replicated":
            raise RuntimeError("Existing annotation must be cleared first: "
                               f"{_C.sharding_text(current, t.dim())} (xs.clear_sharding), "
                               f"new one: {_C.sharding_text(spec, t.dim())}")
    if not h.pending:
        # PyTorch/XLA counts annotations of device data here: its virtual
        # device keeps such data on the host until it is sharded.
        _C.counter_add("VirtualDeviceUsage")
    h = spmd_read.relaid(t, h, spec)  # shards spread over processes move first
    _C.sharding_set(h, spec)
    _remember(t, spec)


def set_replicated(t):
    """Annotates xla tensor t replicated over every device (data loaded in
    SPMD mode without a sharding, as PyTorch/XLA's virtual device holds
    it). Not counted as a user annotation."""
    from torchtpu import config
    spec = ("replicated", (), (), False, config.ensure_runtime())
    _C.sharding_set(bridge.handle_of(t), spec)
    _remember(t, spec)


def _cacheable(mesh, partition_spec):
    """Whether the mesh's OpSharding cache can hold partition_spec."""
    from torch_xla.distributed.spmd.mesh import Mesh
    try:
        hash(tuple(partition_spec))
    except TypeError:
        return False
    return isinstance(mesh, Mesh)


def mark_sharding(t, mesh, partition_spec):
    """Annotates t with the sharding partition_spec describes on mesh: entry
    i names the mesh axis (an int, an axis name, or a tuple of them) that
    tensor dim i is split over, or None. Mesh axes no entry names replicate
    (last_tile_dim_replicate). Returns an XLAShardedTensor for a tensor, the
    module for an nn.Module (module_sharding.py)."""
    if isinstance(t, torch.nn.Module):
        from torch_xla.distributed.spmd import module_sharding
        return module_sharding.mark_module(t, mesh, partition_spec)
    g = unwrap(t)
    check_xla(g, "mark_sharding")
    spec = spec_tuple(mesh, partition_spec, g.dim()) if not _cacheable(mesh, partition_spec) \
        or len(partition_spec) != g.dim() else mesh.get_op_sharding(partition_spec).spec
    set_spec(g, spec, "mark_sharding", check_existing=True)
    return wrap_as_sharded_tensor(t, mesh.mesh_shape, tuple(partition_spec), mesh.axis_names)


def annotate_custom_sharding(t, mesh, partition_spec):
    """Annotates t with a sharding, replacing any it had; returns an
    XLAShardedTensor."""
    g = unwrap(t)
    check_xla(g, "annotate_custom_sharding")
    spec = spec_tuple(mesh, partition_spec, g.dim())
    set_spec(g, spec, "annotate_custom_sharding", check_existing=False)
    return wrap_as_sharded_tensor(t, mesh.mesh_shape, tuple(partition_spec), mesh.axis_names)


def clear_sharding(t):
    """Removes t's sharding annotation. Returns the (unwrapped) tensor."""
    g = unwrap(t)
    check_xla(g, "clear_sharding")
    h = spmd_read.relaid(g, bridge.handle_of(g), None)  # shards spread over processes
    _C.sharding_set(h, None)
    _remember(g, None)
    return g


def reported_spec_of(t):
    """The sharding tuple t reports: its annotation; else, in SPMD mode, the
    layout its synced value has (PyTorch/XLA gives a synced tensor its
    program's output sharding): the shards' layout when held as shards,
    replicated for one buffer a graph cut wrote. None when pending or
    uploaded and unannotated. Never syncs."""
    spec = spec_tuple_of(t)
    if spec is not None:
        return spec
    import torch_xla.runtime as xr
    if not xr.is_spmd():
        return None
    spec = _C.tensor_result_layout(bridge.handle_of(unwrap(t)))
    if spec is not None and spec[0] == "replicated":
        from torchtpu import config
        # Replicated over every device, as PyTorch/XLA's output shardings.
        spec = spec[:4] + (config.ensure_runtime(),)
    return spec


def get_sharding_spec(t):
    """t's sharding as XLA's HloSharding text ("{devices=[2,1]0,1}"), or ""
    when it reports none (reported_spec_of; PyTorch/XLA:
    torch_xla._XLAC._get_xla_sharding_spec). A tensor held as shards always
    reports their layout."""
    g = unwrap(t)
    spec = reported_spec_of(g)
    return "" if spec is None else _C.sharding_text(spec, g.dim())


def get_sharding_type(t):
    """ShardingType t reports (reported_spec_of), or None."""
    spec = reported_spec_of(t)
    if spec is None:
        return None
    if spec[0] == "replicated":
        return ShardingType.REPLICATED
    if spec[0] == "manual":
        return ShardingType.MANUAL
    return ShardingType.PARTIAL if spec[3] else ShardingType.TILED


def wrap_if_sharded(x):
    """x as an XLAShardedTensor when it is an annotated xla tensor."""
    if (isinstance(x, torch.Tensor) and not isinstance(x, XLAShardedTensor)
            and x.device.type == "xla" and spec_tuple_of(x) is not None):
        return XLAShardedTensor(x)
    return x
