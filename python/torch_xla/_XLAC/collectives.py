"""PyTorch/XLA's SPMD collectives by their internal names
(_xla_spmd_all_reduce, _xla_spmd_reduce_scatter): the collectives of
torch_xla.core.xla_model, which in SPMD mode (xr.use_spmd()) carry a
channel and groups of partition ids -- inside a manual region
(xs.enable_manual_sharding) they run between the partitions
(docs/spmd.md "Partitioner", manual regions)."""
from torchtpu import collectives


def _xla_spmd_all_reduce(reduce_type, input, scale, groups):
    return collectives.all_reduce(reduce_type, input, scale=scale, groups=groups)


def _xla_spmd_reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups):
    return collectives.reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count,
                                      groups=groups)
