"""The sync-free optimizer updates: one parameter's step, skipped on the
device when found_inf is non-zero, so no value is read to the host.

Each update computes the step torch.optim would take, then keeps the old
values where found_inf != 0 (torch.where on the device). `step` is a
scalar tensor counting the steps taken, incremented only by steps not
skipped; it also tells whether a momentum buffer holds a value yet. These
are torch_xla._XLAC._xla_sgd_optimizer_step_ / _xla_adam_optimizer_step_
(PyTorch/XLA implements them in C++); the Adam/AdamW/SGD classes call them
through sgd_step / adam_step with PyTorch/XLA's signatures.
"""
from typing import List, Optional

import torch
from torch import Tensor


def _keep_where_inf(found_inf, old, new):
    """new where no inf was found, else old (written into old)."""
    old.copy_(torch.where(found_inf != 0, old, new))


@torch.no_grad()
def sgd_optimizer_step_(found_inf, step, param, buf, d_p, weight_decay, momentum, lr,
                        dampening, nesterov, maximize):
    """One sync-free SGD step of param (in place, with buf and step)."""
    take = found_inf == 0
    grad = -d_p if maximize else d_p
    if weight_decay != 0:
        grad = grad + weight_decay * param
    if momentum != 0:
        # The first step taken starts the buffer at the gradient, as
        # torch.optim.SGD does; later ones blend with dampening.
        blended = momentum * buf + (1 - dampening) * grad
        new_buf = torch.where(step == 0, grad, blended)
        buf.copy_(torch.where(take, new_buf, buf))
        grad = grad + momentum * new_buf if nesterov else new_buf
    param.copy_(torch.where(take, param - lr * grad, param))
    step.add_(take.to(step.dtype))


@torch.no_grad()
def adam_optimizer_step_(found_inf, step, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq,
                         beta1, beta2, lr, weight_decay, eps, amsgrad, maximize, use_adamw):
    """One sync-free Adam (use_adamw: AdamW) step of param, in place."""
    take = found_inf == 0
    if maximize:
        grad = -grad
    new_step = step + take.to(step.dtype)
    p = param
    if weight_decay != 0:
        if use_adamw:
            p = p * (1 - lr * weight_decay)
        else:
            grad = grad + weight_decay * p
    m = exp_avg * beta1 + grad * (1 - beta1)
    v = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
    # Bias corrections with the step count this step would make (>= 1:
    # a skipped first step computes a value that is then discarded).
    t = torch.clamp(new_step, min=1).to(torch.float32)
    bias1 = 1 - torch.pow(torch.tensor(beta1, device=param.device), t)
    bias2 = 1 - torch.pow(torch.tensor(beta2, device=param.device), t)
    if amsgrad:
        vmax = torch.maximum(max_exp_avg_sq, v)
        max_exp_avg_sq.copy_(torch.where(take, vmax, max_exp_avg_sq))
        denom = torch.sqrt(vmax) / torch.sqrt(bias2) + eps
    else:
        denom = torch.sqrt(v) / torch.sqrt(bias2) + eps
    new_p = p - (lr / bias1) * m / denom
    exp_avg.copy_(torch.where(take, m, exp_avg))
    exp_avg_sq.copy_(torch.where(take, v, exp_avg_sq))
    param.copy_(torch.where(take, new_p.to(param.dtype), param))
    step.copy_(new_step)


def adam_step(found_inf: Tensor, state_steps: List[Tensor], params: List[Tensor],
              grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
              max_exp_avg_sqs: List[Tensor], *, amsgrad: bool, beta1: float, beta2: float,
              lr: float, weight_decay: float, eps: float, maximize: bool, use_adamw: bool):
    """Sync-free Adam/AdamW over parameter lists (PyTorch/XLA's functional API)."""
    for i, param in enumerate(params):
        adam_optimizer_step_(found_inf, state_steps[i], param, grads[i], exp_avgs[i],
                             exp_avg_sqs[i], max_exp_avg_sqs[i], beta1, beta2, lr, weight_decay,
                             eps, amsgrad, maximize, use_adamw)


def sgd_step(found_inf: Tensor, state_steps: List[Tensor], params: List[Tensor],
             d_p_list: List[Tensor], momentum_buffer_list: List[Optional[Tensor]], *,
             weight_decay: float, momentum: float, lr: float, dampening: float, nesterov: bool,
             maximize: bool):
    """Sync-free SGD over parameter lists (PyTorch/XLA's functional API).
    A missing momentum buffer is created (zeros; the first step taken fills
    it) and stored back into momentum_buffer_list."""
    for i, param in enumerate(params):
        d_p = d_p_list[i]
        buf = momentum_buffer_list[i]
        if buf is None:
            buf = torch.zeros_like(d_p).detach()
            momentum_buffer_list[i] = buf
        sgd_optimizer_step_(found_inf, state_steps[i], param, buf, d_p, weight_decay, momentum,
                            lr, dampening, nesterov, maximize)
