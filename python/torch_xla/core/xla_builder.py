"""torch_xla.core.xla_builder (xb): PyTorch/XLA's op-by-op builder of
computations (xb.Op, xb.create_computation, xb.mkparam, ...), over this
engine's lazy IR.

PyTorch/XLA builds XLA HLO with an XlaBuilder. This engine compiles its own
IR, so here an Op is a node of a small Python graph: building one checks its
operands' shapes and element types with XLA's rules (each op is run on
'meta' tensors, see torchtpu.builder_ops) and records it; a built
computation (Op.build, create_computation) runs by replaying its nodes as
torch operations on the input xla tensors, which the lazy engine records
like any other. Results are therefore exact, lazy, and compiled and cached
by the engine with the rest of the step's graph.

Control flow has no engine op, and costs differ from XLA's:
- Op.conditional / mkconditional compute BOTH branches and select the
  result with the (pred scalar) predicate: exact, since XLA computations
  have no side effects, but the work of both branches is done.
- Op.while_loop / mkwhile read the loop condition on the host: every
  iteration syncs the device (the state and the condition are materialized,
  so each iteration runs the same cached graph). Use it for short loops.

Ops the engine cannot express (general Gather/Scatter, convolutions with
dimension numbers, window reductions, Map with a user computation,
dynamic dimension sizes, Clz) raise NotImplementedError naming the op.
Reduce/ReduceAll take computations that apply Add, Mul, Max, Min, And or Or
to their two parameters; Sort a comparator returning Lt or Gt of its first
two parameters (ordering by the first operand; the sort is stable). get_computation_hlo prints the builder graph in
HLO text syntax, not what the engine compiles. Errors are PyTorch/XLA's:
a bad operand is a RuntimeError (XLA's builder status), an unknown op name
RuntimeError('Unknown XLA op name: ...').
"""
import re

import torch

from torchtpu import builder_ops as _ops


class Type:
  """XLA element type names."""
  F32 = 'f32'
  F64 = 'f64'
  BF16 = 'bf16'
  F16 = 'f16'
  U8 = 'u8'
  S8 = 's8'
  U16 = 'u16'
  S16 = 's16'
  U32 = 'u32'
  S32 = 's32'
  U64 = 'u64'
  S64 = 's64'
  C64 = 'c64'
  C128 = 'c128'
  PRED = 'pred'


_XLA_PT_TYPE_MAP = dict(_ops.XLA_TYPES)
_PT_XLA_TYPE_MAP = {v: k for k, v in _XLA_PT_TYPE_MAP.items()}


class Shape(object):
  """An XLA shape: a dict {'type', 'sizes'[, 'dynamic_dimensions']}, or a
  tuple of shapes for a tuple value."""

  def __init__(self, shape):
    self._shape = shape

  @classmethod
  def create(cls, dtype, sizes, dynamic_dimensions=None):
    shape = {'type': str(dtype), 'sizes': tuple(sizes)}
    if dynamic_dimensions is not None:
      shape['dynamic_dimensions'] = tuple(dynamic_dimensions)
    return Shape(shape)

  @property
  def shape(self):
    return self._shape

  def is_tuple(self):
    return isinstance(self._shape, (list, tuple))

  def tuple_size(self):
    assert self.is_tuple()
    return len(self._shape)

  def tuple_shape(self, index):
    assert self.is_tuple()
    return self._shape[index]

  def is_dynamic(self):
    assert not self.is_tuple()
    return 'dynamic_dimensions' in self._shape

  def as_scalar(self):
    return Shape.create(self.dtype, ())

  @property
  def rank(self):
    assert not self.is_tuple()
    return len(self._shape['sizes'])

  @property
  def sizes(self):
    assert not self.is_tuple()
    return self._shape['sizes']

  @property
  def dynamic_dimensions(self):
    assert not self.is_tuple()
    return self._shape.get('dynamic_dimensions', None)

  @property
  def dtype(self):
    assert not self.is_tuple()
    return self._shape['type']

  def __repr__(self):
    return f'Shape({self._shape!r})'


def _value_shape(value):
  # A (meta or xla) value's shape as PyTorch/XLA's dict form.
  if isinstance(value, tuple):
    return tuple(_value_shape(v) for v in value)
  return {'type': _ops.type_name(value.dtype), 'sizes': tuple(value.shape)}


def _shape_value(shape):
  # A meta value of a shape (Shape, dict, or tuple of them).
  if isinstance(shape, Shape):
    shape = shape.shape
  if isinstance(shape, (list, tuple)):
    return tuple(_shape_value(s) for s in shape)
  if shape.get('dynamic_dimensions') and any(shape['dynamic_dimensions']):
    raise NotImplementedError('xla_builder: dynamic dimensions are not supported on this '
                              'engine (static shapes only)')
  dtype = _ops.to_torch_dtype('Parameter', shape['type'])
  return torch.empty(tuple(shape['sizes']), dtype=dtype, device='meta')


class Builder(object):
  """What create_builder returns: a named computation under construction,
  holding the parameters mkparam declares."""

  def __init__(self, name):
    self.name = name
    self.params = {}

  def __repr__(self):
    return f'Builder({self.name!r})'


class _Node(object):
  """One recorded op: its XLA name, operand nodes, attributes, builder,
  and its meta value (shape and element type)."""
  __slots__ = ('name', 'operands', 'attrs', 'builder', 'value')

  def __init__(self, name, operands, attrs, builder, value):
    self.name = name
    self.operands = operands
    self.attrs = attrs
    self.builder = builder
    self.value = value


class Computation(object):
  """A built computation: its parameters (in parameter order) and root.
  Runs by evaluating its nodes in order on the given values."""

  def __init__(self, name, root, params):
    self.name = name
    self.root = root
    self.params = params
    self.order = _post_order(root)

  def evaluate(self, ctx, args):
    if len(args) != len(self.params):
      raise RuntimeError(f'{self.name}: takes {len(self.params)} parameters, got {len(args)}')
    for i, (p, a) in enumerate(zip(self.params, args)):
      if not _ops.same_value_shape(p.value, a):
        raise RuntimeError(f'{self.name}: parameter {i} is {_ops.shape_text(p.value)}, got '
                           f'{_ops.shape_text(a)}')
    if ctx.meta:
      return self.root.value
    values = {}
    for node in self.order:
      if node.name == 'Parameter':
        v = args[node.attrs['param_no']]
      else:
        v = _ops.apply(ctx, node.name, [values[id(o)] for o in node.operands], node.attrs)
      values[id(node)] = v
    return values[id(self.root)]

  def binary_combiner(self):
    """The op name when the root applies a binary op to exactly this
    computation's two parameters (a reducer such as add), else None."""
    root = self.root
    if len(self.params) != 2 or len(root.operands) != 2:
      return None
    ids = {id(p) for p in self.params}
    if {id(o) for o in root.operands} != ids:
      return None
    return root.name

  def first_pair_order(self):
    """'Lt' or 'Gt' when the root compares this computation's first two
    parameters (a sort comparator ordering by the first operand), in
    that order; None otherwise."""
    root = self.root
    if root.name not in ('Lt', 'Gt') or len(self.params) < 2 or len(root.operands) != 2:
      return None
    first, second = self.params[0], self.params[1]
    if root.operands[0] is first and root.operands[1] is second:
      return root.name
    if root.operands[0] is second and root.operands[1] is first:
      return 'Gt' if root.name == 'Lt' else 'Lt'
    return None

  def program_shape(self):
    return ([Shape(_value_shape(p.value)) for p in self.params],
            Shape(_value_shape(self.root.value)))

  def __repr__(self):
    return f'Computation({self.name!r})'


def _post_order(root):
  # Iterative: a long chain of ops must not hit Python's recursion limit.
  order, seen, stack = [], set(), [(root, False)]
  while stack:
    node, expanded = stack.pop()
    if expanded:
      order.append(node)
      continue
    if id(node) in seen:
      continue
    seen.add(id(node))
    stack.append((node, True))
    for o in reversed(node.operands):
      if id(o) not in seen:
        stack.append((o, False))
  return order


def _node_of(x):
  if isinstance(x, Op):
    return x.op
  if isinstance(x, _Node):
    return x
  raise TypeError(f'expected an xla_builder Op, got {type(x).__name__}')


class Op(object):
  """An operation of a computation under construction (PyTorch/XLA's
  xb.Op), wrapping one recorded node of this engine's builder graph.
  Methods and operators build new Ops with XLA's semantics."""

  def __init__(self, op):
    self.op = op

  def shape(self):
    return Shape(_value_shape(self.op.value))

  def builder(self):
    return self.op.builder

  def build(self, name):
    return _build(name, self.op)

  def __add__(self, rhs):
    return mkop('Add', (self.op, rhs.op))

  def __sub__(self, rhs):
    return mkop('Sub', (self.op, rhs.op))

  def __mul__(self, rhs):
    return mkop('Mul', (self.op, rhs.op))

  def __matmul__(self, rhs):
    return mkop('Dot', (self.op, rhs.op))

  def __truediv__(self, rhs):
    return mkop('Div', (self.op, rhs.op))

  def __pow__(self, rhs):
    return mkop('Pow', (self.op, rhs.op))

  def __mod__(self, rhs):
    return mkop('Rem', (self.op, rhs.op))

  def __neg__(self):
    return mkop('Neg', (self.op,))

  def __not__(self):
    return mkop('Not', (self.op,))

  def __and__(self, rhs):
    return mkop('And', (self.op, rhs.op))

  def __or__(self, rhs):
    return mkop('Or', (self.op, rhs.op))

  def __xor__(self, rhs):
    return mkop('Xor', (self.op, rhs.op))

  def __eq__(self, rhs):
    return mkop('Eq', (self.op, rhs.op))

  def __ne__(self, rhs):
    return mkop('Ne', (self.op, rhs.op))

  def __le__(self, rhs):
    return mkop('Le', (self.op, rhs.op))

  def __lt__(self, rhs):
    return mkop('Lt', (self.op, rhs.op))

  def __ge__(self, rhs):
    return mkop('Ge', (self.op, rhs.op))

  def __gt__(self, rhs):
    return mkop('Gt', (self.op, rhs.op))

  def __lshift__(self, rhs):
    return mkop('ShiftLeft', (self.op, rhs.op))

  def __rshift__(self, rhs):
    return mkop('ShiftRight', (self.op, rhs.op))

  __hash__ = None  # == builds an Eq op, as in PyTorch/XLA

  def reshape(self, sizes, dimensions=None, inferred_dimension=None):
    return mkop('Reshape', (self.op,), sizes=sizes, dimensions=dimensions,
                inferred_dimension=inferred_dimension)

  def dynamic_reshape(self, sizes):
    return mkop('DynamicReshape', (self.op,), sizes=sizes)

  def broadcast(self, sizes):
    return mkop('Broadcast', (self.op,), sizes=sizes)

  def broadcast_in_dim(self, sizes, dimensions):
    return mkop('BroadcastInDim', (self.op,), sizes=sizes, dimensions=dimensions)

  def slice(self, start_indices, limit_indices, strides=None):
    if strides is None:
      strides = [1] * len(start_indices)
    return mkop('Slice', (self.op,), start_indices=start_indices,
                limit_indices=limit_indices, strides=strides)

  def slice_in_dim(self, start_index, limit_index, dimno, stride=1):
    return mkop('SliceInDim', (self.op,), start_index=start_index, limit_index=limit_index,
                dimno=dimno, stride=stride)

  def dynamic_slice(self, start_indices, slice_sizes):
    return mkop('DynamicSlice', (self.op,), start_indices=[x.op for x in start_indices],
                slice_sizes=slice_sizes)

  def dynamic_update_slice(self, update, start_indices):
    return mkop('DynamicUpdateSlice', (self.op, update.op),
                start_indices=[x.op for x in start_indices])

  def gather(self, start_indices, offset_dims, collapsed_slice_dims, start_index_map,
             index_vector_dim, indices_are_sorted=None):
    return mkop('Gather', (self.op, start_indices.op), offset_dims=offset_dims,
                collapsed_slice_dims=collapsed_slice_dims, start_index_map=start_index_map,
                index_vector_dim=index_vector_dim, indices_are_sorted=indices_are_sorted)

  def scatter(self, scatter_indices, updates, computation, update_window_dims,
              inserted_window_dims, scatter_dims_to_operand_dims, index_vector_dim,
              indices_are_sorted=None, unique_indices=None):
    return mkop('Scatter', (self.op, scatter_indices.op, updates.op), computation=computation,
                update_window_dims=update_window_dims,
                inserted_window_dims=inserted_window_dims,
                scatter_dims_to_operand_dims=scatter_dims_to_operand_dims,
                index_vector_dim=index_vector_dim, indices_are_sorted=indices_are_sorted,
                unique_indices=unique_indices)

  def conv(self, kernel, window_strides, feature_group_count=1, batch_group_count=1,
           padding='valid', precision_config=None):
    return mkop('Conv', (self.op, kernel.op), window_strides=window_strides,
                feature_group_count=feature_group_count, batch_group_count=batch_group_count,
                padding=padding, precision_config=precision_config)

  def conv_with_general_padding(self, kernel, window_strides, padding, feature_group_count=1,
                                batch_group_count=1, precision_config=None):
    return mkop('ConvWithGeneralPadding', (self.op, kernel.op), window_strides=window_strides,
                padding=padding, feature_group_count=feature_group_count,
                batch_group_count=batch_group_count, precision_config=precision_config)

  def conv_with_general_dimensions(self, kernel, window_strides, input_batch_dimension,
                                   input_feature_dimension, kernel_input_feature_dimension,
                                   kernel_output_feature_dimension, output_batch_dimension,
                                   output_feature_dimension, input_spatial_dimensions,
                                   kernel_spatial_dimensions, output_spatial_dimensions,
                                   padding='valid', feature_group_count=1,
                                   batch_group_count=1, precision_config=None):
    return mkop('ConvWithGeneralDimensions', (self.op, kernel.op))

  def conv_general(self, kernel, window_strides, padding, input_batch_dimension,
                   input_feature_dimension, kernel_input_feature_dimension,
                   kernel_output_feature_dimension, output_batch_dimension,
                   output_feature_dimension, input_spatial_dimensions,
                   kernel_spatial_dimensions, output_spatial_dimensions,
                   feature_group_count=1, batch_group_count=1, precision_config=None):
    return mkop('ConvGeneral', (self.op, kernel.op))

  def conv_general_dilated(self, kernel, window_strides, padding, lhs_dilation, rhs_dilation,
                           input_batch_dimension, input_feature_dimension,
                           kernel_input_feature_dimension, kernel_output_feature_dimension,
                           output_batch_dimension, output_feature_dimension,
                           input_spatial_dimensions, kernel_spatial_dimensions,
                           output_spatial_dimensions, feature_group_count=1,
                           batch_group_count=1, precision_config=None):
    return mkop('ConvGeneralDilated', (self.op, kernel.op))

  def cast(self, to_type):
    return mkop('Convert', (self.op,), to_type=to_type)

  def bitcast(self, to_type):
    return mkop('BitcastConvert', (self.op,), to_type=to_type)

  def pad(self, value, config):
    return mkop('Pad', (self.op, value.op), config=config)

  def select_and_scatter(self, source, init_value, window_dimensions, window_strides,
                         select_computation, scatter_computation, padding='valid'):
    return mkop('SelectAndScatter', (self.op, source.op, init_value.op))

  def select_and_scatter_with_general_padding(self, source, init_value, window_dimensions,
                                              window_strides, select_computation,
                                              scatter_computation, padding):
    return mkop('SelectAndScatterWithGeneralPadding', (self.op, source.op, init_value.op))

  def max_pool(self, kernel_size, stride, batch_dimension, feature_dimension,
               spatial_dimensions, padding='valid'):
    return mkop('MaxPool', (self.op,))

  def reduce(self, init_value, computation, dimensions):
    scalar_shape = self.shape().as_scalar()
    computation = Op.make_computation('Reduce', computation, (scalar_shape, scalar_shape))
    return mkop('Reduce', (self.op, init_value.op), computation=computation,
                dimensions=dimensions)

  def reduce_all(self, init_value, computation):
    scalar_shape = self.shape().as_scalar()
    computation = Op.make_computation('ReduceAll', computation, (scalar_shape, scalar_shape))
    return mkop('ReduceAll', (self.op, init_value.op), computation=computation)

  def reduce_window(self, init_value, computation, window_dimensions, window_strides,
                    padding='valid'):
    return mkop('ReduceWindow', (self.op, init_value.op))

  def select(self, true_value, false_value):
    return mkop('Select', (self.op, true_value.op, false_value.op))

  def transpose(self, permutation):
    return mkop('Transpose', (self.op,), permutation=permutation)

  # PyTorch/XLA's method name, misspelling included.
  def triangualr_solve(self, b, left_side=None, lower=None, unit_diagonal=None,
                       transpose_a=None):
    return mkop('TriangularSolve', (self.op, b.op), left_side=left_side, lower=lower,
                unit_diagonal=unit_diagonal, transpose_a=transpose_a)

  def clamp(self, min_value, max_value):
    return mkop('Clamp', (self.op, min_value.op, max_value.op))

  def get_tuple_element(self, index):
    return mkop('GetTupleElement', (self.op,), index=index)

  def conditional(self, true_operand, false_operand, true_computation, false_computation):
    true_computation = Op.make_computation('CondTrue', true_computation, (true_operand,))
    false_computation = Op.make_computation('CondFalse', false_computation, (false_operand,))
    return mkop('Conditional', (self.op, true_operand.op, false_operand.op),
                true_computation=true_computation, false_computation=false_computation)

  @classmethod
  def wrap_function(cls, fn):
    """fn taking the elements of a tuple parameter as separate Ops, and
    returning a tuple Op for a returned list or tuple of Ops."""

    def wrapper(*args, **kwargs):
      if len(args) == 1 and args[0].shape().is_tuple():
        args = [args[0].get_tuple_element(i) for i in range(args[0].shape().tuple_size())]
      result = fn(*args, **kwargs)
      return Op.tuple(result) if isinstance(result, (tuple, list)) else result

    return wrapper

  @classmethod
  def make_computation(cls, name, computation, args_or_shapes, **kwargs):
    if not callable(computation):
      return computation
    shapes = [a if isinstance(a, Shape) else a.shape() for a in args_or_shapes]
    return create_computation(name, Op.wrap_function(computation), shapes, **kwargs)

  def mkconditional(self, ops, true_fn, false_fn, **kwargs):
    operands = Op.tuple(ops)
    return self.conditional(operands, operands, true_fn, false_fn)

  def while_loop(self, condition_computation, body_computation):
    condition_computation = Op.make_computation('Condition', condition_computation, (self,))
    body_computation = Op.make_computation('Body', body_computation, (self,))
    return mkop('While', (self.op,), condition_computation=condition_computation,
                body_computation=body_computation)

  @classmethod
  def mkwhile(cls, ops, condition_fn, body_fn, **kwargs):
    return Op.tuple(ops).while_loop(condition_computation=condition_fn,
                                    body_computation=body_fn)

  def get_dimension_size(self, dimension):
    return mkop('GetDimensionSize', (self.op,), dimension=dimension)

  def set_dimension_size(self, size, dimension):
    return mkop('SetDimensionSize', (self.op, size.op), dimension=dimension)

  def rev(self, dimensions):
    return mkop('Rev', (self.op,), dimensions=dimensions)

  def acos(self):
    return mkop('Acos', (self.op,))

  def asin(self):
    return mkop('Asin', (self.op,))

  def atan(self):
    return mkop('Atan', (self.op,))

  def ceil(self):
    return mkop('Ceil', (self.op,))

  def cos(self):
    return mkop('Cos', (self.op,))

  def cosh(self):
    return mkop('Cosh', (self.op,))

  def erf(self):
    return mkop('Erf', (self.op,))

  def erfc(self):
    return mkop('Erfc', (self.op,))

  # PyTorch/XLA's method name for ErfInv.
  def erfinf(self):
    return mkop('ErfInv', (self.op,))

  def exp(self):
    return mkop('Exp', (self.op,))

  def expm1(self):
    return mkop('Expm1', (self.op,))

  def floor(self):
    return mkop('Floor', (self.op,))

  def log(self):
    return mkop('Log', (self.op,))

  def log1p(self):
    return mkop('Log1p', (self.op,))

  def sqrt(self):
    return mkop('Sqrt', (self.op,))

  def real(self):
    return mkop('Real', (self.op,))

  def imag(self):
    return mkop('Imag', (self.op,))

  def clz(self):
    return mkop('Clz', (self.op,))

  def conj(self):
    return mkop('Conj', (self.op,))

  def rsqrt(self):
    return mkop('Rsqrt', (self.op,))

  def sin(self):
    return mkop('Sin', (self.op,))

  def sinh(self):
    return mkop('Sinh', (self.op,))

  def tan(self):
    return mkop('Tan', (self.op,))

  def tanh(self):
    return mkop('Tanh', (self.op,))

  def atan2(self, other):
    return mkop('Atan2', (self.op, other.op))

  def max(self, other):
    return mkop('Max', (self.op, other.op))

  def min(self, other):
    return mkop('Min', (self.op, other.op))

  def scalar_like(self, value):
    shape = self.shape()
    return Op.scalar(self.builder(), value, dtype=shape.dtype).broadcast(shape.sizes)

  def zeros_like(self):
    return self.scalar_like(0)

  def ones_like(self):
    return self.scalar_like(1)

  @classmethod
  def _extract_xla_ops(cls, ops):
    return [x.op for x in ops]

  @classmethod
  def tuple(cls, ops, builder=None):
    return mkop('Tuple', Op._extract_xla_ops(ops), builder=builder)

  @classmethod
  def concat_in_dim(cls, ops, dimension, builder=None):
    return mkop('ConcatInDim', Op._extract_xla_ops(ops), builder=builder, dimension=dimension)

  @classmethod
  def call(cls, computation, ops, builder=None):
    computation = Op.make_computation('Call', computation, ops)
    return mkop('Call', Op._extract_xla_ops(ops), computation=computation, builder=builder)

  @classmethod
  def constant(cls, builder, value):
    return mkleaf('Constant', builder, value=value)

  @classmethod
  def scalar(cls, builder, value, dtype=None):
    return mkleaf('Constant', builder, value=torch.tensor(value, dtype=cls.to_torch_type(dtype)))

  @classmethod
  def zero(cls, builder, dtype=None):
    return cls.scalar(builder, 0, dtype=dtype)

  @classmethod
  def one(cls, builder, dtype=None):
    return cls.scalar(builder, 1, dtype=dtype)

  @classmethod
  def iota(cls, builder, shape, iota_dimension):
    return mkleaf('Iota', builder, shape=shape.shape, iota_dimension=iota_dimension)

  @classmethod
  def sort(cls, ops, comparator, dimension=None, is_stable=None):
    # A callable comparator is built here over (lhs, rhs) scalars of each
    # operand in turn; PyTorch/XLA takes a built computation only.
    if callable(comparator) and not isinstance(comparator, Computation):
      shapes = [o.shape().as_scalar() for o in ops for _ in (0, 1)]
      comparator = create_computation('Comparator', comparator, shapes)
    return mkop('Sort', Op._extract_xla_ops(ops), comparator=comparator, dimension=dimension,
                is_stable=is_stable)

  @classmethod
  def map(cls, ops, computation, dimensions, static_operands=(), builder=None):
    return mkop('Map', Op._extract_xla_ops(ops), builder=builder)

  @classmethod
  def to_torch_type(cls, dtype):
    """The torch dtype of an XLA type name (float32 when dtype is None)."""
    return _XLA_PT_TYPE_MAP[dtype] if dtype else torch.float32

  @classmethod
  def from_torch_type(cls, dtype):
    """The XLA type name of a torch dtype."""
    return _PT_XLA_TYPE_MAP[dtype]


def create_builder(name):
  return Builder(name)


def mkshape(dtype, sizes, dynamic_dimensions=None):
  return Shape.create(dtype, sizes, dynamic_dimensions=dynamic_dimensions)


# Ops whose 'start_indices' attribute holds operands (PyTorch/XLA passes
# them beside the op's array operands).
_INDEX_OPERANDS = ('DynamicSlice', 'DynamicUpdateSlice')


def mkop(name, ops, **kwargs):
  """Records op `name` (an XLA op name) on operands ops (Op.op values)."""
  builder = kwargs.pop('builder', None)
  nodes = [_node_of(o) for o in ops]
  if name in _INDEX_OPERANDS and 'start_indices' in kwargs:
    nodes += [_node_of(o) for o in kwargs.pop('start_indices')]
  if builder is None:
    assert nodes, f'{name}: an op without operands needs a builder'
    builder = nodes[0].builder
  for n in nodes:
    if n.builder is not builder:
      raise RuntimeError(f'{name}: operand {n.name} belongs to builder {n.builder.name!r}, '
                         f'not {builder.name!r}')
  value = _ops.apply(_ops.META, name, [n.value for n in nodes], kwargs)
  return Op(_Node(name, nodes, kwargs, builder, value))


def mkleaf(name, builder, **kwargs):
  """Records op `name` without operands (Constant, Iota) on builder."""
  value = _ops.apply(_ops.META, name, [], kwargs)
  return Op(_Node(name, [], kwargs, builder, value))


def mkparam(builder, param_no, shape):
  """Parameter param_no of builder's computation, of the given Shape."""
  if param_no in builder.params:
    raise RuntimeError(f'{builder.name}: parameter {param_no} already declared')
  node = _Node('Parameter', [], {'param_no': param_no}, builder, _shape_value(shape))
  builder.params[param_no] = node
  return Op(node)


def _build(name, root):
  params = root.builder.params
  if sorted(params) != list(range(len(params))):
    raise RuntimeError(f'{name}: parameter numbers {sorted(params)} are not 0..{len(params) - 1}')
  return Computation(name, root, [params[i] for i in range(len(params))])


def tensor_shape(tensor, device=''):
  """Shape of a tensor (or list/tuple of tensors) as XLA sees it."""
  if isinstance(tensor, (list, tuple)):
    return [tensor_shape(t, device=device) for t in tensor]
  return mkshape(Op.from_torch_type(tensor.dtype), tuple(tensor.shape))


def create_computation(name, fn, shapes, **kwargs):
  builder = create_builder(name)
  params = [mkparam(builder, i, shape) for i, shape in enumerate(shapes)]
  root = fn(*params, **kwargs)
  return root.build(name)


def computation_from_module_proto(name, proto):
  raise NotImplementedError('xla_builder.computation_from_module_proto: this engine compiles '
                            'its own IR and cannot load XLA HLO module protos')


def _hlo_name(op):
  return re.sub(r'(?<!^)(?=[A-Z])', '-', op).lower()


def _hlo_shape(value):
  if isinstance(value, tuple):
    return '(' + ', '.join(_hlo_shape(v) for v in value) + ')'
  return f"{_ops.type_name(value.dtype)}[{','.join(str(s) for s in value.shape)}]"


def _hlo_literal(value):
  if value.numel() > 8:
    return '{...}'
  flat = [str(v) for v in value.flatten().tolist()]
  return flat[0] if value.dim() == 0 else '{' + ', '.join(flat) + '}'


def _hlo_attr(value):
  if isinstance(value, Computation):
    return value.name
  if isinstance(value, (list, tuple)):
    return '{' + ','.join(_hlo_attr(v) for v in value) + '}'
  if isinstance(value, dict):  # a shape
    return f"{value['type']}[{','.join(str(s) for s in value['sizes'])}]"
  return str(value)


def _hlo_lines(computation, entry, done):
  # Sub-computations first, each once, as HLO text lists them.
  lines = []
  for node in computation.order:
    for v in node.attrs.values():
      if isinstance(v, Computation) and id(v) not in done:
        done.add(id(v))
        lines += _hlo_lines(v, False, done)
  names = {}
  body = []
  for i, node in enumerate(computation.order):
    names[id(node)] = f'{_hlo_name(node.name)}.{i}'
    if node.name == 'Parameter':
      args = str(node.attrs['param_no'])
    elif node.name == 'Constant':
      value = node.attrs['value']
      args = _hlo_literal(value)
    else:
      args = ', '.join(names[id(o)] for o in node.operands)
    extra = ''.join(f', {k}={_hlo_attr(v)}' for k, v in node.attrs.items()
                    if v is not None and k not in ('param_no', 'value'))
    root = 'ROOT ' if node is computation.root else ''
    body.append(f'  {root}{names[id(node)]} = {_hlo_shape(node.value)} '
                f'{_hlo_name(node.name) if node.name != "Parameter" else "parameter"}'
                f'({args}){extra}')
  head = ('ENTRY ' if entry else '') + computation.name
  return lines + [f'{head} {{'] + body + ['}', '']


def get_computation_hlo(computation):
  """The computation's builder graph in HLO text syntax (what was built,
  not what the engine compiles)."""
  return '\n'.join([f'HloModule {computation.name}', ''] +
                   _hlo_lines(computation, True, set()))


def _flatten_results(value):
  if not isinstance(value, tuple):
    return [value]
  if any(isinstance(v, tuple) for v in value):
    raise RuntimeError('xla_builder: a computation returning nested tuples cannot be turned '
                       'into tensors')
  return list(value)


def run_computation(computation, input_tensors):
  """Runs a built computation on xla tensors: the list of result tensors
  (a tuple root gives one tensor per element), recorded lazily."""
  import torch_xla
  inputs = list(input_tensors)
  for t in inputs:
    if not isinstance(t, torch.Tensor) or t.device.type != 'xla':
      what = f'{t.device.type} {t.dtype}' if isinstance(t, torch.Tensor) else type(t).__name__
      raise RuntimeError(f'Input tensor is not an XLA tensor: {what}')
  device = inputs[0].device if inputs else torch_xla.device()
  with torch.no_grad():
    results = _flatten_results(computation.evaluate(_ops.EvalContext(device), inputs))
    # Results are new tensors, as PyTorch/XLA's are: never an input, a view
    # of one, or the same tensor twice.
    out, seen = [], {id(t) for t in inputs}
    for r in results:
      if id(r) in seen or r._base is not None:
        r = r.clone()
      seen.add(id(r))
      out.append(r)
  return out


def xla_computation_as_func(computation, name=None):
  """A callable taking a list of xla tensors and returning the list of the
  computation's results."""

  def fn(input_tensors):
    return run_computation(computation, input_tensors)

  return fn


def call_jax(jax_func, args, kwargs=None, name=None, override_hash=None):
  try:
    import jax  # noqa: F401
  except ImportError as e:
    raise ImportError('JAX import guard fail due to PJRT client is unavailable.') from e
  raise NotImplementedError('xla_builder.call_jax: this engine compiles its own IR and cannot '
                            'run the XLA HLO that JAX lowers to')


class FlattenedInputFunc:
  """A Python function called with flat lists of tensors: preprocess picks
  the tensors out of (args, kwargs) and remembers the rest, flat_call runs
  the function on a tensor list put back in place, postprocess rebuilds the
  output structure from a flat list."""

  def __init__(self, orig_func):
    self.orig_func = orig_func
    self.non_tensors = None
    self.in_spec = None
    self.out_spec = None
    self._sentinel = object()  # marks where a tensor goes

  def preprocess(self, args, kwargs=None):
    flat, self.in_spec = self.flatten((args, kwargs or {}))
    self.non_tensors = tuple(self._sentinel if isinstance(a, torch.Tensor) else a for a in flat)
    return tuple(a for a in flat if isinstance(a, torch.Tensor))

  def flat_call(self, flat_input):
    assert self.in_spec is not None, 'flat call only makes sense after preprocess is called'
    tensors = iter(flat_input)
    flat = [next(tensors) if a is self._sentinel else a for a in self.non_tensors]
    args, kwargs = self.unflatten(flat, self.in_spec)
    out, self.out_spec = self.flatten(self.orig_func(*args, **kwargs))
    return out

  def postprocess(self, res_flattened):
    assert self.out_spec is not None, 'post process only makes sense after flat_call is called'
    return self.unflatten(res_flattened, self.out_spec)

  def flatten(self, inputs):
    from torch.utils import _pytree as pytree
    return pytree.tree_flatten(inputs)

  def unflatten(self, flattened, spec):
    from torch.utils import _pytree as pytree
    return pytree.tree_unflatten(flattened, spec)


class CompiledCallableWithCache:
  """A callable specialized (specialize, in a subclass) once per input
  shapes, element types and non-tensor arguments."""

  def __init__(self, flat_input_func):
    self._cache = {}
    self._flat_input_func = flat_input_func

  def __call__(self, *args, **kwargs):
    flat = self._flat_input_func.preprocess(args, kwargs)
    key = (tuple(None if a is None else (tuple(a.shape), a.dtype) for a in flat),
           tuple(self._flat_input_func.non_tensors), self._flat_input_func.in_spec)
    if key not in self._cache:
      self._cache[key] = self.specialize(flat)
    return self._flat_input_func.postprocess(self._cache[key](flat))

  def specialize(self, sample_flat_args):
    raise NotImplementedError


class XlaCallable(CompiledCallableWithCache):
  """A function of xb.Ops (any argument structure, tensors in place of Ops)
  callable on xla tensors: built once per input shapes."""

  def __init__(self, xla_func):
    super().__init__(FlattenedInputFunc(xla_func))

  def specialize(self, sample_flat_args):
    name = 'xla::computation'
    builder = create_builder(name)
    params = [
        mkparam(builder, i, mkshape(Op.from_torch_type(a.dtype), a.shape))
        for i, a in enumerate(sample_flat_args)
    ]
    computation = Op.tuple(self._flat_input_func.flat_call(params)).build(name)
    return xla_computation_as_func(computation, name)
