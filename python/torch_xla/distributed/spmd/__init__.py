"""torch_xla.distributed.spmd: sharding annotations (PyTorch/XLA's SPMD API).

    import torch_xla.distributed.spmd as xs
    mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
    xs.mark_sharding(t, mesh, xs.PartitionSpec("data", None))

A sharding is an annotation on the IR node of the tensor (C: tt_sharding_t,
include/torchtpu/ir.h), hashed into the graph and written into the emitted
StableHLO as `mhlo.sharding` attributes (xm.get_stablehlo). Values never
change: the engine's own CPU backend computes the program unpartitioned,
and an XLAShardedTensor's local shards are cut from the global value on
the host. `xs.run_spmd(tensors)` runs the graph through XLA's SPMD
partitioner on a PJRT plugin. docs/spmd.md.

Where things live: partition_spec.py, mesh.py (Mesh, HybridMesh, tile
assignment), annotations.py (mark/clear/read), module_sharding.py
(mark_sharding of an nn.Module), xla_sharded_tensor.py, local_shards.py,
spmd_mode.py (switching SPMD on), manual.py, gradient_sharding.py,
api.py (DTensor-style entry points), debugging.py (visualization),
sharding_spec.py (ShardingSpec), input_sharding.py (sharded loaders),
tpu_mesh_layout.py (HybridMesh on TPU chips), patched_linear.py.
"""
import numpy as np

from torch_xla.distributed.spmd.partition_spec import PartitionSpec
from torch_xla.distributed.spmd.mesh import (HybridMesh, Mesh, ShardingType, SpmdSpecError,
                                             spec_tuple as _spec_of)
from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShard, XLAShardedTensor
from torch_xla.distributed.spmd.annotations import (
    _remember, annotate_custom_sharding, check_xla as _check_xla, clear_sharding,
    get_sharding_spec, get_sharding_type, mark_sharding, reapply_shardings,
    wrap_as_sharded_tensor, wrap_if_sharded, unwrap as unwrap_sharded_tensor)
from torch_xla.distributed.spmd.manual import disable_manual_sharding, enable_manual_sharding
from torch_xla.distributed.spmd.gradient_sharding import (
    MarkShardingFunction, apply_backward_optimization_barrier, mark_sharding_with_gradients,
    shard_as)
from torch_xla.distributed.spmd.sharding_spec import ShardingSpec

__all__ = [
    "PartitionSpec", "XLAShard", "XLAShardedTensor", "Mesh", "HybridMesh", "ShardingType",
    "ShardingSpec", "XLAPatchedLinear", "MarkShardingFunction", "mark_sharding",
    "mark_sharding_with_gradients", "shard_as", "annotate_custom_sharding", "clear_sharding",
    "get_1d_mesh", "wrap_if_sharded", "xla_distribute_tensor", "xla_distribute_module",
    "auto_policy", "xla_patched_nn_linear_forward", "set_global_mesh", "get_global_mesh",
    "_mark_manual_sharding", "enable_manual_sharding", "disable_manual_sharding",
    "apply_backward_optimization_barrier", "get_sharding_spec", "get_sharding_type",
    "run_spmd", "SpmdSpecError",
]


def _mark_manual_sharding(t):
    """Annotates a computed tensor {manual} (manual.py); returns an
    XLAShardedTensor."""
    from torch_xla.distributed.spmd import manual
    return manual.mark_manual(t)


def get_1d_mesh(axis_name=None):
    """A mesh of every runtime device along one axis."""
    import torch_xla.runtime as xr
    n = xr.global_runtime_device_count()
    return Mesh(np.arange(n), (n,), None if axis_name is None else (axis_name,))


_global_mesh = None


def set_global_mesh(mesh):
    global _global_mesh
    # None unsets it (PyTorch/XLA accepts None too).
    if mesh is not None and not isinstance(mesh, Mesh):
        raise TypeError(f"set_global_mesh expects a Mesh or None, got {type(mesh).__name__}")
    _global_mesh = mesh


def get_global_mesh():
    return _global_mesh


def run_spmd(tensors, client=None, with_shards=False):
    """The global values (CPU tensors) of tensors, computed by running their
    lazy graph through XLA's SPMD partitioner on a PJRT plugin, one device
    per partition (torchtpu.spmd.run_spmd)."""
    from torchtpu import spmd
    return spmd.run_spmd([unwrap_sharded_tensor(t) for t in tensors], client=client,
                         with_shards=with_shards)


# nn.Linear that keeps a rank-3 input's dimensions (patched_linear.py).
from torch_xla.distributed.spmd.patched_linear import (  # noqa: E402,F401
    EinsumLinear, XLAPatchedLinear, apply_xla_patch_to_nn_linear, xla_patched_nn_linear_forward)
from torch_xla.distributed.spmd.api import (  # noqa: E402,F401
    auto_policy, xla_distribute_module, xla_distribute_tensor)
# PyTorch/XLA's package exposes its xla_sharding submodule as an attribute
# (xs.xla_sharding.apply_backward_optimization_barrier in its tests).
from torch_xla.distributed.spmd import xla_sharding  # noqa: E402,F401
