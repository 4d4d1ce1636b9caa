"""torch_xla.core.dynamo_bridge: what PyTorch's "openxla" and "openxla_eval"
torch.compile backends import. extract_compiled_graph(fx_module, args)
returns a callable that traces the FX graph into the torchtpu engine once
per input signature and then replays the compiled executable on each call's
inputs (see torchtpu/dynamo.py and docs/dynamo.md)."""
from torchtpu.dynamo import (  # noqa: F401
    CompiledGraph, dynamo_debug, extract_compiled_graph, torchtpu_backend)
from torchtpu import modes as _modes
import torch_xla.debug.metrics as _metrics


def get_fallback_ops():
    """Names of the ops that ran on the CPU fallback path (since the counters
    were last cleared)."""
    return _metrics.executed_fallback_ops()


def extract_compiled_graph_helper(xla_model, xla_args):
    return extract_compiled_graph(xla_model, xla_args)


ptxla_debug = _modes.debug_enabled()
