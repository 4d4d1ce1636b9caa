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


class MarkShardingFunction(torch.autograd.Function):
    """mark_sharding on a copy of the input, and on the input's gradient."""

    @staticmethod
    def forward(ctx, t, mesh, partition_spec):
        ctx.mesh, ctx.partition_spec = mesh, tuple(partition_spec)
        return _annotated_copy(annotations.unwrap(t), mesh, partition_spec,
                               "mark_sharding_with_gradients")

    @staticmethod
    def backward(ctx, grad_output):
        if grad_output is None:
            return None, None, None
        return (_annotated_copy(grad_output, ctx.mesh, ctx.partition_spec,
                                "mark_sharding_with_gradients (backward)"), None, None)


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
