"""torch_xla.experimental.spmd_fully_sharded_data_parallel: fully sharded
data parallelism expressed as SPMD sharding annotations (PyTorch/XLA's
"FSDPv2"); docs/fsdp-v2.md.

Contract (PyTorch/XLA's names, arguments, errors):
- SpmdFullyShardedDataParallel(module, *, mesh=None, shard_output=None,
  auto_wrap_policy=None, auto_wrapper_callable=None, extra_data_axis=None)
  moves module to 'xla' and annotates each of its parameters that has no
  sharding yet: its largest dim (the first of equal largest) split over
  the mesh's 'fsdp' axis, every other mesh axis replicated; 0-dim
  parameters replicated. Already-annotated parameters (an inner wrapper's)
  are left alone, so nested wrappers each own their parameters. Each
  parameter it annotates gets a gradient hook that annotates the gradient
  alike, so a partitioner reduce-scatters gradients to the parameter's
  shards and the optimizer's update stays sharded.
- mesh defaults to xs.get_global_mesh(); none: ValueError. A mesh without
  an 'fsdp' axis, or an extra_data_axis it lacks: ValueError. Wrapping a
  wrapper, or a module without its own forward (ModuleList, ModuleDict):
  RuntimeError.
- forward(*args, **kwargs) runs the module and then shard_output(output,
  mesh). The default annotates a tensor output, or the first element of a
  tuple output (with a UserWarning), along dim 0 over 'fsdp' (over
  (extra_data_axis, 'fsdp') when given); any other output is a
  RuntimeError asking for a shard_output callable.
- auto_wrap_policy (torch_xla.distributed.fsdp.wrap) wraps the selected
  descendants first, each by auto_wrapper_callable(m, mesh=...,
  shard_output=...) (default: this class); the root is never wrapped
  twice.
- A full backward hook on the module puts an optimization barrier over
  its gradients (xs.apply_backward_optimization_barrier), as PyTorch/XLA
  does to keep gradient syncs from fusing into one huge computation.
- .module is the wrapped module; unknown attributes and indexing are
  forwarded to it.
"""
from typing import Any, Callable, Optional
import warnings

import torch
import torch.nn as nn

import torch_xla
import torch_xla.distributed.spmd as spmd
from torch_xla.distributed.fsdp.wrap import recursive_wrap
from torch_xla.distributed.spmd.gradient_sharding import apply_backward_optimization_barrier


def _prepare_spmd_partition_spec(param, extra_data_axis=None, shard_maximal=False):
    """The partition spec that shards param over 'fsdp': dim 0, or with
    shard_maximal its largest dim; that dim over (extra_data_axis,
    'fsdp') when extra_data_axis is given. A 0-dim tensor: () (replicated)."""
    shape = tuple(param.shape)
    if not shape:
        return ()
    dim = shape.index(max(shape)) if shard_maximal else 0
    spec = [None] * len(shape)
    spec[dim] = (extra_data_axis, "fsdp") if extra_data_axis else "fsdp"
    return tuple(spec)


def _default_shard_output(extra_data_axis):

    def shard_output(output, mesh):
        target = None
        if isinstance(output, torch.Tensor):
            target = output
        elif isinstance(output, tuple):
            if output and isinstance(output[0], torch.Tensor):
                target = output[0]
            warnings.warn("The output is a tuple, but only the first element is sharded. If "
                          "this is not intended, please provide your own shard_output "
                          "callable.")
        if target is None:
            raise RuntimeError(f"The output type is not supported: {type(output)}. Please "
                               "provide your own shard_output callable.")
        spmd.mark_sharding(target, mesh, _prepare_spmd_partition_spec(target, extra_data_axis))

    return shard_output


def _annotate_gradients_like(param, mesh, spec):
    # The gradient hook runs before accumulation into .grad, so the value
    # the optimizer reads carries the parameter's sharding; in-place
    # accumulation keeps it.
    from torch_xla.distributed.spmd import annotations
    from torch_xla.distributed.spmd.mesh import spec_tuple
    engine_spec = spec_tuple(mesh, spec, param.dim())

    def hook(grad):
        # A fresh value: the incoming gradient may be another tensor's
        # value too (an output gradient passed through unchanged).
        out = grad * torch.ones((), dtype=grad.dtype, device=grad.device)
        annotations.set_spec(out, engine_spec, "SpmdFullyShardedDataParallel",
                             check_existing=False)
        return out

    param.register_hook(hook)


class SpmdFullyShardedDataParallel(nn.Module):
    """Wraps module for fully sharded data parallel training under SPMD:
    parameters sharded over the mesh's 'fsdp' axis, the output (and so the
    batch) sharded along dim 0; the SPMD partitioner gathers weights where
    they are used and reduce-scatters their gradients."""

    def __init__(self, module: nn.Module, *, mesh: Optional[spmd.Mesh] = None,
                 shard_output: Optional[Callable] = None,
                 auto_wrap_policy: Optional[Callable] = None,
                 auto_wrapper_callable: Optional[Callable] = None,
                 extra_data_axis: Optional[str] = None):
        if isinstance(module, SpmdFullyShardedDataParallel):
            raise RuntimeError(
                "Cannot wrap a module that is already wrapped with FSDP. For nested FSDP, "
                "first wrap the inner child modules before wrapping the outer parent module.")
        forward = getattr(module, "forward", None)
        if getattr(forward, "__func__", nn.Module.forward) is nn.Module.forward:
            raise RuntimeError(
                "The module wrapped by FSDP *must define a `forward` method and call it "
                "during the module's forward pass for FSDP to work correctly.* Hence, do not "
                "wrap `nn.ModuleList` or `nn.ModuleDict` with FSDP (since they don't have "
                "`forward` defined), and do not perform the forward pass in other ways apart "
                "from the `forward` method.")
        if mesh is None:
            mesh = spmd.get_global_mesh()
            if mesh is None:
                raise ValueError("No mesh is provided and no global mesh is set. Please "
                                 "provide a mesh.")
        if "fsdp" not in mesh.axis_names:
            raise ValueError("The mesh must have an axis named 'fsdp'.")
        if extra_data_axis and extra_data_axis not in mesh.axis_names:
            raise ValueError(f"The provided {extra_data_axis} axis is not in the mesh.")
        super().__init__()

        if auto_wrap_policy is not None:
            for name, sub in module.named_modules():
                if isinstance(sub, SpmdFullyShardedDataParallel):
                    raise ValueError(f"Expected {name} to NOT be SpmdFullyShardedDataParallel "
                                     "if using an `auto_wrap_policy`")
            # Children get the mesh and the output sharding; the policy and
            # the callable are not passed on (the recursion applies them).
            recursive_wrap(module, auto_wrap_policy,
                           auto_wrapper_callable or SpmdFullyShardedDataParallel,
                           ignored_modules=set(), ignored_params=set(),
                           only_wrap_children=True, mesh=mesh, shard_output=shard_output)

        self._orig_module = module.to("xla")
        self._mesh = mesh
        for param in module.parameters():
            if torch_xla._XLAC._get_xla_sharding_spec(param) != "":
                continue
            spec = _prepare_spmd_partition_spec(param, shard_maximal=True)
            spmd.mark_sharding(param, mesh, spec)
            if param.requires_grad:
                _annotate_gradients_like(param, mesh, spec)
        apply_backward_optimization_barrier(module)
        self._shard_output = shard_output or _default_shard_output(extra_data_axis)

    @property
    def module(self) -> nn.Module:
        """The wrapped module (as DDP's .module)."""
        return self._orig_module

    def forward(self, *args: Any, **kwargs: Any):
        output = self.module(*args, **kwargs)
        self._shard_output(output, self._mesh)
        return output

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def __getitem__(self, key):
        return self.module.__getitem__(key)
