"""torch_xla.amp.GradScaler: torch.amp.GradScaler on xla devices.

Loss scaling for float16 autocast (bfloat16 needs none). The scaler's
bookkeeping (unscale, inf check, scale update) is torch.amp.GradScaler's,
run on the device. What differs is the optimizer step: a sync-free
optimizer (torch_xla.amp.syncfree, any optimizer whose step takes
found_inf) gets the summed found_inf tensor and decides on the device;
any other optimizer needs the value on the host, so the graph is cut
(torch_xla.sync) and found_inf read, as PyTorch/XLA does.
"""
import inspect

import torch


class GradScaler(torch.amp.GradScaler):

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        super().__init__("xla", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        found = list(optimizer_state["found_inf_per_device"].values())
        if "found_inf" in inspect.signature(optimizer.step).parameters:
            kwargs["found_inf"] = torch.stack(found).sum()
            return optimizer.step(*args, **kwargs)
        import torch_xla
        torch_xla.sync()
        if not sum(v.item() for v in found):
            return optimizer.step(*args, **kwargs)
        return None
