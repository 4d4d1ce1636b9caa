"""torch_xla.experimental.gradient_accumulation: accumulate gradients over
the leading dimension of a batch (PyTorch/XLA's gradient_accumulation(),
same signature, results and errors).

For i in range(n), n the leading size of the iterable tensors:

    loss_i, *carried = train_step(*[t[i] for t in iterable_tensors], *carried)
    (loss_i / n).backward()          # gradients add up in param.grad
    accumulated_loss += loss_i / n

returning accumulated_loss, followed by the final carried tensors when
there are any. train_step must not modify its inputs in place
(AssertionError, as in PyTorch/XLA, whose loop body could not express it).

How this engine runs it: PyTorch/XLA emits one XLA While loop; this
engine's IR has no loop, so the n steps are recorded one after another
into the lazy graph (same values and gradients; random ops draw fresh
numbers every step).
"""
from dataclasses import dataclass
from typing import Any, Callable, Tuple, Union

import torch


@dataclass(frozen=True)
class GradientAccumulationContext:
  """Sizes of one gradient_accumulation call."""
  num_gradient_steps: int
  num_iterable_tensors: int
  num_carried_tensors: int


def gradient_accumulation(
    train_step: Callable[..., Any], iterable_tensors: Tuple[torch.Tensor],
    model: torch.nn.Module, *carried_tensors: torch.Tensor
) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
  """Runs train_step over the leading dimension of iterable_tensors and
  accumulates the gradients of model's parameters (see the module
  docstring). Raises ValueError for an empty iterable_tensors, a
  non-tensor or empty element, or mismatched leading sizes."""
  if not iterable_tensors:
    raise ValueError("iterable_tensors cannot be empty")
  steps = iterable_tensors[0].size(0)
  for i, t in enumerate(iterable_tensors):
    if not isinstance(t, torch.Tensor):
      raise ValueError(f"Element {i} of iterable_tensors is not a tensor")
    if t.numel() == 0:
      raise ValueError(f"Element {i} of iterable_tensors is empty")
    if t.size(0) != steps:
      raise ValueError(f"Element {i} of iterable_tensors has inconsistent first dimension")
  context = GradientAccumulationContext(steps, len(iterable_tensors), len(carried_tensors))
  return _gradient_accumulation(context, train_step, tuple(iterable_tensors), model,
                                tuple(carried_tensors))


def _gradient_accumulation(context, train_step, iterable_tensors, model, carried_tensors):
  device = iterable_tensors[0].device
  accumulated = torch.zeros((), dtype=torch.float32, device=device)
  carried = list(carried_tensors)
  n = context.num_gradient_steps
  for i in range(n):
    args = [t[i] for t in iterable_tensors] + carried
    versions = [a._version for a in args]
    result = train_step(*args)
    mutated = [j for j, (a, v) in enumerate(zip(args, versions)) if a._version != v]
    assert not mutated, (
        f"train_step modified its input(s) {mutated} in place; gradient_accumulation "
        "needs a pure train_step (return updated tensors as carried outputs instead)")
    if isinstance(result, (tuple, list)):
      loss, *new_carried = result
    else:
      loss, new_carried = result, []
    if len(new_carried) != context.num_carried_tensors:
      raise ValueError(
          f"train_step returned {len(new_carried)} carried tensors, expected "
          f"{context.num_carried_tensors}")
    loss = loss / n
    loss.backward()
    accumulated = accumulated + loss.detach()
    carried = list(new_carried)
  if not carried:
    return accumulated
  return (accumulated, *carried)
