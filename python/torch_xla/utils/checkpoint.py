"""torch_xla.utils.checkpoint: activation checkpointing for xla tensors
(PyTorch/XLA's checkpoint(), same signature as torch.utils.checkpoint's).

checkpoint(function, *args) runs function without keeping its
intermediate activations and runs it again during backward to get them.
With preserve_rng_state=True (the default) the recomputation sees the same
random numbers as the first run: the CPU generator's state and the current
xla device's RNG state are saved before the forward pass and restored
around the recomputation (torch.utils.checkpoint cannot do the latter:
there is no torch.xla device module, so it fails on xla tensors).

use_reentrant=True (PyTorch/XLA's default) uses an autograd Function that
recomputes inside backward; use_reentrant=False uses saved-tensor hooks
(the approach of torch.utils.checkpoint's non-reentrant variant, which
cannot itself run on xla tensors) and passes other keyword arguments to
function.
"""
import contextlib

import torch

import torch_xla.core.xla_model as xm


def _has_xla_tensor(args):
  return any(isinstance(a, torch.Tensor) and a.device.type == 'xla' for a in args)


class _RngSnapshot:
  """The CPU generator's and the current xla device's RNG states."""

  def __init__(self, with_xla):
    self.cpu = torch.get_rng_state()
    self.xla = xm.get_rng_state() if with_xla else None

  @contextlib.contextmanager
  def restored(self):
    """Inside: the saved states. After: the states from before entering."""
    with torch.random.fork_rng(devices=[]), xm.fork_rng(enabled=self.xla is not None):
      torch.set_rng_state(self.cpu)
      if self.xla is not None:
        xm.set_rng_state(self.xla)
      yield


def _detach_inputs(inputs):
  out = []
  for x in inputs:
    if isinstance(x, torch.Tensor):
      d = x.detach()
      d.requires_grad_(x.requires_grad)
      out.append(d)
    else:
      out.append(x)
  return tuple(out)


class CheckpointFunction(torch.autograd.Function):
  """Reentrant checkpoint: forward under no_grad, recompute in backward."""

  @staticmethod
  def forward(ctx, run_function, preserve_rng_state, *args):
    ctx.run_function = run_function
    ctx.rng = _RngSnapshot(_has_xla_tensor(args)) if preserve_rng_state else None
    ctx.had_autocast = torch.is_autocast_enabled('xla')
    # Tensors go through save_for_backward; everything else is kept as is.
    ctx.inputs = []
    ctx.tensor_indices = []
    tensors = []
    for i, a in enumerate(args):
      if isinstance(a, torch.Tensor):
        tensors.append(a)
        ctx.tensor_indices.append(i)
        ctx.inputs.append(None)
      else:
        ctx.inputs.append(a)
    ctx.save_for_backward(*tensors)
    with torch.no_grad():
      return run_function(*args)

  @staticmethod
  def backward(ctx, *grad_outputs):
    if not torch.autograd._is_checkpoint_valid():
      raise RuntimeError(
          'Checkpointing is not compatible with .grad() or when an `inputs` '
          'parameter is passed to .backward(). Please use .backward() and do '
          'not pass its `inputs` argument.')
    inputs = list(ctx.inputs)
    for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
      inputs[i] = t
    detached = _detach_inputs(inputs)
    rng = ctx.rng.restored() if ctx.rng is not None else contextlib.nullcontext()
    with rng, torch.enable_grad(), torch.autocast('xla', enabled=ctx.had_autocast):
      outputs = ctx.run_function(*detached)
    if isinstance(outputs, torch.Tensor):
      outputs = (outputs,)
    with_grad = [(o, g) for o, g in zip(outputs, grad_outputs)
                 if isinstance(o, torch.Tensor) and o.requires_grad]
    if not with_grad:
      raise RuntimeError('none of output has requires_grad=True,'
                         ' this checkpoint() is not necessary')
    torch.autograd.backward([o for o, _ in with_grad], [g for _, g in with_grad])
    grads = tuple(d.grad if isinstance(d, torch.Tensor) else None for d in detached)
    return (None, None) + grads


class _Recomputation:
  """Non-reentrant checkpointing with saved-tensor hooks: the forward pass
  runs with autograd on but every tensor autograd would save is replaced by
  its position; the first backward use of any of them reruns function
  (RNG restored) with hooks that collect the saved tensors in the same
  order, and each position is then answered from that list."""

  def __init__(self, function, args, kwargs, preserve):
    self.function = function
    self.args = args
    self.kwargs = kwargs
    self.rng = _RngSnapshot(_has_xla_tensor(args)) if preserve else None
    self.autocast = torch.is_autocast_enabled('xla')
    self.count = 0
    self.saved = None

  def _pack_forward(self, t):
    self.count += 1
    return self.count - 1

  def _recompute(self):
    saved = []
    detached = _detach_inputs(self.args)
    rng = self.rng.restored() if self.rng is not None else contextlib.nullcontext()
    with rng, torch.enable_grad(), torch.autocast('xla', enabled=self.autocast), \
        torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
      self.function(*detached, **self.kwargs)
    if len(saved) != self.count:
      raise RuntimeError(
          'torch_xla.utils.checkpoint: the recomputation saved {} tensors for backward, '
          'the original forward pass {}; the checkpointed function must compute the '
          'same thing when run again'.format(len(saved), self.count))
    self.saved = saved

  def _unpack(self, index):
    if self.saved is None:
      self._recompute()
    return self.saved[index]

  def run(self):
    with torch.autograd.graph.saved_tensors_hooks(self._pack_forward, self._unpack):
      return self.function(*self.args, **self.kwargs)


def checkpoint(function, *args, use_reentrant: bool = True, **kwargs):
  """function(*args) without stored activations (see the module
  docstring). Keyword arguments: preserve_rng_state (default True), and
  with use_reentrant=False those of torch.utils.checkpoint.checkpoint."""
  preserve = kwargs.pop('preserve_rng_state', True)
  if use_reentrant:
    if kwargs:
      raise ValueError('Unexpected keyword arguments: ' + ','.join(kwargs))
    return CheckpointFunction.apply(function, preserve, *args)

  for k in ('context_fn', 'determinism_check', 'debug'):
    kwargs.pop(k, None)  # torch.utils.checkpoint's options; the defaults hold here
  return _Recomputation(function, args, kwargs, preserve).run()
