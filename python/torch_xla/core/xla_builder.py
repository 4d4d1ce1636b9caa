"""torch_xla.core.xla_builder (xb): PyTorch/XLA's builder of raw XLA
computations (xb.Op, xb.create_computation, ...).

This engine compiles its own IR, not XLA HLO, so computations cannot be
built op by op here: the module exists so that code importing it loads,
its element types and type maps are PyTorch/XLA's, and every builder
entry point raises NotImplementedError saying so.
"""
import torch

_UNSUPPORTED = ('building XLA computations op by op (torch_xla.core.xla_builder) is not '
                'supported: this engine compiles its own IR, not XLA HLO; express the '
                'computation with torch operations on xla tensors instead')


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


_XLA_PT_TYPE_MAP = {
    Type.F32: torch.float32,
    Type.F64: torch.float64,
    Type.BF16: torch.bfloat16,
    Type.F16: torch.float16,
    Type.U8: torch.uint8,
    Type.S8: torch.int8,
    Type.U16: torch.uint16,
    Type.S16: torch.int16,
    Type.U32: torch.uint32,
    Type.S32: torch.int32,
    Type.U64: torch.uint64,
    Type.S64: torch.int64,
    Type.C64: torch.complex64,
    Type.C128: torch.complex128,
    Type.PRED: torch.bool,
}
_PT_XLA_TYPE_MAP = {v: k for k, v in _XLA_PT_TYPE_MAP.items()}


class Shape(object):
  """An XLA shape: element type and sizes."""

  def __init__(self, shape):
    self._shape = shape

  @classmethod
  def create(cls, dtype, sizes, dynamic_dimensions=None):
    shape = {'type': str(dtype), 'sizes': tuple(sizes)}
    if dynamic_dimensions is not None:
      shape['dynamic_dimensions'] = tuple(dynamic_dimensions)
    return Shape(shape)

  def shape(self):
    return self._shape

  def as_scalar(self):
    return Shape({'type': self._shape['type'], 'sizes': ()})

  @property
  def rank(self):
    return len(self._shape['sizes'])

  @property
  def sizes(self):
    return self._shape['sizes']

  @property
  def dtype(self):
    return self._shape['type']


class Op(object):
  """An operation of an XLA computation under construction. Only the type
  conversions work here (see the module docstring)."""

  def __init__(self, op):
    raise NotImplementedError(_UNSUPPORTED)

  @classmethod
  def to_torch_type(cls, dtype):
    """The torch dtype of an XLA type name (float32 when dtype is None)."""
    return _XLA_PT_TYPE_MAP[dtype] if dtype else torch.float32

  @classmethod
  def from_torch_type(cls, dtype):
    """The XLA type name of a torch dtype."""
    return _PT_XLA_TYPE_MAP[dtype]

  def __getattr__(self, name):
    raise NotImplementedError(_UNSUPPORTED)


def mkshape(dtype, sizes, dynamic_dimensions=None):
  return Shape.create(dtype, sizes, dynamic_dimensions=dynamic_dimensions)


def tensor_shape(tensor, device=''):
  """Shape of a tensor (or list/tuple of tensors) as XLA sees it."""
  if isinstance(tensor, (list, tuple)):
    return [tensor_shape(t, device=device) for t in tensor]
  return mkshape(Op.from_torch_type(tensor.dtype), tuple(tensor.shape))


def _unsupported(*args, **kwargs):
  raise NotImplementedError(_UNSUPPORTED)


create_builder = _unsupported
create_computation = _unsupported
computation_from_module_proto = _unsupported
get_computation_hlo = _unsupported
call_jax = _unsupported
