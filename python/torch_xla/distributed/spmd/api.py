"""DTensor-style entry points: xla_distribute_tensor, xla_distribute_module.

Contract (PyTorch/XLA's torch_xla.distributed.spmd.api):
- convert_to_xla_mesh(dt_mesh): a Mesh from a torch DeviceMesh (or any
  object with .mesh, a tensor of device ids, and .mesh_dim_names).
- convert_to_xla_partition_spec(tensor, placements): Shard(d) on mesh
  dim i puts i at entry d; Replicate() leaves None; other placements are
  ValueError.
- xla_distribute_tensor(tensor, device_mesh, placements=None): moves tensor
  to xla, annotates it (placements default to all Replicate) and returns
  the XLAShardedTensor. A tensor already sharded non-replicated is an
  AssertionError asking for clear_sharding.
- xla_distribute_module(module, device_mesh=None, partition_fn=None,
  input_fn=None, output_fn=None): runs partition_fn(name, submodule, mesh)
  over named_modules(); installs input_fn / output_fn (3 arguments:
  module, inputs or outputs, mesh; 2 arguments: deprecated form with a
  warning) as forward pre / post hooks. auto_policy (XLA auto-sharding) is
  NotImplementedError here. Returns the module.
All of them turn SPMD mode on (xr.use_spmd()), as PyTorch/XLA's do.
"""
import inspect
import warnings

import numpy as np
import torch

from torch_xla.distributed.spmd import annotations
from torch_xla.distributed.spmd.mesh import Mesh, ShardingType


def _use_spmd():
    from torch_xla.distributed.spmd import spmd_mode
    spmd_mode.ensure_spmd("xla_distribute")


def auto_policy(mod_name, mod, mesh):
    return


def convert_to_xla_mesh(dt_mesh):
    _use_spmd()
    ids = dt_mesh.mesh
    ids = ids.cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    return Mesh(ids.reshape(-1), tuple(ids.shape), getattr(dt_mesh, "mesh_dim_names", None))


def convert_to_xla_partition_spec(tensor, placements):
    _use_spmd()
    spec = [None] * tensor.dim()
    for mesh_idx, p in enumerate(placements):
        if p.is_shard():
            spec[p.dim] = mesh_idx
        elif p.is_replicate():
            continue
        else:
            raise ValueError(f"Unsupported placement type: {type(p).__name__}")
    return tuple(spec)


def xla_distribute_tensor(tensor, device_mesh, placements=None):
    from torch.distributed.tensor import Replicate
    from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShardedTensor
    _use_spmd()
    if getattr(device_mesh, "device_type", "xla") != "xla":
        raise AssertionError(f"device_mesh must be an xla mesh, got device type "
                             f"{device_mesh.device_type!r}")
    mesh = convert_to_xla_mesh(device_mesh)
    if placements is None:
        placements = [Replicate() for _ in mesh.mesh_shape]
    if len(placements) != len(mesh.mesh_shape):
        raise AssertionError("`placements` must have the same length as `device_mesh.ndim`! "
                             f"Found placements length: {len(placements)}, and "
                             f"device_mesh.ndim: {len(mesh.mesh_shape)}.")
    if isinstance(tensor, XLAShardedTensor):
        kind = tensor.sharding_type if annotations.spec_tuple_of(tensor) is not None else None
        if kind not in (None, ShardingType.REPLICATED):
            raise AssertionError(
                "XLAShardedTensor `tensor` is already annotated with non-replication sharding. "
                "Clear the existing sharding annotation first, by calling "
                "torch_xla.distributed.spmd.clear_sharding API.")
        tensor = tensor.global_tensor
    elif type(tensor).__name__ == "DTensor":
        raise ValueError("Cannot distribute a DTensor with local tensor on xla devices. "
                         "The input tensor must be global.")
    if not tensor.is_meta and tensor.device.type != "xla":
        tensor = tensor.to("xla")
    spec = convert_to_xla_partition_spec(tensor, placements)
    return annotations.mark_sharding(tensor, mesh, spec)


def _hook_arity(fn, what):
    n = len(inspect.signature(fn).parameters)
    if n not in (2, 3):
        raise ValueError(f"{what} should take in 3 arguments, but got {n} arguments!")
    if n == 2:
        warnings.warn(f"Deprecating {what} that takes two arguments (inputs, device_mesh), "
                      f"please use {what} that takes in (module, inputs, device_mesh) instead!")
    return n


def xla_distribute_module(module, device_mesh=None, partition_fn=None, input_fn=None,
                          output_fn=None):
    _use_spmd()
    if partition_fn is not None:
        if getattr(partition_fn, "__name__", "") == "auto_policy":
            raise NotImplementedError("xla_distribute_module(partition_fn=auto_policy): XLA "
                                      "auto-sharding is not supported")
        for name, sub in module.named_modules():
            partition_fn(name, sub, device_mesh)
    if input_fn is not None:
        if _hook_arity(input_fn, "input_fn") == 2:
            module.register_forward_pre_hook(lambda _m, inputs: input_fn(inputs, device_mesh))
        else:
            module.register_forward_pre_hook(
                lambda m, inputs: input_fn(m, inputs, device_mesh))
    if output_fn is not None:
        if _hook_arity(output_fn, "output_fn") == 2:
            module.register_forward_hook(
                lambda _m, _inputs, outputs: output_fn(outputs, device_mesh))
        else:
            module.register_forward_hook(
                lambda m, _inputs, outputs: output_fn(m, outputs, device_mesh))
    return module
