"""torch_xla.amp.autocast: torch.autocast for xla devices.

`with torch_xla.amp.autocast(device):` is `torch.autocast('xla', ...)`
with bfloat16 as the default dtype, as in PyTorch/XLA on TPU. PyTorch/XLA
ignores autocast (with a printed warning) on devices other than TPU and
NEURON; this engine is the backend of every xla device here, so autocast
is on for them all (docs/amp.md). Only bfloat16 and float16 are lower
precision types; any other dtype warns and disables autocast, as
torch.autocast does.
"""
import warnings

import torch


class autocast(torch.amp.autocast_mode.autocast):
    """torch.autocast('xla') for an xla device (bfloat16 unless dtype says)."""

    def __init__(self, device, enabled: bool = True, dtype: torch.dtype = None,
                 cache_enabled: bool = True):
        if "xla" not in str(device):
            raise AssertionError("torch_xla.autocast is available for XLA:TPU")
        if dtype is None:
            dtype = torch.bfloat16
        if dtype not in (torch.bfloat16, torch.float16):
            warnings.warn("In XLA autocast, but the target dtype is not supported. Disabling "
                          "autocast.\nXLA Autocast only supports dtypes of torch.bfloat16 and "
                          "torch.float16 currently.")
            enabled = False
            dtype = torch.bfloat16
        self._xla_device = str(device)
        super().__init__("xla", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)
