"""torch_xla.amp.syncfree.SGD: torch.optim.SGD whose step can be skipped on
the device (found_inf), with no host read."""
import torch
from torch import Tensor

from . import _functional as F


class SGD(torch.optim.SGD):
    """torch.optim.SGD plus step(found_inf=t): t is a scalar tensor; the
    step is taken where t == 0 and skipped otherwise, decided on the device.
    Without found_inf this is torch.optim.SGD.step."""

    @torch.no_grad()
    def step(self, closure=None, found_inf: Tensor = None):
        if found_inf is None:
            return super().step(closure=closure)
        if found_inf.shape:
            raise ValueError("The found_inf tensor has to be scalar type")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, bufs, steps = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                params.append(p)
                grads.append(p.grad)
                state = self.state[p]
                if "step" not in state:
                    state["step"] = torch.zeros_like(found_inf)
                steps.append(state["step"])
                bufs.append(state.get("momentum_buffer"))
            F.sgd_step(found_inf, steps, params, grads, bufs,
                       weight_decay=group["weight_decay"], momentum=group["momentum"],
                       lr=group["lr"], dampening=group["dampening"],
                       nesterov=group["nesterov"], maximize=group["maximize"])
            for p, buf in zip(params, bufs):
                self.state[p]["momentum_buffer"] = buf
        return loss
