"""torch_xla.experimental.pjrt: where PyTorch/XLA before 2.1 kept the PJRT
runtime API (now torch_xla.runtime and torch_xla._internal.pjrt); lightning
still imports broadcast_master_param and using_pjrt from here."""
from torch_xla._internal.pjrt import run_multiprocess, spawn, spawn_threads  # noqa: F401
from torch_xla.runtime import (  # noqa: F401
    addressable_device_count, device_type, global_device_count, global_ordinal,
    local_device_count, local_ordinal, local_process_count, process_count, process_index,
    using_pjrt, world_size)


def broadcast_master_param(model) -> None:
    """Makes every replica's parameters replica 0's
    (xm.broadcast_master_param); with one replica they already are."""
    if world_size() != 1:
        from torch_xla.core import xla_model as xm
        xm.broadcast_master_param(model)
