"""torch_xla.experimental.distributed_checkpoint: checkpoints of sharded
state through torch.distributed.checkpoint (PyTorch/XLA's API).

planners.py: SPMDSavePlanner / SPMDLoadPlanner (each shard written once,
resharding on load); manager.py: CheckpointManager (per-step checkpoints,
async saves, keep-last-n, preemption; each step committed by an atomic
rename: step_dirs.py); util.py: prime_optimizer. docs/checkpoints.md.
"""
from .manager import CheckpointManager
from .planners import SPMDLoadPlanner, SPMDSavePlanner
from .util import prime_optimizer

__all__ = [
    "CheckpointManager",
    "SPMDSavePlanner",
    "SPMDLoadPlanner",
    "prime_optimizer",
]
