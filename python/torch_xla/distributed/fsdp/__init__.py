"""torch_xla.distributed.fsdp: PyTorch/XLA's fully sharded data parallel
(XlaFullyShardedDataParallel), its checkpoint consolidation and module
helpers (docs/fsdp.md)."""
from .xla_fully_sharded_data_parallel import XlaFullyShardedDataParallel  # noqa: F401
from .state_dict_utils import (consolidate_sharded_state_dicts,  # noqa: F401
                               consolidate_sharded_model_checkpoints)
from .utils import apply_xla_patch_to_nn_linear, checkpoint_module  # noqa: F401

__all__ = [
    "XlaFullyShardedDataParallel",
    "consolidate_sharded_state_dicts",
    "consolidate_sharded_model_checkpoints",
    "checkpoint_module",
]
