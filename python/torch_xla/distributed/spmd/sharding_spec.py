"""ShardingSpec: a mesh and a partition spec, applied later.

Contract (PyTorch/XLA's dataclass of the same name): ShardingSpec(mesh,
partition_spec, minibatch=False); can_apply(t) is True when the spec's
length is t's rank; apply(t) marks t (mark_sharding). minibatch=True means
each host loads only its slice of the batch (PyTorch/XLA's multi-host
input pipelines); with one host here a minibatch is the whole global
batch, so apply is the same either way. Used by MpDeviceLoader's
input_sharding.
"""
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class ShardingSpec:
    mesh: Any
    partition_spec: tuple
    minibatch: Optional[bool] = False

    def __post_init__(self):
        from torch_xla.distributed.spmd.mesh import spec_tuple
        self.partition_spec = tuple(self.partition_spec)
        # A spec the mesh cannot express fails here, not at the first batch.
        spec_tuple(self.mesh, self.partition_spec, len(self.partition_spec))

    def can_apply(self, t):
        return len(t.shape) == len(self.partition_spec)

    def apply(self, t):
        from torch_xla.distributed.spmd.annotations import mark_sharding
        return mark_sharding(t, self.mesh, self.partition_spec)
