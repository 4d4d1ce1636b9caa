"""torch_xla.experimental.scan: jax.lax.scan for PyTorch (PyTorch/XLA's
scan(), same signature and results).

scan(fn, init, xs) applies fn over the leading dimension of xs while
threading a carry:

    carry = init
    for i in range(len(xs)):
      carry, y_i = fn(carry, xs[i])
    return carry, stack(y_0, y_1, ...)

with init, xs and the ys being PyTrees (the leaves of xs sliced together,
the leaves of the ys stacked; None leaves stay None).

How this engine runs it: PyTorch/XLA traces fn once with AOTAutograd and
emits one XLA While loop. This engine's IR has no loop, so scan records
fn's operations once per iteration into the lazy graph (the graph grows
with the length; the values, gradients and random numbers are those of the
loop above). Autograd flows through the recorded iterations as through
any code. A partition_fn other than default_partition (e.g.
functorch.compile.min_cut_rematerialization_partition) asks for
activation checkpointing: each iteration is then run under
torch_xla.utils.checkpoint, so its activations are recomputed in
backward instead of kept. is_fn_pure is accepted (it only enables
PyTorch/XLA's tracing cache, which this implementation does not need).
"""
from typing import Callable, Optional, Sequence, Tuple, TypeVar

import torch
from torch.utils._pytree import PyTree, tree_flatten, tree_iter, tree_unflatten

try:
  from functorch.compile import default_partition  # noqa: F401  (PyTorch/XLA's default)
except ImportError:  # functorch ships with torch; keep scan importable regardless
  default_partition = None

Carry = TypeVar('Carry')
X = TypeVar('X')
Y = TypeVar('Y')

# PyTorch/XLA caches traced computations here; this implementation traces
# nothing, so the cache stays empty (kept so code that clears it runs).
_SCAN_COMPUTATION_CACHE = {}


def _remove_none(s: Sequence[Optional[torch.Tensor]]):
  """(the non-None items of s, a function putting the Nones back into a
  sequence of those items)."""
  mask = [v is None for v in s]
  kept = [v for v in s if v is not None]

  def add_back_nones(values):
    it = iter(values)
    return [None if is_none else next(it) for is_none in mask]

  return kept, add_back_nones


def tree_flatten_none(pytree: PyTree):
  """(the leaves of pytree without the None leaves, a function that
  rebuilds pytree, Nones included, from such a list)."""
  flat, spec = tree_flatten(pytree)
  kept, add_none = _remove_none(flat)

  def unflatten(values):
    return tree_unflatten(add_none(values), spec)

  return kept, unflatten


def _leading_length(xs) -> int:
  length = None
  for leaf in tree_iter(xs):
    n = len(leaf)
    if length is None:
      length = n
    elif n != length:
      raise ValueError(
          'The leaves of the `xs` input PyTree must have the same leading dimension '
          f'size. Got {length} and {n}')
  if length is None:
    raise ValueError(f'`xs` {xs} is an empty PyTree.')
  return length


def _step_function(fn, partition_fn):
  if partition_fn is None or partition_fn is default_partition:
    return fn
  import torch_xla.utils.checkpoint as checkpoint

  # Rematerialization: flat tensor arguments so checkpoint sees them.
  def remat(carry, x):
    flat_in, spec_in = tree_flatten((carry, x))
    out_spec = []

    def run(*flat):
      c, xi = tree_unflatten(list(flat), spec_in)
      out_flat, spec = tree_flatten(fn(c, xi))
      out_spec.append(spec)
      return tuple(out_flat)

    out = checkpoint.checkpoint(run, *flat_in, use_reentrant=False)
    return tree_unflatten(list(out), out_spec[0])

  return remat


def scan(fn: Callable[[Carry, X], Tuple[Carry, Y]],
         init: Carry,
         xs: X,
         partition_fn=default_partition,
         is_fn_pure: bool = False) -> Tuple[Carry, Y]:
  """(final carry, stacked ys) of fn scanned over xs' leading dimension;
  see the module docstring. Raises ValueError when fn is not callable, xs
  has no leaves or its leaves differ in length."""
  if not callable(fn):
    raise ValueError(f'`fn` {fn} must be callable.')
  length = _leading_length(xs)
  step = _step_function(fn, partition_fn)
  xs_flat, xs_spec = tree_flatten(xs)
  carry = init
  ys_steps = []
  for i in range(length):
    x_i = tree_unflatten([leaf[i] for leaf in xs_flat], xs_spec)
    carry, y = step(carry, x_i)
    ys_steps.append(y)
  if length == 0:
    return carry, None
  flat0, spec = tree_flatten(ys_steps[0])
  columns = [tree_flatten(y)[0] for y in ys_steps]
  stacked = []
  for j, leaf in enumerate(flat0):
    if leaf is None:
      stacked.append(None)
    else:
      stacked.append(torch.stack([col[j] for col in columns], dim=0))
  return carry, tree_unflatten(stacked, spec)


def value_and_grad_partitioned(fn, init, xs, partition_fn=default_partition,
                               is_fn_pure: bool = False):
  """PyTorch/XLA splits fn into AOTAutograd forward and backward graphs for
  its While-loop lowering; this engine unrolls scan instead and has no
  such graphs to return."""
  raise NotImplementedError(
      'value_and_grad_partitioned: this engine runs scan by recording each '
      'iteration (no While loop), so it does not split fn into forward and '
      'backward graphs; call scan() directly')
