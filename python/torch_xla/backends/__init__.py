"""torch_xla.backends: backend settings, as torch.backends.* are for
PyTorch's own backends (PyTorch/XLA 2.9's module).

Matrix-multiply precision for 32-bit inputs: 'default', 'high' or 'highest'
(PyTorch/XLA's names; on a TPU they choose 1, 3 or 6 bf16 passes). This
engine computes f32 products and convolutions in f32 on the CPU at every
setting, which is what 'highest' asks for, so the setting is kept and
reported but changes no value (as XLA's own CPU backend ignores it).
The setting lives where PyTorch/XLA keeps it, behind
torch_xla._XLAC._xla_set_mat_mul_precision / _xla_get_mat_mul_precision.
"""
import logging
from typing import Final, Literal

logger = logging.getLogger(__name__)

_WARNING_MESSAGE: Final[str] = (
    'Setting mat mul precision multiple times is not '
    'recommended. If you need to do so, please empirically '
    'verify that the precision setting is behaving as expected.')

__all__ = ["set_mat_mul_precision", "get_mat_mul_precision"]

_DEFAULT: Final = "default"
_HIGH: Final = "high"
_HIGHEST: Final = "highest"
_VALID = (_DEFAULT, _HIGH, _HIGHEST)

_PrecisionType = Literal["default", "high", "highest"]


def set_mat_mul_precision(precision: _PrecisionType) -> None:
  """Sets the precision of f32 matrix products and convolutions: one of
  'default', 'high', 'highest' (ValueError otherwise). Logs a warning,
  as PyTorch/XLA does, because changing it mid-program is discouraged."""
  if precision not in _VALID:
    raise ValueError(f"Invalid precision: {precision}. "
                     f"Must be one of {_DEFAULT}, {_HIGH}, {_HIGHEST}.")
  logger.warning(_WARNING_MESSAGE)
  import torch_xla
  torch_xla._XLAC._xla_set_mat_mul_precision(precision)


def get_mat_mul_precision() -> _PrecisionType:
  """The current setting, one of 'default', 'high', 'highest'."""
  import torch_xla
  precision = torch_xla._XLAC._xla_get_mat_mul_precision()
  assert precision in _VALID, (f"Invalid precision: {precision}. "
                               f"Must be one of {_DEFAULT}, {_HIGH}, {_HIGHEST}.")
  return precision
