"""torch_xla.torch_xla: the home of PyTorch/XLA's top-level functions. The
device and graph functions live in torch_xla/__init__.py; this module
holds the compiler-option overrides (set_custom_compile_options, and
torch_xla.compile's custom_compile_options=).

Custom compile options are XLA compiler flag overrides (flag name ->
bool/int/float/str value, passed to XLA as strings). This engine compiles
its own IR with its own compiler, which has no XLA flags: the options are
validated and kept (custom_compile_options() returns them, stringified as
XLA would receive them) so programs that set them run unchanged, but they
do not change what is compiled.
"""
from typing import Any, Dict

_options: Dict[str, str] = {}


def _stringify(value: Any) -> str:
  if isinstance(value, bool):
    return 'true' if value else 'false'
  return str(value)


def set_custom_compile_options(options: Dict[str, Any]) -> None:
  """Replaces the XLA compiler flag overrides with options; {} clears
  them. Keys must be str and values bool, int, float or str (TypeError
  otherwise)."""
  if not isinstance(options, dict):
    raise TypeError(f'custom compile options must be a dict, got {type(options).__name__}')
  converted = {}
  for k, v in options.items():
    if not isinstance(k, str):
      raise TypeError(f'custom compile option names must be str, got {k!r}')
    if not isinstance(v, (bool, int, float, str)):
      raise TypeError(f'custom compile option {k!r}: value must be bool, int, float or str, '
                      f'got {type(v).__name__}')
    converted[k] = _stringify(v)
  _options.clear()
  _options.update(converted)


def custom_compile_options() -> Dict[str, str]:
  """The overrides currently set (values as the strings XLA would get)."""
  return dict(_options)


def launch(fn, args=(), start_method: str = 'spawn', debug_single_process: bool = False):
  """Runs fn(ordinal, *args) on every replica: under torchrun
  (torch.distributed elastic) in this process with LOCAL_RANK as the
  ordinal (with CPU_NUM_DEVICES > 1: one thread per device of this
  process, each with its global ordinal), otherwise through xmp.spawn (one thread per xla device of
  CPU_NUM_DEVICES in a new process; debug_single_process: fn(0, *args)
  here). Raises NotImplementedError in SPMD mode, as PyTorch/XLA does."""
  import os
  import torch.distributed as dist
  import torch_xla.runtime as xr
  import torch_xla.core.xla_env_vars as xenv
  if xr.is_spmd():
    raise NotImplementedError('launch function does not support SPMD at this time')
  if dist.is_torchelastic_launched():
    from torchtpu import processes
    if processes.launched() and processes.local_devices() > 1:
      # Several devices per process: one replica thread per device
      # (torch_xla._internal.pjrt.spawn under torchrun).
      import torch_xla.distributed.xla_multiprocessing as xmp
      xmp.spawn(fn, args=args)
      return
    fn(int(os.environ[xenv.LOCAL_RANK]), *args)
    return
  import torch_xla.distributed.xla_multiprocessing as xmp
  xmp.spawn(fn, args=args, nprocs=1 if debug_single_process else None,
            start_method=start_method)
