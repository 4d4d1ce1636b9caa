"""torch_xla.distributed.xla_multiprocessing (xmp): PyTorch/XLA's
launcher. spawn runs fn(ordinal, *args) on every xla device of the host,
one thread per device in a new process (torch_xla._internal.pjrt says
how); accelerate and lightning import this module at start-up."""
import threading

from torch_xla._internal import pjrt


def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method='spawn'):
    """Calls fn(ordinal, *args) on every replica; nprocs is 1, None or
    the device count (ValueError otherwise, as in PyTorch/XLA). Returns
    None."""
    return pjrt.spawn(fn, nprocs, start_method, args)


class MpModelWrapper:
    """Holds a model built once at module scope, for spawn(...,
    start_method='fork'); to(device) moves it once, under a lock, and
    returns it."""

    def __init__(self, model):
        self._model = model
        self._lock = threading.Lock()

    def to(self, device):
        with self._lock:
            self._model.to(device)
        return self._model


class MpSerialExecutor:
    """Runs functions one at a time across the threads of this process
    (PyTorch/XLA serialises memory-heavy steps such as model loading)."""

    def __init__(self):
        self._lock = threading.Lock()

    def run(self, fn):
        with self._lock:
            return fn()
