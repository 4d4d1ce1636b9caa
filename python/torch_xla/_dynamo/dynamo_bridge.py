"""torch_xla._dynamo.dynamo_bridge: the dynamo bridge under PyTorch/XLA's
current module path (the code is torch_xla/core/dynamo_bridge.py and
torchtpu/dynamo.py)."""
from torch_xla.core.dynamo_bridge import *  # noqa: F401,F403
from torch_xla.core.dynamo_bridge import (  # noqa: F401
    CompiledGraph, dynamo_debug, extract_compiled_graph, extract_compiled_graph_helper,
    get_fallback_ops, ptxla_debug)
