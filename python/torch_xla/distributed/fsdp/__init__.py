"""torch_xla.distributed.fsdp: PyTorch/XLA's fully sharded data parallel
package. The module helpers are here; XlaFullyShardedDataParallel (which
shards parameters over replicas) belongs with the multi-process runtime
and is not provided yet."""
from .utils import apply_xla_patch_to_nn_linear, checkpoint_module  # noqa: F401

__all__ = ["checkpoint_module"]
