"""torch_xla.utils.dlpack: DLPack exchange for xla tensors (PyTorch/XLA's
to_dlpack / from_dlpack).

Deviation: PyTorch/XLA shares the device buffer (zero copy). Here an
engine buffer has no stable address a capsule could keep alive, so
to_dlpack hands out a CPU copy of the tensor's value and from_dlpack
copies the (CPU) capsule's data onto the xla device; writes to one side are
not seen by the other. Only CPU producers are accepted, as upstream.
"""
from typing import Any

import torch
from torch.utils.dlpack import DLDeviceType


def to_dlpack(xla_tensor: Any):
  """A DLPack capsule holding a CPU copy of xla_tensor's value."""
  if not isinstance(xla_tensor, torch.Tensor) or xla_tensor.device.type != 'xla':
    raise RuntimeError(f'to_dlpack expects an xla tensor, got '
                       f'{getattr(xla_tensor, "device", type(xla_tensor).__name__)}')
  return torch.utils.dlpack.to_dlpack(xla_tensor.detach().cpu().contiguous())


def from_dlpack(ext_tensor: Any):
  """An xla tensor (current device) with the value of a DLPack capsule or of
  an object implementing __dlpack__ (CPU only: ValueError otherwise)."""
  if hasattr(ext_tensor, '__dlpack_device__') and hasattr(ext_tensor, '__dlpack__'):
    device_type, _ = ext_tensor.__dlpack_device__()
    if device_type != DLDeviceType.kDLCPU:
      raise ValueError("PyTorch/XLA DLPack implementation currently only supports CPU.")
    ext_tensor = ext_tensor.__dlpack__()
  import torch_xla
  return torch.utils.dlpack.from_dlpack(ext_tensor).to(torch_xla.device())
