"""Sync-free optimizers for AMP: step(found_inf=t) skips the update on the
device instead of reading t on the host."""
from .adam import Adam  # noqa: F401
from .adamw import AdamW  # noqa: F401
from .sgd import SGD  # noqa: F401
