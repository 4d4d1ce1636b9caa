"""What each op of PyTorch/XLA's op builder (torch_xla.core.xla_builder)
computes on this engine: one function per XLA op name, taking an
evaluation context, the operand values and the op's attributes.

Contract: a value is a torch tensor or a (nested) tuple of them. Every op
is written with torch operations only, so the same function serves twice:
on 'meta' tensors when the op is built (shape and type checking: a bad
operand raises RuntimeError there, as XLA's builder reports its errors) and
on xla tensors when a built computation runs (the lazy engine records the
torch ops' lowerings). XLA's rules are checked before torch sees the
operands, because torch would silently promote or broadcast where XLA
refuses: binary ops need equal element types, and shapes that are equal,
scalar, or of equal rank with size-1 dimensions.

Ops this engine cannot express are in UNSUPPORTED: building one raises
NotImplementedError naming it. Control flow has no engine op: Conditional
computes both branches and selects (exact for side-effect-free branches,
which XLA computations are), While runs its condition on the host every
iteration (one device sync per iteration).
"""
import math

import torch

# XLA's element type names and the torch dtypes holding them.
XLA_TYPES = {
    'f32': torch.float32,
    'f64': torch.float64,
    'bf16': torch.bfloat16,
    'f16': torch.float16,
    'u8': torch.uint8,
    's8': torch.int8,
    'u16': torch.uint16,
    's16': torch.int16,
    'u32': torch.uint32,
    's32': torch.int32,
    'u64': torch.uint64,
    's64': torch.int64,
    'c64': torch.complex64,
    'c128': torch.complex128,
    'pred': torch.bool,
}
XLA_TYPE_NAMES = {v: k for k, v in XLA_TYPES.items()}

# Op name -> why the engine cannot build it.
UNSUPPORTED = {
    'Gather': 'general XLA gather dimension numbers have no engine op',
    'Scatter': 'scatter with a user combiner computation has no engine op',
    'Conv': 'XLA convolutions with general dimension numbers have no engine op',
    'ConvWithGeneralPadding': 'XLA convolutions with general dimension numbers have no engine op',
    'ConvWithGeneralDimensions': 'XLA convolutions with general dimension numbers have no engine op',
    'ConvGeneral': 'XLA convolutions with general dimension numbers have no engine op',
    'ConvGeneralDilated': 'XLA convolutions with general dimension numbers have no engine op',
    'SelectAndScatter': 'window select/scatter computations have no engine op',
    'SelectAndScatterWithGeneralPadding': 'window select/scatter computations have no engine op',
    'MaxPool': 'pooling with a general tensor format has no engine op',
    'ReduceWindow': 'window reductions with a user computation have no engine op',
    'Map': 'mapping a user computation over elements has no engine op',
    'SetDimensionSize': 'the engine has static shapes only (no dynamic dimensions)',
    'Clz': 'count-leading-zeros has no engine op',
}


class EvalContext:
  """Where values live: device 'meta' while building (checking only), the
  inputs' xla device while a computation runs."""

  def __init__(self, device):
    self.device = torch.device(device)
    self.meta = self.device.type == 'meta'

  def call(self, computation, args):
    return computation.evaluate(self, list(args))


META = EvalContext('meta')


def type_name(dtype):
  return XLA_TYPE_NAMES.get(dtype, str(dtype))


def shape_text(v):
  if isinstance(v, tuple):
    return '(' + ', '.join(shape_text(e) for e in v) + ')'
  return f"{type_name(v.dtype)}[{','.join(str(s) for s in v.shape)}]"


def to_torch_dtype(op, name):
  try:
    return XLA_TYPES[name]
  except (KeyError, TypeError):
    raise RuntimeError(f'{op}: unknown XLA element type {name!r} (known: '
                       f"{', '.join(XLA_TYPES)})") from None


def same_value_shape(a, b):
  """Equal shape and element type, tuples compared element by element."""
  if isinstance(a, tuple) or isinstance(b, tuple):
    return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and
            all(same_value_shape(x, y) for x, y in zip(a, b)))
  return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)


def _array(op, v):
  if isinstance(v, tuple):
    raise RuntimeError(f'{op}: expected an array operand, got the tuple {shape_text(v)}')
  return v


def _same_type(op, *vs):
  if any(v.dtype != vs[0].dtype for v in vs):
    raise RuntimeError(f'{op}: operands must have the same element type, got '
                       f"{', '.join(shape_text(v) for v in vs)}")


def _broadcastable(op, a, b):
  # XLA's implicit broadcasting: a scalar, or equal ranks where each pair of
  # sizes is equal or has a 1 (degenerate dimension).
  if a.dim() == 0 or b.dim() == 0:
    return
  if a.dim() != b.dim() or any(x != y and 1 not in (x, y) for x, y in zip(a.shape, b.shape)):
    raise RuntimeError(f'{op}: incompatible shapes {shape_text(a)} and {shape_text(b)} '
                       '(XLA broadcasts only scalars and size-1 dimensions of equal ranks)')


def _dims(op, what, dims, rank, unique=True):
  dims = tuple(int(d) for d in dims)
  if any(d < 0 or d >= rank for d in dims) or (unique and len(set(dims)) != len(dims)):
    raise RuntimeError(f'{op}: invalid {what} {list(dims)} for rank {rank}')
  return dims


def _is_int(v):
  return not v.is_floating_point() and not v.is_complex() and v.dtype != torch.bool


# ------------------------------------------------------------ elementwise
def _float_unary(fn):

  def run(ctx, ops, attrs, op):
    x = _array(op, ops[0])
    if not (x.is_floating_point() or x.is_complex()):
      raise RuntimeError(f'{op}: expected a floating point operand, got {shape_text(x)}')
    return fn(x)

  return run


def _numeric_unary(fn):

  def run(ctx, ops, attrs, op):
    x = _array(op, ops[0])
    if x.dtype == torch.bool:
      raise RuntimeError(f'{op}: expected a numeric operand, got {shape_text(x)}')
    return fn(x)

  return run


def _not(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  if x.is_floating_point() or x.is_complex():
    raise RuntimeError(f'{op}: expected a pred or integer operand, got {shape_text(x)}')
  return torch.bitwise_not(x)


def _real(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  return torch.real(x) if x.is_complex() else x


def _imag(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  return torch.imag(x) if x.is_complex() else torch.zeros_like(x)


def _conj(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  return torch.conj_physical(x) if x.is_complex() else x


def _div(a, b):
  # XLA's integer division rounds toward zero; torch's '/' would make floats.
  if _is_int(a):
    return torch.div(a, b, rounding_mode='trunc')
  return torch.div(a, b)


_ANY, _FLOAT, _BITS, _INT = 'any', 'float', 'bits', 'int'


def _binary(fn, kind):

  def run(ctx, ops, attrs, op):
    a, b = _array(op, ops[0]), _array(op, ops[1])
    _same_type(op, a, b)
    _broadcastable(op, a, b)
    if kind == _FLOAT and not (a.is_floating_point() or a.is_complex()):
      raise RuntimeError(f'{op}: expected floating point operands, got {shape_text(a)}')
    if kind == _BITS and (a.is_floating_point() or a.is_complex()):
      raise RuntimeError(f'{op}: expected pred or integer operands, got {shape_text(a)}')
    if kind == _INT and not _is_int(a):
      raise RuntimeError(f'{op}: expected integer operands, got {shape_text(a)}')
    return fn(a, b)

  return run


def _select(ctx, ops, attrs, op):
  pred, t, f = (_array(op, v) for v in ops)
  if pred.dtype != torch.bool:
    raise RuntimeError(f'{op}: the predicate must be pred, got {shape_text(pred)}')
  _same_type(op, t, f)
  if tuple(t.shape) != tuple(f.shape) or (pred.dim() and tuple(pred.shape) != tuple(t.shape)):
    raise RuntimeError(f'{op}: shapes differ: {shape_text(pred)}, {shape_text(t)}, '
                       f'{shape_text(f)}')
  return torch.where(pred, t, f)


def _clamp(ctx, ops, attrs, op):
  x, lo, hi = (_array(op, v) for v in ops)
  _same_type(op, x, lo, hi)
  for bound in (lo, hi):
    if bound.dim() and tuple(bound.shape) != tuple(x.shape):
      raise RuntimeError(f'{op}: a bound must be a scalar or of the operand shape, got '
                         f'{shape_text(bound)} for {shape_text(x)}')
  return torch.clamp(x, lo, hi)


def _convert(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  dtype = to_torch_dtype(op, attrs['to_type'])
  if x.is_complex() and not dtype.is_complex:
    return torch.real(x).to(dtype)  # XLA keeps the real part
  return x.to(dtype)


def _bitcast(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  dtype = to_torch_dtype(op, attrs['to_type'])
  src, dst = x.element_size(), torch.empty((), dtype=dtype).element_size()
  if src == dst:
    return x.view(dtype)
  if src > dst:  # XLA adds a minor dimension of src/dst elements
    return x.unsqueeze(-1).view(dtype)
  if x.dim() == 0 or x.shape[-1] != dst // src:
    raise RuntimeError(f'{op}: converting {shape_text(x)} to {attrs["to_type"]} needs a '
                       f'last dimension of {dst // src}')
  return x.view(dtype).squeeze(-1)


# --------------------------------------------------------------- products
def _dot(ctx, ops, attrs, op):
  a, b = _array(op, ops[0]), _array(op, ops[1])
  _same_type(op, a, b)
  precision = attrs.get('precision_config')
  if precision is not None and precision not in ('default', 'high', 'highest'):
    raise RuntimeError(f'Invalid precision config in args: {precision} (valid values: '
                       'default, high, highest)')
  if a.dim() not in (1, 2) or b.dim() not in (1, 2) or a.shape[-1] != b.shape[0]:
    raise RuntimeError(f'{op}: cannot multiply {shape_text(a)} by {shape_text(b)} (ranks 1 '
                       'or 2, contracting the last dimension of lhs with the first of rhs)')
  return torch.matmul(a, b)


def _flag(attrs, name, default):
  # PyTorch/XLA's optional attributes: absent or None means the default.
  value = attrs.get(name)
  return default if value is None else bool(value)


def _triangular_solve(ctx, ops, attrs, op):
  a, b = _array(op, ops[0]), _array(op, ops[1])
  _same_type(op, a, b)
  left = _flag(attrs, 'left_side', True)
  lower = _flag(attrs, 'lower', False)
  unit = _flag(attrs, 'unit_diagonal', False)
  transpose = _flag(attrs, 'transpose_a', False)
  if not a.is_floating_point() and not a.is_complex():
    raise RuntimeError(f'{op}: expected floating point operands, got {shape_text(a)}')
  if a.dim() < 2 or a.shape[-1] != a.shape[-2] or b.dim() != a.dim():
    raise RuntimeError(f'{op}: a must be square matrices of b\'s rank, got {shape_text(a)} '
                       f'and {shape_text(b)}')
  m = b.shape[-2] if left else b.shape[-1]
  if a.shape[-1] != m or tuple(a.shape[:-2]) != tuple(b.shape[:-2]):
    raise RuntimeError(f'{op}: shapes {shape_text(a)} and {shape_text(b)} do not match '
                       f'(left_side={left})')
  # op(a) = a^T reads the other triangle of a's storage as its upper/lower one.
  upper = lower if transpose else not lower
  mat = a.mT if transpose else a
  return torch.linalg.solve_triangular(mat, b, upper=upper, left=left, unitriangular=unit)


# ---------------------------------------------------------------- movement
def _reshape(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  sizes = tuple(int(s) for s in attrs['sizes'])
  dims = attrs.get('dimensions')
  if dims is not None:
    x = _permute(op, x, dims)
  if any(s < 0 for s in sizes) or math.prod(sizes) != x.numel():
    raise RuntimeError(f'{op}: cannot reshape {shape_text(x)} to {list(sizes)}')
  return x.reshape(sizes)


def _permute(op, x, perm):
  perm = _dims(op, 'permutation', perm, x.dim())
  if len(perm) != x.dim():
    raise RuntimeError(f'{op}: permutation {list(perm)} is not one of rank {x.dim()}')
  return x.permute(perm)


def _transpose(ctx, ops, attrs, op):
  return _permute(op, _array(op, ops[0]), attrs['permutation'])


def _broadcast(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  sizes = tuple(int(s) for s in attrs['sizes'])
  if any(s < 0 for s in sizes):
    raise RuntimeError(f'{op}: negative size in {list(sizes)}')
  return x.expand(*sizes, *x.shape)


def _broadcast_in_dim(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  sizes = tuple(int(s) for s in attrs['sizes'])
  dims = _dims(op, 'dimensions', attrs['dimensions'], len(sizes))
  if len(dims) != x.dim() or list(dims) != sorted(dims):
    raise RuntimeError(f'{op}: dimensions {list(dims)} must map the {x.dim()} operand '
                       'dimensions in increasing order')
  view = [1] * len(sizes)
  for i, d in enumerate(dims):
    if x.shape[i] not in (1, sizes[d]):
      raise RuntimeError(f'{op}: operand dimension {i} of size {x.shape[i]} cannot be '
                         f'broadcast to size {sizes[d]}')
    view[d] = x.shape[i]
  return x.reshape(view).expand(sizes)


def _slice(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  starts, limits = list(attrs['start_indices']), list(attrs['limit_indices'])
  strides = list(attrs.get('strides') or [1] * len(starts))
  if not len(starts) == len(limits) == len(strides) == x.dim():
    raise RuntimeError(f'{op}: start/limit/stride lists must have {x.dim()} entries')
  index = []
  for d, (s, l, st) in enumerate(zip(starts, limits, strides)):
    if not (0 <= s <= l <= x.shape[d]) or st < 1:
      raise RuntimeError(f'{op}: invalid slice [{s}:{l}:{st}] of dimension {d} of '
                         f'{shape_text(x)}')
    index.append(slice(int(s), int(l), int(st)))
  return x[tuple(index)]


def _slice_in_dim(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  dimno = _dims(op, 'dimno', [attrs['dimno']], x.dim())[0]
  starts, limits = [0] * x.dim(), list(x.shape)
  strides = [1] * x.dim()
  starts[dimno], limits[dimno] = attrs['start_index'], attrs['limit_index']
  stride = attrs.get('stride')
  strides[dimno] = 1 if stride is None else stride
  return _slice(ctx, [x], {'start_indices': starts, 'limit_indices': limits,
                           'strides': strides}, op)


def _start_indices(op, x, starts, sizes):
  # XLA clamps each start so the window stays inside the operand.
  if len(starts) != x.dim():
    raise RuntimeError(f'{op}: {len(starts)} start indices for rank {x.dim()}')
  out = []
  for d, (s, n) in enumerate(zip(starts, sizes)):
    s = _array(op, s)
    if s.dim() != 0 or not _is_int(s):
      raise RuntimeError(f'{op}: start indices must be integer scalars, got {shape_text(s)}')
    if not 0 <= n <= x.shape[d]:
      raise RuntimeError(f'{op}: size {n} of dimension {d} exceeds {shape_text(x)}')
    first = torch.clamp(s.to(torch.int64), 0, x.shape[d] - n)
    out.append(first + torch.arange(n, device=x.device))
  return out


def _dynamic_slice(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  sizes = [int(n) for n in attrs['slice_sizes']]
  if len(sizes) != x.dim():
    raise RuntimeError(f'{op}: {len(sizes)} slice sizes for rank {x.dim()}')
  for d, idx in enumerate(_start_indices(op, x, ops[1:], sizes)):
    x = x.index_select(d, idx)
  return x


def _dynamic_update_slice(ctx, ops, attrs, op):
  x, update = _array(op, ops[0]), _array(op, ops[1])
  _same_type(op, x, update)
  if update.dim() != x.dim():
    raise RuntimeError(f'{op}: update {shape_text(update)} and operand {shape_text(x)} '
                       'ranks differ')
  idxs = _start_indices(op, x, ops[2:], list(update.shape))
  rank = x.dim()
  grid = tuple(i.reshape([-1 if k == d else 1 for k in range(rank)]) for d, i in enumerate(idxs))
  return torch.index_put(x, grid, update) if rank else update.clone()


def _pad(ctx, ops, attrs, op):
  x, value = _array(op, ops[0]), _array(op, ops[1])
  _same_type(op, x, value)
  if value.dim() != 0:
    raise RuntimeError(f'{op}: the padding value must be a scalar, got {shape_text(value)}')
  config = [tuple(int(v) for v in c) for c in attrs['config']]
  if len(config) != x.dim() or any(len(c) != 3 for c in config):
    raise RuntimeError(f'{op}: config needs one (low, high, interior) per dimension of '
                       f'{shape_text(x)}')
  for d, (lo, hi, interior) in enumerate(config):
    n = x.shape[d]
    grown = n + max(n - 1, 0) * interior
    if interior < 0 or lo + hi + grown < 0 or lo + grown < 0 or hi + grown < 0:
      raise RuntimeError(f'{op}: invalid padding ({lo}, {hi}, {interior}) of dimension {d} '
                         f'of {shape_text(x)}')
    if interior and n > 1:
      spread = x.unsqueeze(d + 1)
      fill = list(spread.shape)
      fill[d + 1] = interior
      spread = torch.cat([spread, value.expand(fill)], d + 1)
      merged = list(x.shape)
      merged[d] = n * (1 + interior)
      x = spread.reshape(merged).narrow(d, 0, grown)
    if lo < 0:
      x = x.narrow(d, -lo, x.shape[d] + lo)
    if hi < 0:
      x = x.narrow(d, 0, x.shape[d] + hi)
    parts = []
    for edge in (lo, None, hi):
      if edge is None:
        parts.append(x)
      elif edge > 0:
        shape = list(x.shape)
        shape[d] = edge
        parts.append(value.expand(shape))
    if len(parts) > 1:
      x = torch.cat(parts, d)
  return x


def _rev(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  dims = _dims(op, 'dimensions', attrs['dimensions'], x.dim())
  return torch.flip(x, dims) if dims else x


def _concat(ctx, ops, attrs, op):
  xs = [_array(op, v) for v in ops]
  if not xs:
    raise RuntimeError(f'{op}: needs at least one operand')
  _same_type(op, *xs)
  dim = _dims(op, 'dimension', [attrs['dimension']], xs[0].dim())[0]
  for x in xs[1:]:
    if x.dim() != xs[0].dim() or any(
        x.shape[k] != xs[0].shape[k] for k in range(x.dim()) if k != dim):
      raise RuntimeError(f'{op}: cannot concatenate {shape_text(xs[0])} and {shape_text(x)} '
                         f'in dimension {dim}')
  return torch.cat(xs, dim)


# ------------------------------------------------------------ data sources
def _constant(ctx, ops, attrs, op):
  value = attrs['value']
  if not isinstance(value, torch.Tensor):
    raise RuntimeError(f'{op}: value must be a torch.Tensor, got {type(value).__name__}')
  if value.dtype not in XLA_TYPE_NAMES:
    raise RuntimeError(f'{op}: element type {value.dtype} has no XLA type')
  if ctx.meta:
    return torch.empty(value.shape, dtype=value.dtype, device='meta')
  return value.detach().to(ctx.device)


def _iota(ctx, ops, attrs, op):
  shape = attrs['shape']
  if isinstance(shape, (list, tuple)):
    raise RuntimeError(f'{op}: needs an array shape, got a tuple shape')
  dtype = to_torch_dtype(op, shape['type'])
  sizes = [int(s) for s in shape['sizes']]
  dim = _dims(op, 'iota_dimension', [attrs['iota_dimension']], len(sizes))[0]
  view = [1] * len(sizes)
  view[dim] = sizes[dim]
  return torch.arange(sizes[dim], device=ctx.device).to(dtype).reshape(view).expand(sizes)


def _get_dimension_size(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  d = _dims(op, 'dimension', [attrs['dimension']], x.dim())[0]
  return torch.full((), x.shape[d], dtype=torch.int32, device=ctx.device)


# ------------------------------------------------------------------ tuples
def _tuple(ctx, ops, attrs, op):
  return tuple(ops)


def _get_tuple_element(ctx, ops, attrs, op):
  t = ops[0]
  if not isinstance(t, tuple):
    raise RuntimeError(f'{op}: operand {shape_text(t)} is not a tuple')
  index = int(attrs['index'])
  if not 0 <= index < len(t):
    raise RuntimeError(f'{op}: index {index} out of range for a tuple of {len(t)}')
  return t[index]


# ------------------------------------------------------------ computations
def _call(ctx, ops, attrs, op):
  return ctx.call(attrs['computation'], ops)


def _select_tree(pred, t, f):
  if isinstance(t, tuple):
    return tuple(_select_tree(pred, a, b) for a, b in zip(t, f))
  return torch.where(pred, t, f)


def _conditional(ctx, ops, attrs, op):
  pred, t_in, f_in = ops
  pred = _array(op, pred)
  if pred.dtype != torch.bool or pred.dim() != 0:
    raise RuntimeError(f'{op}: the predicate must be a pred scalar, got {shape_text(pred)}')
  t = ctx.call(attrs['true_computation'], [t_in])
  f = ctx.call(attrs['false_computation'], [f_in])
  if not same_value_shape(t, f):
    raise RuntimeError(f'{op}: the branches return different shapes {shape_text(t)} and '
                       f'{shape_text(f)}')
  # Both branches are computed and one selected: the engine has no branch op.
  return t if ctx.meta else _select_tree(pred, t, f)


def _while(ctx, ops, attrs, op):
  state = ops[0]
  cond, body = attrs['condition_computation'], attrs['body_computation']
  if ctx.meta:
    c = ctx.call(cond, [state])
    if isinstance(c, tuple) or c.dtype != torch.bool or c.dim() != 0:
      raise RuntimeError(f'{op}: the condition must return a pred scalar, got {shape_text(c)}')
    nxt = ctx.call(body, [state])
    if not same_value_shape(nxt, state):
      raise RuntimeError(f'{op}: the body returns {shape_text(nxt)} for a state of '
                         f'{shape_text(state)}')
    return state
  # The engine has no loop op: the condition is read on the host each
  # iteration, and the state is materialized with it so every iteration
  # runs the same (cached) graph instead of an ever longer one.
  from torch_xla._XLAC import _xla_sync_multi
  while True:
    c = ctx.call(cond, [state])
    leaves = _leaves(state)
    _xla_sync_multi([c, *leaves], [])
    if not bool(c.item()):
      return state
    state = ctx.call(body, [state])


def _leaves(v):
  return [x for e in v for x in _leaves(e)] if isinstance(v, tuple) else [v]


# Reducers a Reduce computation may be: its root applies one of these to
# its two parameters. Each maps to (torch reduction, combine with init).
def _sum(x, dims):
  return torch.sum(x, dims, dtype=x.dtype) if x.dtype != torch.bool else torch.any(x, dims)


def _prod(x, dims):
  if x.dtype == torch.bool:
    return torch.all(x, dims)
  for d in sorted(dims, reverse=True):
    x = torch.prod(x, d, dtype=x.dtype)
  return x


def _logical(fn):

  def run(x, dims):
    if x.dtype != torch.bool:
      raise NotImplementedError('xla_builder Reduce: bitwise And/Or reductions of integers '
                                'have no engine op')
    return fn(x, dims)

  return run


_REDUCERS = {
    'Add': (_sum, torch.add),
    'Mul': (_prod, torch.mul),
    'Max': (torch.amax, torch.maximum),
    'Min': (torch.amin, torch.minimum),
    'And': (_logical(torch.all), torch.logical_and),
    'Or': (_logical(torch.any), torch.logical_or),
}


def _reduce_over(ctx, ops, attrs, op, dims):
  x, init = _array(op, ops[0]), _array(op, ops[1])
  _same_type(op, x, init)
  if init.dim() != 0:
    raise RuntimeError(f'{op}: the init value must be a scalar, got {shape_text(init)}')
  computation = attrs['computation']
  kind = computation.binary_combiner()
  if kind not in _REDUCERS:
    raise NotImplementedError(
        f'xla_builder {op}: only computations applying one of '
        f"{', '.join(_REDUCERS)} to their two parameters are supported on this engine")
  scalar = torch.empty((), dtype=x.dtype, device='meta')
  out = ctx.call(computation, [scalar, scalar]) if ctx.meta else None
  if out is not None and not same_value_shape(out, scalar):
    raise RuntimeError(f'{op}: the computation returns {shape_text(out)}, not a scalar '
                       f'{type_name(x.dtype)}')
  reduce_fn, combine = _REDUCERS[kind]
  reduced = reduce_fn(x, dims) if dims else x
  return combine(reduced, init)


def _sort(ctx, ops, attrs, op):
  xs = [_array(op, v) for v in ops]
  if not xs:
    raise RuntimeError(f'{op}: needs at least one operand')
  for x in xs[1:]:
    if tuple(x.shape) != tuple(xs[0].shape):
      raise RuntimeError(f'{op}: operands {shape_text(xs[0])} and {shape_text(x)} differ in '
                         'shape')
  dim = attrs.get('dimension')
  dim = xs[0].dim() - 1 if dim is None or dim == -1 else dim
  dim = _dims(op, 'dimension', [dim], max(xs[0].dim(), 1))[0]
  comparator = attrs['comparator']
  if ctx.meta:  # the comparator takes (lhs, rhs) scalars of each operand in turn
    scalars = [torch.empty((), dtype=x.dtype, device='meta') for x in xs for _ in (0, 1)]
    c = ctx.call(comparator, scalars)
    if isinstance(c, tuple) or c.dtype != torch.bool or c.dim() != 0:
      raise RuntimeError(f'{op}: the comparator must return a pred scalar, got {shape_text(c)}')
  order = comparator.first_pair_order()
  if order is None:
    raise NotImplementedError(
        f'xla_builder {op}: only comparators returning Lt or Gt of the first operand\'s two '
        'parameters are supported on this engine')
  if xs[0].dim() == 0:
    return xs[0] if len(xs) == 1 else tuple(xs)
  # Stable either way: XLA leaves the order of equal keys unspecified unless
  # is_stable, and the stable order is one it allows.
  keys, index = torch.sort(xs[0], stable=True, dim=dim, descending=order == 'Gt')
  if len(xs) == 1:
    return keys
  return (keys, *(torch.take_along_dim(x, index, dim) for x in xs[1:]))


def _reduce(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  return _reduce_over(ctx, ops, attrs, op, _dims(op, 'dimensions', attrs['dimensions'], x.dim()))


def _reduce_all(ctx, ops, attrs, op):
  x = _array(op, ops[0])
  return _reduce_over(ctx, ops, attrs, op, tuple(range(x.dim())))


OPS = {
    'Abs': _numeric_unary(torch.abs),
    'Neg': _numeric_unary(torch.neg),
    'Square': _numeric_unary(torch.square),
    'Not': _not,
    'Real': _real,
    'Imag': _imag,
    'Conj': _conj,
    'Add': _binary(torch.add, _ANY),
    'Sub': _binary(torch.sub, _ANY),
    'Mul': _binary(torch.mul, _ANY),
    'Div': _binary(_div, _ANY),
    'Rem': _binary(torch.fmod, _ANY),
    'Pow': _binary(torch.pow, _ANY),
    'Max': _binary(torch.maximum, _ANY),
    'Min': _binary(torch.minimum, _ANY),
    'Atan2': _binary(torch.atan2, _FLOAT),
    'And': _binary(torch.bitwise_and, _BITS),
    'Or': _binary(torch.bitwise_or, _BITS),
    'Xor': _binary(torch.bitwise_xor, _BITS),
    'ShiftLeft': _binary(torch.bitwise_left_shift, _INT),
    # Arithmetic for signed, logical for unsigned types, as XLA's operator>>.
    'ShiftRight': _binary(torch.bitwise_right_shift, _INT),
    'Eq': _binary(torch.eq, _ANY),
    'Ne': _binary(torch.ne, _ANY),
    'Ge': _binary(torch.ge, _ANY),
    'Gt': _binary(torch.gt, _ANY),
    'Le': _binary(torch.le, _ANY),
    'Lt': _binary(torch.lt, _ANY),
    'Select': _select,
    'Clamp': _clamp,
    'Convert': _convert,
    'BitcastConvert': _bitcast,
    'Dot': _dot,
    'TriangularSolve': _triangular_solve,
    'Reshape': _reshape,
    # Shapes are static here, so a dynamic reshape is a reshape.
    'DynamicReshape': _reshape,
    'Transpose': _transpose,
    'Broadcast': _broadcast,
    'BroadcastInDim': _broadcast_in_dim,
    'Slice': _slice,
    'SliceInDim': _slice_in_dim,
    'DynamicSlice': _dynamic_slice,
    'DynamicUpdateSlice': _dynamic_update_slice,
    'Pad': _pad,
    'Rev': _rev,
    'ConcatInDim': _concat,
    'Constant': _constant,
    'Iota': _iota,
    'GetDimensionSize': _get_dimension_size,
    'Tuple': _tuple,
    'GetTupleElement': _get_tuple_element,
    'Call': _call,
    'Conditional': _conditional,
    'While': _while,
    'Reduce': _reduce,
    'Sort': _sort,
    'ReduceAll': _reduce_all,
}
for _name, _fn in {
    'Acos': torch.acos, 'Asin': torch.asin, 'Atan': torch.atan, 'Ceil': torch.ceil,
    'Cos': torch.cos, 'Cosh': torch.cosh, 'Erf': torch.erf, 'Erfc': torch.erfc,
    'ErfInv': torch.erfinv, 'Exp': torch.exp, 'Expm1': torch.expm1, 'Floor': torch.floor,
    'Log': torch.log, 'Log1p': torch.log1p, 'Sqrt': torch.sqrt, 'Rsqrt': torch.rsqrt,
    'Sin': torch.sin, 'Sinh': torch.sinh, 'Tan': torch.tan, 'Tanh': torch.tanh,
}.items():
  OPS[_name] = _float_unary(_fn)


def apply(ctx, name, operands, attrs):
  """The value of op `name` on operand values. An op outside OPS raises
  NotImplementedError (UNSUPPORTED) or RuntimeError (not an XLA op name, as
  PyTorch/XLA's builder says); while building (meta), a failure of the
  torch operation itself is a RuntimeError naming the op."""
  if name in UNSUPPORTED:
    raise NotImplementedError(f'xla_builder op {name} is not supported on this engine: '
                              f'{UNSUPPORTED[name]}')
  fn = OPS.get(name)
  if fn is None:
    raise RuntimeError(f'Unknown XLA op name: {name}')
  if not ctx.meta:
    return fn(ctx, operands, attrs, name)
  try:
    return fn(ctx, operands, attrs, name)
  except NotImplementedError:
    raise
  except Exception as e:  # torch's own check on meta tensors, or a bad attribute
    msg = str(e)
    raise RuntimeError(msg if msg.startswith(name) else f'{name}: {msg}') from e
