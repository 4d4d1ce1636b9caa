"""torch_xla.distributed.fsdp.utils: module helpers PyTorch/XLA's FSDP
uses and exports (checkpoint_module, apply_xla_patch_to_nn_linear)."""
from types import MethodType

import torch

from torch_xla.utils.checkpoint import checkpoint


def checkpoint_module(module):
  """Makes module.forward run under torch_xla.utils.checkpoint (activation
  checkpointing) whenever one of its inputs requires grad; returns
  module."""
  assert isinstance(module, torch.nn.Module)

  def forward_packed(m, num_args, num_kwargs, *packed):
    # checkpoint() takes positional arguments only: keyword names and
    # values travel after the positional ones.
    assert num_args + 2 * num_kwargs == len(packed)
    args = packed[:num_args]
    names = packed[num_args:num_args + num_kwargs]
    values = packed[num_args + num_kwargs:]
    return m._xla_checkpointed_forward_original(*args, **dict(zip(names, values)))

  def forward(m, *args, **kwargs):
    packed = args + tuple(kwargs.keys()) + tuple(kwargs.values())
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in packed):
      return checkpoint(m._xla_checkpointed_forward_no_kwargs, len(args), len(kwargs),
                        *packed)
    # Nothing to differentiate through the inputs: checkpoint() would not
    # see the parameters' gradients either, so run plainly.
    return m._xla_checkpointed_forward_original(*args, **kwargs)

  module._xla_checkpointed_forward_original = module.forward
  module._xla_checkpointed_forward_no_kwargs = MethodType(forward_packed, module)
  module.forward = MethodType(forward, module)
  return module


class XLAPatchedLinear(torch.autograd.Function):
  """torch.nn.functional.linear with a backward pass that reads the weight
  parameter itself (not an intermediate), so FSDP can free full
  parameters after the forward pass."""

  @staticmethod
  def forward(ctx, input, weight, bias=None):
    ctx.save_for_backward(input, weight, bias)
    with torch.no_grad():
      return torch._C._nn.linear(input, weight, bias)

  @staticmethod
  def backward(ctx, grad_output):
    input, weight, bias = ctx.saved_tensors
    grad_input = grad_weight = grad_bias = None
    flat_in = input.flatten(0, -2) if input.dim() > 2 else input
    flat_grad = grad_output.flatten(0, -2) if input.dim() > 2 else grad_output
    if ctx.needs_input_grad[0]:
      grad_input = flat_grad.mm(weight).view(*input.size())
    if ctx.needs_input_grad[1]:
      grad_weight = flat_grad.t().mm(flat_in)
    if bias is not None and ctx.needs_input_grad[2]:
      grad_bias = flat_grad.sum(0)
    return grad_input, grad_weight, grad_bias


def _xla_patched_nn_linear_forward(m, input):
  return XLAPatchedLinear.apply(input, m.weight, m.bias)


def apply_xla_patch_to_nn_linear(module, patched_function=_xla_patched_nn_linear_forward):
  """Replaces the forward of every nn.Linear in module (whose forward is
  still nn.Linear's, also under checkpoint_module) with patched_function;
  returns module."""

  def patch(m, attr):
    method = getattr(m, attr, None)
    if method is None or getattr(method, '__func__', None) is not torch.nn.Linear.forward:
      return
    m._nn_linear_forward_original = method
    setattr(m, attr, MethodType(patched_function, m))

  for m in module.modules():
    if isinstance(m, torch.nn.Linear):
      patch(m, 'forward')
      patch(m, '_xla_checkpointed_forward_original')
  return module
