"""torch_xla.experimental.fori_loop: while_loop and fori_loop on xla
tensors (PyTorch/XLA's module; importing it registers the XLA
implementation of torch._higher_order_ops.while_loop).

while_loop(cond_fn, body_fn, carried_inputs, additional_inputs=None)
returns the carried inputs after body_fn has been applied while
cond_fn(*carried, *additional) is true; fori_loop(lower, upper, body_fun,
*inputs) applies body_fun (upper - lower) times and returns
(0-d counter tensor, results...), as PyTorch/XLA does.

How this engine runs them: PyTorch/XLA lowers the loop to one XLA While
op. This engine's IR has no loop, so the condition is read on the host
each iteration (one small graph execution per iteration) and body_fn's
operations are recorded into the lazy graph once per iteration. Values
are those of the Python loop `while cond_fn(*x): x = body_fn(*x)`.
"""
import torch
from torch._C import DispatchKey
from torch._higher_order_ops.while_loop import while_loop_op

from torchtpu import bridge as _bridge


def _as_bool(value) -> bool:
  if isinstance(value, torch.Tensor):
    if value.numel() != 1:
      raise RuntimeError(
          f'while_loop: cond_fn must return a boolean scalar tensor, got shape '
          f'{tuple(value.shape)}')
    return bool(value.item())
  return bool(value)


def _run_while(cond_fn, body_fn, carried_inputs, additional_inputs):
  carried = tuple(carried_inputs)
  additional = tuple(additional_inputs or ())
  while _as_bool(cond_fn(*carried, *additional)):
    out = body_fn(*carried, *additional)
    out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(out) != len(carried):
      raise RuntimeError(
          f'while_loop: body_fn returned {len(out)} values for {len(carried)} carried inputs')
    carried = out
  return carried


@while_loop_op.py_impl(DispatchKey.XLA)
def while_loop(cond_fn, body_fn, carried_inputs, additional_inputs=None):
  """The carried inputs after the loop (see the module docstring)."""
  return _run_while(cond_fn, body_fn, carried_inputs, additional_inputs)


# Under functionalization the operator reaches the engine's tensor
# subclass (the Python dispatch key) rather than the XLA key.
@while_loop_op.py_impl(_bridge.XlaTensor)
def _while_loop_xla_tensor(cond_fn, body_fn, carried_inputs, additional_inputs=None):
  return _run_while(cond_fn, body_fn, carried_inputs, additional_inputs)


def fori_loop(lower, upper, body_fun, *input_value):
  """body_fun applied (upper - lower) times to input_value; returns the
  counter (0 at the end) followed by the results."""
  count = upper - lower
  if not isinstance(count, torch.Tensor):
    count = torch.tensor(count)
  if int(count) < 0:
    raise ValueError(f'fori_loop: upper ({upper}) must not be smaller than lower ({lower})')

  def cond_fn(i, *values):
    return i > 0

  def body_fn(i, *values):
    out = body_fun(*values)
    out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return (i - 1,) + out

  return _run_while(cond_fn, body_fn, (count,) + tuple(input_value), ())
