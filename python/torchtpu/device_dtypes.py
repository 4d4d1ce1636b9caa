"""XLA_USE_BF16 / XLA_DOWNCAST_BF16: PyTorch/XLA's deprecated switches that
store floating tensors narrower on the device than PyTorch sees them.

  XLA_USE_BF16=1       float32 and float64 are bfloat16 on the device
  XLA_DOWNCAST_BF16=1  float32 is bfloat16, float64 is float32

As in PyTorch/XLA, the switches are read once, when the first xla tensor's
dtype is mapped (not at import: Lightning's XLA bf16 precision plugin sets
XLA_USE_BF16 after importing torch_xla), print PyTorch/XLA's deprecation
line, and from then on every op computes in the device dtype while the
tensors report the host dtype: a bfloat16 engine value is a float32 tensor
to PyTorch (float64 for the downcast float32), and a read to the host
widens it back. A tensor made as bfloat16 explicitly therefore reports
float32, as it does on PyTorch/XLA.

bridge.py owns the maps; apply() edits them in place once."""
import os

import torch

_TRUE = ("1", "true", "yes", "on")


def _set(name):
    return os.environ.get(name, "").strip().lower() in _TRUE


def apply(torch_to_tt, tt_to_torch, tt_f64, tt_f32, tt_bf16):
    """Reads the switches and rewrites the dtype maps (torch dtype -> device
    code, device code -> torch dtype). Returns the switch in force: None,
    'XLA_USE_BF16' or 'XLA_DOWNCAST_BF16'."""
    use = _set("XLA_USE_BF16")
    downcast = _set("XLA_DOWNCAST_BF16")
    if use:
        print("XLA_USE_BF16 will be deprecated after the 2.6 release, please convert your "
              "model to bf16 directly", flush=True)
        torch_to_tt[torch.float32] = tt_bf16
        torch_to_tt[torch.float64] = tt_bf16
        tt_to_torch[tt_bf16] = torch.float32
        return "XLA_USE_BF16"
    if downcast:
        print("XLA_DOWNCAST_BF16 will be deprecated after the 2.6 release, please downcast "
              "your model directly", flush=True)
        torch_to_tt[torch.float32] = tt_bf16
        torch_to_tt[torch.float64] = tt_f32
        tt_to_torch[tt_bf16] = torch.float32
        tt_to_torch[tt_f32] = torch.float64
        return "XLA_DOWNCAST_BF16"
    return None
