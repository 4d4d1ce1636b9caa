"""torch_xla.distributed.spmd.xla_sharding: the module PyTorch/XLA defines
the sharding API in; the same names as torch_xla.distributed.spmd."""
from torch_xla.distributed.spmd import *  # noqa: F401,F403
from torch_xla.distributed.spmd import (  # noqa: F401
    _mark_manual_sharding, reapply_shardings, unwrap_sharded_tensor, wrap_as_sharded_tensor)
from torch_xla.distributed.spmd.gradient_sharding import MarkShardingFunction  # noqa: F401
from torch_xla.distributed.spmd.mesh import spec_tuple  # noqa: F401
from torch_xla.distributed.spmd.patched_linear import (  # noqa: F401
    EinsumLinear, XLAPatchedLinear, apply_xla_patch_to_nn_linear, xla_patched_nn_linear_forward)
