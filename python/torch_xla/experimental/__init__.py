"""torch_xla.experimental: eager mode (see eager.py)."""
from torch_xla.experimental.eager import (  # noqa: F401
    eager_mode, eager_mode_context, is_eager_mode, use_eager_mode)
