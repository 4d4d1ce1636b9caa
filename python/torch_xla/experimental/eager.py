"""torch_xla.experimental eager mode: each op runs as soon as it is called.

In eager mode every op's graph is cut, compiled (once per distinct op and
shape; the cache serves repeats) and queued as soon as the op is recorded,
so errors surface at the op and no graph grows across a training step.
torch_xla.compile regions (and torch.compile's openxla backend) are still
traced and compiled whole. Metrics, as PyTorch/XLA: an eager op's compile
is sampled in EagerOpCompileTime and its execution in EagerOpExecuteTime,
not in CompileTime/ExecuteTime; empty runs its zero fill as an op.
XLA_USE_EAGER_DEBUG_MODE=1 turns eager mode on at import and also waits for
each op to finish.
"""
import contextlib

from torchtpu import modes


def eager_mode(enable: bool):
    """Turns eager mode on or off for this process."""
    modes.set_eager(enable)


def is_eager_mode() -> bool:
    return modes.is_eager()


@contextlib.contextmanager
def eager_mode_context(enable: bool):
    """Eager mode set to enable inside the block, restored after it."""
    saved = modes.is_eager()
    modes.set_eager(enable)
    try:
        yield
    finally:
        modes.set_eager(saved)


def use_eager_mode(enable: bool):
    """Older name of eager_mode."""
    modes.set_eager(enable)


def compile(func):
    """Older experimental spelling of torch_xla.compile(func)."""
    import torch_xla
    return torch_xla.compile(func)
