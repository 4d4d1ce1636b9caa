"""Sharding annotations that reach the backward pass, and pairing.

Contract:
- MarkShardingFunction.apply(t, mesh, spec) / mark_sharding_with_gradients:
  returns a new tensor (a copy of t, t itself is not annotated) carrying
  the sharding; in backward the gradient flowing to t is annotated alike.
- shard_as(a, b): two pytrees of the same structure; for each pair of
  tensors, the one with an annotation gives it to the other (PyTorch/XLA
  asks XLA's shard_alike; this engine has no partitioner-side constraint,
  so the pairing is resolved here, at annotation time). A pair where
  neither is annotated is left as is; a pair annotated differently is a
  RuntimeError. Returns (a, b).
- apply_backward_optimization_barrier(m): a full backward hook on m that
  puts an optimization barrier over m's parameter gradients and its input
  gradients (xm.optimization_barrier_).
"""
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_xla.distributed.spmd import annotations
from torch_xla.distributed.spmd.mesh import spec_tuple


def _annotated_copy(t, mesh, partition_spec, what):
    # A clone shares t's engine value (copy-on-write), and the annotation
    # lives on the value; multiplying by a one of t's dtype makes a new
    # value with t's exact bits (-0.0, NaN and inf included).
    out = t * torch.ones((), dtype=t.dtype, device=t.device)
    annotations.set_spec(out, spec_tuple(mesh, partition_spec, out.dim()), what,
                         check_existing=False)
    return out


@torch.library.custom_op("xla::aot_mark_sharding", mutates_args=())
def _aot_mark_sharding(t: torch.Tensor, mesh: str, partition_spec: str) -> torch.Tensor:
    """The annotated copy as an operator (PyTorch/XLA's name), so that AOT
    autograd and dynamo trace it as one node: mesh is str(Mesh),
    partition_spec the repr of a tuple."""
    import ast
    from torch_xla.distributed.spmd.mesh import Mesh
    the_mesh = Mesh.from_str(mesh)
    if the_mesh is None:
        raise ValueError(f"xla::aot_mark_sharding: not a mesh: {mesh!r}")
    return _annotated_copy(t, the_mesh, ast.literal_eval(partition_spec),
                           "mark_sharding_with_gradients")


@_aot_mark_sharding.register_fake
def _aot_mark_sharding_fake(t, mesh, partition_spec):
    return torch.empty_like(t)


def _aot_mark_sharding_lowering(t, mesh, partition_spec):
    # Reached with the engine's inner tensors when a traced graph (AOT
    # autograd, dynamo) runs the operator: annotate the new value directly.
    import ast
    from torchtpu import _C
    from torch_xla.distributed.spmd import spmd_mode
    from torch_xla.distributed.spmd.mesh import Mesh
    the_mesh = Mesh.from_str(mesh)
    if the_mesh is None:
        raise ValueError(f"xla::aot_mark_sharding: not a mesh: {mesh!r}")
    spec = spec_tuple(the_mesh, ast.literal_eval(partition_spec), t.dim())
    spmd_mode.ensure_spmd("mark_sharding_with_gradients")
    out = t * torch.ones((), dtype=t.dtype)
    _C.sharding_set(out._h, spec)
    return out


def _register_lowering():
    from torchtpu.lowering.core import LOWERINGS
    LOWERINGS[torch.ops.xla.aot_mark_sharding.default] = _aot_mark_sharding_lowering


_register_lowering()


class MarkShardingFunction(torch.autograd.Function):
    """mark_sharding on a copy of the input, and on the input's gradient."""

    @staticmethod
    def forward(ctx, t, mesh, partition_spec):
        ctx.mesh, ctx.partition_spec = mesh, tuple(partition_spec)
        return _aot_mark_sharding(annotations.unwrap(t), str(mesh), repr(tuple(partition_spec)))

    @staticmethod
    def backward(ctx, grad_output):
        if grad_output is None:
            return None, None, None
        return (_aot_mark_sharding(grad_output, str(ctx.mesh), repr(ctx.partition_spec)),
                None, None)


def mark_sharding_with_gradients(t, mesh, partition_spec):
    t = annotations.unwrap(t)
    annotations.check_xla(t, "mark_sharding_with_gradients")
    # Checked before autograd sees it, so the message is the mesh's.
    spec_tuple(mesh, partition_spec, t.dim())
    return MarkShardingFunction.apply(t, mesh, tuple(partition_spec))


def shard_as(a, b):
    a_flat, a_tree = tree_flatten(a)
    b_flat, b_tree = tree_flatten(b)
    if a_tree != b_tree:
        raise AssertionError(f"a and b must have the same structure. got {a_tree} and {b_tree}")
    for x, y in zip(a_flat, b_flat):
        if x is None or y is None:
            if not (x is None and y is None):
                raise AssertionError("shard_as: a None leaf must be None in both pytrees")
            continue
        if not isinstance(x, torch.Tensor):
            continue
        gx, gy = annotations.unwrap(x), annotations.unwrap(y)
        annotations.check_xla(gx, "shard_as")
        annotations.check_xla(gy, "shard_as")
        sx, sy = annotations.spec_tuple_of(gx), annotations.spec_tuple_of(gy)
        if tuple(gx.shape) != tuple(gy.shape):
            raise RuntimeError(f"shard_as: shapes differ: {tuple(gx.shape)} and "
                               f"{tuple(gy.shape)}")
        if sx is not None and sy is None:
            annotations.set_spec(gy, sx, "shard_as", check_existing=False)
        elif sy is not None and sx is None:
            annotations.set_spec(gx, sy, "shard_as", check_existing=False)
        elif sx is not None and sx != sy:
            raise RuntimeError("shard_as: the tensors are already sharded differently: "
                               f"{annotations.get_sharding_spec(gx)} and "
                               f"{annotations.get_sharding_spec(gy)}")
    return tree_unflatten(a_flat, a_tree), tree_unflatten(b_flat, b_tree)


def apply_backward_optimization_barrier(m):
    import torch_xla.core.xla_model as xm

    def optimization_barrier(module, grad_input, grad_output):
        tensors = [p.grad for p in module.parameters() if p.grad is not None]
        tensors += [g for g in grad_input if isinstance(g, torch.Tensor)]
        if tensors:
            xm.optimization_barrier_(tensors)

    return m.register_full_backward_hook(optimization_barrier)
