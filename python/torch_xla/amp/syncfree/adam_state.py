"""The per-parameter state and the step loop shared by the sync-free Adam
and AdamW."""
import torch

from . import _functional as F


@torch.no_grad()
def adam_family_step(optimizer, closure, found_inf, use_adamw):
    """optimizer.step(closure, found_inf) for Adam (use_adamw False) or AdamW."""
    if found_inf.shape:
        raise ValueError("The found_inf tensor has to be scalar type")
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    for group in optimizer.param_groups:
        params, grads, avgs, sqs, maxs, steps = [], [], [], [], [], []
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("Adam does not support sparse gradients, please consider "
                                   "SparseAdam instead")
            params.append(p)
            grads.append(p.grad)
            state = optimizer.state[p]
            if not state:
                state["step"] = torch.zeros_like(found_inf)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["max_exp_avg_sq"] = (
                    torch.zeros_like(p, memory_format=torch.preserve_format)
                    if group["amsgrad"] else torch.empty(0, dtype=torch.float, device=p.device))
            avgs.append(state["exp_avg"])
            sqs.append(state["exp_avg_sq"])
            maxs.append(state["max_exp_avg_sq"])
            steps.append(state["step"])
        F.adam_step(found_inf, steps, params, grads, avgs, sqs, maxs, amsgrad=group["amsgrad"],
                    beta1=beta1, beta2=beta2, lr=group["lr"],
                    weight_decay=group["weight_decay"], eps=group["eps"],
                    maximize=group["maximize"], use_adamw=use_adamw)
    return loss
