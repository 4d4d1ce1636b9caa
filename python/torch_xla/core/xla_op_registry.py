"""torch_xla.core.xla_op_registry (xor): operations lowered by a Python
function that builds XLA ops (PyTorch/XLA's register()). That needs
xla_builder, which this engine does not support (see its docstring):
register() returns an Op whose call raises NotImplementedError."""
import torch_xla.core.xla_builder as xb


class Op(object):
  """A registered operation (name, lowering function)."""

  def __init__(self, name, opfn):
    self._name = name
    self._opfn = opfn
    self._opname = 'xla::_op_' + name

  def __call__(self, *args, **kwargs):
    raise NotImplementedError(f'{self._opname}: {xb._UNSUPPORTED}')


def register(name, opfn):
  """An Op named name lowered by opfn (calling it raises, see above)."""
  return Op(name, opfn)
