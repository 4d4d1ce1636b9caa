"""torch.optim and torch.nn.utils.clip_grad_* take their foreach path on
xla tensors.

PyTorch picks an optimizer's implementation by device: foreach (one
_foreach_* call per update step for a whole parameter group) where the
device type is in torch.utils._foreach_utils'
_get_foreach_kernels_supported_devices(), a per-tensor loop elsewhere.
'xla' is not in that list, so on PyTorch/XLA an AdamW step issues about
eight ops per parameter, each paying PyTorch's dispatch and
functionalization. Here that per-op cost is most of a step's recording
(AdamW: ~37 us per in-place op, docs/tensor-bridge.md), so the list gains
'xla': the optimizer's math is the same, issued as _foreach_* ops, which
lower element by element (lowering/foreach_ops.py) in one dispatch each.

Explicit foreach=False still takes the loop; TORCHTPU_OPTIM_FOREACH=0
keeps PyTorch's device list unchanged (PyTorch/XLA's behaviour).
"""
import os

import torch.optim.optimizer as _optimizer
import torch.utils._foreach_utils as _foreach_utils


def _with_xla(devices):
    return lambda: devices() + ["xla"]


def install():
    if os.environ.get("TORCHTPU_OPTIM_FOREACH", "1") == "0":
        return
    _foreach_utils._get_foreach_kernels_supported_devices = _with_xla(
        _foreach_utils._get_foreach_kernels_supported_devices)
    _optimizer._get_foreach_kernels_supported_devices = _with_xla(
        _optimizer._get_foreach_kernels_supported_devices)


install()
