"""torch_xla.amp.syncfree.AdamW: torch.optim.AdamW whose step can be skipped
on the device (found_inf), with no host read."""
import torch
from torch import Tensor

from .adam_state import adam_family_step


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW plus step(found_inf=t): the step is taken where the
    scalar tensor t == 0, skipped otherwise. Without found_inf this is
    torch.optim.AdamW.step."""

    def step(self, closure=None, found_inf: Tensor = None):
        if found_inf is None:
            return super().step(closure=closure)
        return adam_family_step(self, closure, found_inf, use_adamw=True)
