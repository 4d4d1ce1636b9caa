"""prime_optimizer: create an optimizer's state before a checkpoint is
restored into it.

Contract: torch optimizers create their state on the first step, and
distributed checkpoints load in place, so a fresh optimizer has nothing to
load into. prime_optimizer(opt) gives every parameter that requires grad a
zero gradient (annotated with the parameter's sharding), runs opt.step(),
syncs and waits, and returns opt. The step changes the state (and, for
optimizers with weight decay, the parameters): call it only right before
restoring both.
"""
import torch
from torch.utils._pytree import tree_map

import torch_xla
import torch_xla.core.xla_model as xm


def prime_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    from torch_xla.distributed.spmd import annotations
    # Parameters must be device data before the step reads them.
    torch_xla.sync()
    xm.wait_device_ops()

    def zero_grad(x):
        if isinstance(x, torch.Tensor) and x.requires_grad:
            x.grad = torch.zeros_like(x, requires_grad=False)
            spec = annotations.spec_tuple_of(x) if x.device.type == "xla" else None
            if spec is not None:
                annotations.set_spec(x.grad, spec, "prime_optimizer", check_existing=False)

    tree_map(zero_grad, optimizer.param_groups)
    optimizer.step()
    torch_xla.sync()
    xm.wait_device_ops()
    return optimizer
