"""torch_xla.amp: automatic mixed precision on xla devices (docs/amp.md).

Importing it (torch_xla does) registers the AutocastXLA kernels, so
torch.autocast('xla') casts ops by PyTorch/XLA's policy."""
from torch_xla.amp import autocast_kernels as _autocast_kernels
from torch_xla.amp import scaler_lowerings as _scaler_lowerings  # noqa: F401  (registers)

_autocast_kernels.register()

from .autocast_mode import autocast  # noqa: E402,F401
from .grad_scaler import GradScaler  # noqa: E402,F401
from . import syncfree  # noqa: E402,F401
