"""torch_xla.utils.utils: PyTorch/XLA's small helpers (environment flags,
nested-structure walks, synthetic data generators, timing), with the same
names, signatures and behaviour as PyTorch/XLA 2.9."""
from concurrent import futures
import contextlib
import copy
import os
import shutil
import socket
import sys
import tempfile
import time


class Cleaner(object):
  """Calls func() when the object is garbage collected."""

  def __init__(self, func):
    self.func = func

  def __del__(self):
    self.func()


class LazyProperty(object):
  """A value computed by gen_fn() on the first read of .value, then kept."""

  def __init__(self, gen_fn):
    self._gen_fn = gen_fn

  @property
  def value(self):
    if self._gen_fn is not None:
      self._value = self._gen_fn()
      self._gen_fn = None
    return self._value


class TmpFolder(object):
  """A fresh temporary directory (.name) removed with its contents when the
  object is collected."""

  def __init__(self):
    self.name = tempfile.mkdtemp()
    path = self.name
    self.cleaner = Cleaner(lambda: shutil.rmtree(path, ignore_errors=True))


class SampleGenerator(object):
  """Iterator which returns multiple samples of a given input data.

  Can be used in place of a PyTorch DataLoader to generate synthetic data.

  Args:
    data: The data which should be returned at each iterator step.
    sample_count: The maximum number of `data` samples to be returned.
  """

  def __init__(self, data, sample_count):
    self._data = data
    self._sample_count = sample_count
    self._count = 0

  def __iter__(self):
    return SampleGenerator(self._data, self._sample_count)

  def __len__(self):
    return self._sample_count

  def __next__(self):
    return self.next()

  def next(self):
    if self._count >= self._sample_count:
      raise StopIteration
    self._count += 1
    return self._data


class FnDataGenerator(object):
  """Iterator of count (data, func(data)) pairs, data made by
  gen_tensor(batch_size, *dims)."""

  def __init__(self, func, batch_size, gen_tensor, dims=None, count=1):
    self._func = func
    self._batch_size = batch_size
    self._gen_tensor = gen_tensor
    self._dims = list(dims) if dims else [1]
    self._count = count
    self._emitted = 0

  def __len__(self):
    return self._count

  def __iter__(self):
    return FnDataGenerator(self._func, self._batch_size, self._gen_tensor,
                           dims=self._dims, count=self._count)

  def __next__(self):
    return self.next()

  def next(self):
    if self._emitted >= self._count:
      raise StopIteration
    data = self._gen_tensor(self._batch_size, *self._dims)
    self._emitted += 1
    return data, self._func(data)


class DataWrapper(object):
  """Base of user objects that hold tensors to be moved to the device:
  get_tensors() lists them, from_tensors(tensors) rebuilds the object from
  their device copies (same order)."""

  def __init__(self):
    pass

  def get_tensors(self):
    raise NotImplementedError('The method is missing an implementation')

  def from_tensors(self, tensors):
    raise NotImplementedError('The method is missing an implementation')


def as_list(t):
  """t itself when it is a list or tuple, else [t]."""
  return t if isinstance(t, (tuple, list)) else [t]


def getenv_as(name, type, defval=None):
  """The environment variable name converted with type, or defval when it is
  unset. For bool the value is read as an int ('0'/'1'), as PyTorch/XLA
  does, so 'true' raises ValueError."""
  env = os.environ.get(name)
  if env is None:
    return defval
  if type == bool:
    return bool(int(env))
  return type(env)


def _for_each_instance(value, select_fn, fn, seen):
  if id(value) in seen:
    return
  seen.add(id(value))
  if select_fn(value):
    fn(value)
  elif isinstance(value, dict):
    for k, v in value.items():
      _for_each_instance(k, select_fn, fn, seen)
      _for_each_instance(v, select_fn, fn, seen)
  elif isinstance(value, (list, tuple, set)):
    for x in value:
      _for_each_instance(x, select_fn, fn, seen)
  elif isinstance(value, DataWrapper):
    for x in value.get_tensors():
      _for_each_instance(x, select_fn, fn, seen)
  elif hasattr(value, '__dict__'):
    for v in list(value.__dict__.values()):
      _for_each_instance(v, select_fn, fn, seen)


def for_each_instance(value, select_fn, fn):
  """Calls fn(x) for every x in the nested structure value (dicts, lists,
  tuples, sets, DataWrappers, objects' attributes) with select_fn(x) true;
  each object is visited once."""
  _for_each_instance(value, select_fn, fn, set())


def _for_each_instance_rewrite(value, select_fn, fn, rwmap):
  done = rwmap.get(id(value))
  if done is not None:
    return done
  if select_fn(value):
    result = fn(value)
    rwmap[id(value)] = result
  elif isinstance(value, dict):
    result = dict()
    rwmap[id(value)] = result
    for k, v in value.items():
      # Key before value (the order fn sees them in, as for_each_instance).
      k = _for_each_instance_rewrite(k, select_fn, fn, rwmap)
      result[k] = _for_each_instance_rewrite(v, select_fn, fn, rwmap)
  elif isinstance(value, set):
    result = set()
    rwmap[id(value)] = result
    for x in value:
      result.add(_for_each_instance_rewrite(x, select_fn, fn, rwmap))
  elif isinstance(value, (list, tuple)):
    # Registered before recursing so that cycles resolve; like PyTorch/XLA,
    # tuples come back as lists.
    result = list()
    rwmap[id(value)] = result
    for x in value:
      result.append(_for_each_instance_rewrite(x, select_fn, fn, rwmap))
  elif isinstance(value, DataWrapper):
    new_tensors = [
        _for_each_instance_rewrite(x, select_fn, fn, rwmap)
        for x in value.get_tensors()
    ]
    result = value.from_tensors(new_tensors)
    rwmap[id(value)] = result
  elif hasattr(value, '__dict__'):
    result = copy.copy(value)
    rwmap[id(value)] = result
    for k in list(result.__dict__.keys()):
      result.__dict__[k] = _for_each_instance_rewrite(result.__dict__[k],
                                                      select_fn, fn, rwmap)
  else:
    result = value
    rwmap[id(value)] = result
  return result


def for_each_instance_rewrite(value, select_fn, fn):
  """A copy of the nested structure value with every x that select_fn
  accepts replaced by fn(x) (tuples become lists, objects are shallow
  copied)."""
  return _for_each_instance_rewrite(value, select_fn, fn, dict())


def shape(inputs):
  """The nesting shape of equal-length nested lists/tuples, e.g. [2, 3]."""
  cshape = []
  if isinstance(inputs, (list, tuple)):
    lshape = None
    for x in inputs:
      ishape = shape(x)
      if lshape is None:
        lshape = ishape
      else:
        assert lshape == ishape
    cshape.extend([len(inputs)] + (lshape or []))
  return cshape


def flatten_nested_tuple(inputs):
  """The leaves of nested lists/tuples, as one tuple."""
  flat = []
  if isinstance(inputs, (list, tuple)):
    for x in inputs:
      flat.extend(flatten_nested_tuple(x))
  else:
    flat.append(inputs)
  return tuple(flat)


def list_copy_append(ilist, item):
  out = list(ilist)
  out.append(item)
  return out


def null_print(*args, **kwargs):
  return


def eprint(*args, **kwargs):
  print(*args, file=sys.stderr, **kwargs)


def get_print_fn(debug=None):
  """eprint when debug (default: the DEBUG environment variable) is set,
  else null_print."""
  if debug is None:
    debug = int(os.environ.get('DEBUG', '0'))
  return eprint if debug else null_print


def timed(fn, msg='', printfn=eprint):
  """Returns fn() and prints how long it took as '<msg><ms>ms'."""
  if printfn is None:
    printfn = get_print_fn()
  start = time.time()
  result = fn()
  printfn('{}{:.3f}ms'.format(msg, 1000.0 * (time.time() - start)))
  return result


def get_free_tcp_ports(n=1):
  """n TCP ports free at the time of the call."""
  ports = []
  for _ in range(n):
    with contextlib.closing(socket.socket(socket.AF_INET,
                                          socket.SOCK_STREAM)) as s:
      s.bind(('', 0))
      ports.append(s.getsockname()[1])
  return ports


def parallel_work(num_workers, fn, *args):
  """[fn(*a) for a in zip(*args)] computed by num_workers threads; an
  exception raised by any call is re-raised."""
  with futures.ThreadPoolExecutor(max_workers=num_workers) as executor:
    return list(executor.map(fn, *args))


class TimedScope(object):
  """Context manager printing the time spent in its block as
  '<msg><ms>ms', unless set_error() was called."""

  def __init__(self, msg='', printfn=eprint):
    if printfn is None:
      printfn = get_print_fn()
    self._msg = msg
    self._printfn = printfn
    self._error = None

  def __enter__(self):
    self._start = time.time()
    return self

  def __exit__(self, type, value, traceback):
    if self._error is None:
      self._printfn('{}{:.3f}ms'.format(self._msg,
                                        1000.0 * (time.time() - self._start)))

  def set_error(self, error):
    self._error = error


def check_env_flag(name, default=''):
  """True when the variable is 'true' or a positive integer."""
  flag = os.getenv(name, default)
  return flag == 'true' or (flag.isdigit() and int(flag) > 0)
