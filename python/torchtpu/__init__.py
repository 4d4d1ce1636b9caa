"""torchtpu: the engine behind the torch_xla API.

Importing this package loads the C engine (torchtpu._C), starts the
runtime's devices from the environment (PJRT_DEVICE, CPU_NUM_DEVICES) on
first use, and registers the 'xla' device with PyTorch (see bridge.py).
"""
from torchtpu import _C  # noqa: F401
from torchtpu import config  # noqa: F401
from torchtpu import bridge  # noqa: F401
from torchtpu import inplace_meta  # noqa: F401
from torchtpu import optim_foreach  # noqa: F401
