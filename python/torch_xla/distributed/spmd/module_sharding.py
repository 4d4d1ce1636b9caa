"""mark_sharding(module, mesh, spec): one partition spec for a whole module.

Contract: every parameter of the module (named_parameters(), shared ones
once) whose rank equals len(spec) is annotated with spec; every other
parameter without an annotation is annotated replicated (all of it on every device, the layout
an unannotated tensor gets anyway, written down so get_sharding_spec
shows it; a later mark_sharding of such a parameter may still shard it,
replicated annotations do not block re-marking). Buffers are left alone.
A spec that fits no parameter is almost certainly a mistake and raises
SpmdSpecError naming the ranks present; a parameter not on an xla device
is a TypeError. The parameters themselves stay nn.Parameter objects (no
XLAShardedTensor wrapping), so optimizers and state dicts see the same
tensors. Returns the module.
"""
from torch_xla.distributed.spmd import annotations
from torch_xla.distributed.spmd.mesh import SpmdSpecError, spec_tuple


def mark_module(module, mesh, partition_spec):
    spec = tuple(partition_spec)
    params = list(module.named_parameters())
    for name, p in params:
        annotations.check_xla(p, f"mark_sharding(module): parameter {name!r}")
    ranks = sorted({p.dim() for _, p in params})
    if len(spec) not in ranks:
        # Validate the spec against the mesh first: a bad axis name is the
        # more useful message.
        spec_tuple(mesh, spec, len(spec))
        raise SpmdSpecError(
            f"mark_sharding(module): the partition spec {spec} has length {len(spec)} but the "
            f"module's parameters have ranks {ranks}; it is applied to the parameters whose "
            "rank equals its length")
    for _, p in params:
        if p.dim() == len(spec):
            annotations.mark_sharding(p, mesh, spec)
        elif annotations.spec_tuple_of(p) is None:
            annotations.set_spec(p, spec_tuple(mesh, (None,) * p.dim(), p.dim()),
                                 "mark_sharding", check_existing=False)
    return module
