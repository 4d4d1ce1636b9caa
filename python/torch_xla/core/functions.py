"""torch_xla.core.functions (xf): differentiable collectives and layers
built on them (PyTorch/XLA's module, same names and signatures).

Forward passes are xm's collectives; the backward passes are the adjoints:
an all_reduce(SUM)'s gradient is the (scaled) output gradient, an
all_gather's is this replica's slice. With one replica every collective is
the identity, so these reduce to their local computation.
"""
import torch

from torch_xla import runtime as xr
import torch_xla.core.xla_model as xm


class AllReduce(torch.autograd.Function):
  """xm.all_reduce with a backward pass (SUM, MUL, MIN, MAX)."""

  @staticmethod
  def forward(ctx, input, reduce_type, scale, groups):
    ctx.reduce_type = reduce_type
    ctx.scale = scale
    output = xm.all_reduce(reduce_type, input, scale=scale, groups=groups)
    ctx.save_for_backward(input, output)
    return output

  @staticmethod
  def backward(ctx, grad_output):
    input, output = ctx.saved_tensors
    grad = grad_output * ctx.scale if ctx.scale != 1.0 else grad_output
    if ctx.reduce_type == xm.REDUCE_SUM:
      return grad, None, None, None
    if ctx.reduce_type == xm.REDUCE_MUL:
      # d(prod)/d(x_i) = prod / x_i (zero where x_i is zero).
      ratio = torch.where(input != 0, output / input, torch.zeros_like(input))
      return grad * ratio, None, None, None
    if ctx.reduce_type in (xm.REDUCE_MIN, xm.REDUCE_MAX):
      # Only the replicas holding the extreme value receive the gradient.
      return torch.where(input == output, grad, torch.zeros_like(grad)), None, None, None
    raise RuntimeError('Unsupported reduce type: {}'.format(ctx.reduce_type))


def all_reduce(reduce_type, value, scale=1.0, groups=None):
  """xm.all_reduce(reduce_type, value, scale, groups), differentiable."""
  return AllReduce.apply(value, reduce_type, scale, groups)


class AllGather(torch.autograd.Function):
  """xm.all_gather with a backward pass (this replica's slice)."""

  @staticmethod
  def forward(ctx, input, dim):
    ctx.dim = dim
    ctx.ordinal = xr.global_ordinal()
    ctx.world_size = xr.world_size()
    return xm.all_gather(input, dim=dim)

  @staticmethod
  def backward(ctx, grad_output):
    size = grad_output.size(ctx.dim) // ctx.world_size
    return torch.narrow(grad_output.clone(), ctx.dim, ctx.ordinal * size, size), None


def all_gather(value, dim=0):
  """xm.all_gather(value, dim), differentiable."""
  return AllGather.apply(value, dim)


def distributed_mm(w, x, split=1):
  """w @ x with w sharded by columns over the replicas: w is N x Ko on each
  replica, x is (Ko * world_size) x M; returns N x M. split > 1 processes
  x's M columns in that many pieces (M must divide evenly)."""
  ordinal = xr.global_ordinal()
  assert x.size(0) // xr.world_size() == w.size(1)
  if split != 1:
    assert x.size(1) % split == 0
    pieces = torch.split(x, x.size(1) // split, dim=1)
  else:
    pieces = [x]
  results = []
  for piece in pieces:
    gathered = all_gather(piece, dim=1)
    mine = torch.narrow(gathered, 0, ordinal * w.size(1), w.size(1))
    summed = all_reduce(xm.REDUCE_SUM, w @ mine)
    results.append(torch.narrow(summed, 1, ordinal * piece.size(1), piece.size(1)))
  return torch.cat(results, dim=1) if len(results) > 1 else results[0]


class SyncBatchNorm(torch.nn.Module):
  """Batch normalization whose batch statistics are averaged over the
  replicas (inputs of rank 2 to 5, channels in dimension 1)."""

  def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
    super().__init__()
    self.num_features = num_features
    self.eps = eps
    self.momentum = momentum
    self.weight = torch.nn.Parameter(torch.ones(num_features))
    self.bias = torch.nn.Parameter(torch.zeros(num_features))
    self.register_buffer('running_mean', torch.zeros(num_features))
    self.register_buffer('running_var', torch.ones(num_features))

  def forward(self, batch: torch.Tensor) -> torch.Tensor:
    assert 2 <= batch.ndim <= 5 and batch.shape[1] == self.num_features
    dims = [d for d in range(batch.ndim) if d != 1]
    if self.training:
      scale = 1.0 / xr.world_size()
      mean = AllReduceSumLayer.apply(torch.mean(batch, dim=dims)) * scale
      sqr_mean = AllReduceSumLayer.apply(torch.mean(batch * batch, dim=dims)) * scale
      var = sqr_mean - mean.pow(2)
      self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
      self.running_var = (1 - self.momentum) * self.running_var + self.momentum * var
    else:
      mean, var = self.running_mean, self.running_var
    # Per-channel parameters broadcast over the other dimensions.
    shape = [1, self.num_features] + [1] * (batch.ndim - 2)
    return ((batch - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps) *
            self.weight.view(shape) + self.bias.view(shape))

  def extra_repr(self) -> str:
    return f'{self.num_features}, eps={self.eps}'


class AllReduceSumLayer(torch.autograd.Function):
  """all_reduce(SUM) whose gradient is also summed over the replicas."""

  @staticmethod
  def forward(ctx, x):
    return xm.all_reduce(xm.REDUCE_SUM, x)

  @staticmethod
  def backward(ctx, grad_output):
    return xm.all_reduce(xm.REDUCE_SUM, grad_output)
