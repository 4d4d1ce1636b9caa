"""nn.Linear for sharding propagation: PyTorch/XLA's
xla_patched_nn_linear_forward, XLAPatchedLinear, EinsumLinear and
apply_xla_patch_to_nn_linear (torch_xla.distributed.spmd).

F.linear on a [B, S, K] input flattens it to [B*S, K] for a matrix
multiply, and the reshape merges the dimensions a sharding annotation
names, so the partitioner cannot carry the input's sharding to the output.
The patched forward contracts the input's last dimension with the weight
while the input keeps its shape: on a rank-3 input it is one dot whose
batch and row dimensions are the input's own, with the weight shared by
every batch element. Other ranks take F.linear's path (a 2D input has
nothing to merge). The backward pass is written out (as PyTorch/XLA's is),
so autograd does not differentiate through the engine-level forward.
Under torch.autocast('xla') the inputs are cast to the autocast dtype,
as PyTorch/XLA's custom_fwd does.
"""
from typing import Optional

import torch
from torch import Tensor

from torchtpu import bridge, ir


def _autocast_dtype():
    try:
        return torch.get_autocast_dtype("xla")
    except (RuntimeError, TypeError, AttributeError):
        return torch.bfloat16


def _forward_value(input, weight, bias):
    """input @ weight.T + bias with input's leading dimensions kept."""
    if input.dim() != 3 or weight.dim() != 2 or input.device.type != "xla":
        return torch.nn.functional.linear(input, weight, bias)
    if input.dtype != weight.dtype:
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {input.dtype} != {weight.dtype}")
    if input.shape[-1] != weight.shape[1]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({input.shape[0] * input.shape[1]}x"
            f"{input.shape[2]} and {weight.shape[1]}x{weight.shape[0]})")
    out_features, in_features = weight.shape
    # The weight as one shared batch element: [1, out, in], contracted on
    # its last dimension (trans_b).
    w = ir.broadcast(bridge.handle_of(weight), dims=(1, out_features, in_features))
    out = bridge.wrap_user(ir.dot(bridge.handle_of(input), w, trans_b=1))
    return out + bias if bias is not None else out


class XLAPatchedLinear(torch.autograd.Function):
    """torch.nn.functional.linear that keeps a rank-3 input's dimensions
    (no flattening reshape) so shardings propagate through it."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="xla", cast_inputs=_autocast_dtype())
    def forward(ctx, input: Tensor, weight: Tensor, bias: Optional[Tensor] = None):
        ctx.save_for_backward(input, weight, bias)
        with torch.no_grad():
            return _forward_value(input, weight, bias)

    @staticmethod
    @torch.amp.custom_bwd(device_type="xla")
    def backward(ctx, grad_output: Tensor):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = torch.einsum("...m,mn->...n", grad_output, weight)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.einsum("...m,...n->mn", grad_output, input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.reshape(-1, grad_output.shape[-1]).sum(0)
        return grad_input, grad_weight, grad_bias


def xla_patched_nn_linear_forward(m, input):
    """nn.Linear.forward through XLAPatchedLinear (m: the Linear module)."""
    return XLAPatchedLinear.apply(input, m.weight, m.bias)


class EinsumLinear(torch.nn.Linear):
    """nn.Linear whose forward is xla_patched_nn_linear_forward."""

    def forward(self, input):
        return xla_patched_nn_linear_forward(self, input)


def apply_xla_patch_to_nn_linear(module: torch.nn.Module):
    """Replaces every nn.Linear under module (recursively) by an
    EinsumLinear holding the same parameters; returns module. (The FSDP
    helper of the same name, torch_xla.distributed.fsdp.utils, patches the
    forward methods in place instead.)"""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear) and not isinstance(child, EinsumLinear):
            with torch.device("meta"):
                patched = EinsumLinear(child.in_features, child.out_features,
                                       bias=child.bias is not None)
            patched.load_state_dict(child.state_dict(), strict=True, assign=True)
            setattr(module, name, patched)
        else:
            apply_xla_patch_to_nn_linear(child)
    return module
