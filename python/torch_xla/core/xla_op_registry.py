"""torch_xla.core.xla_op_registry (xor): PyTorch operations lowered by a
Python function that builds ops with torch_xla.core.xla_builder.

register(name, fn) gives a callable: called on xla tensors, it builds fn's
computation for the tensors' shapes and element types (once per shapes and
keyword arguments, then cached), runs it on them and returns the result
tensor, or a list of tensors when fn returns a tuple Op (as PyTorch/XLA
does). On this engine the computation is replayed as torch operations on
the inputs, recorded lazily (see xla_builder's docstring, control-flow
costs included).
"""
import pickle
import sys
import threading

import torch_xla.core.xla_builder as xb
import torch_xla.utils.utils as xu


class Op(object):
  """A PyTorch operation (name) whose computation opfn builds from xb.Ops."""

  def __init__(self, name, opfn):
    self._name = name
    self._opfn = opfn
    self._opname = 'xla::_op_' + name
    self._lock = threading.Lock()
    self._computations = dict()

  def __call__(self, *args, **kwargs):
    """Runs the operation on xla tensors args; kwargs (Python values, not
    tensors) go to opfn. Returns the result tensor, or the list of results
    of a tuple root."""
    shapes = xb.tensor_shape(args)
    key = pickle.dumps([[s.shape for s in shapes], kwargs])
    with self._lock:
      computation = self._computations.get(key, None)
      if computation is None:
        computation = xb.create_computation(self._name, self._opfn, shapes, **kwargs)
        self._computations[key] = computation
        if xu.getenv_as('XLA_OP_PRINT_COMPUTATIONS', bool, False):
          print(xb.get_computation_hlo(computation), file=sys.stderr)
    result = xb.run_computation(computation, args)
    return result[0] if len(result) == 1 else result


def register(name, opfn):
  """The operation `name` computed by opfn (a function of xb.Ops and
  keyword arguments returning an xb.Op); call the result on xla tensors."""
  return Op(name, opfn)
