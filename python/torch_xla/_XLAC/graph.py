"""_XLAC's graph inspection calls: IR text, HLO text, DOT, graph hash,
tensor ids and debug info, over the engine's lazy graph.

IR text and DOT are the engine's own (its IR nodes, docs/debugging.md);
HLO text is rewritten from the StableHLO the engine emits (hlo_text.py).
Nothing here executes the graph."""
import itertools
import os
import re
import warnings

import torch

from torchtpu import _C, bridge
from torch_xla._XLAC.hlo_text import to_hlo_text

_module_ids = itertools.count(1)
_warned = [False]


def _hlo_debug_requested():
    return os.environ.get("XLA_HLO_DEBUG", "0").strip().lower() in ("1", "true", "yes", "on")
_DTYPE_NAMES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
                torch.bfloat16: "bf16", torch.int8: "s8", torch.uint8: "u8", torch.int16: "s16",
                torch.int32: "s32", torch.int64: "s64", torch.bool: "pred",
                torch.complex64: "c64"}


def _handles(tensors):
    import torch_xla.distributed.spmd as xs
    xs.reapply_shardings()
    return [bridge.handle_of(t) for t in tensors]


def _get_xla_tensors_text(tensors):
    """The IR graph computing tensors, as text ('IR {...}')."""
    return _C.graph_dump(_handles(tensors), 0)


def _get_xla_tensors_dot(tensors):
    return _C.graph_dump(_handles(tensors), 1)


def _get_xla_tensors_hlo(tensors):
    """The graph computing tensors as XLA HLO text (HloModule IrToHlo.N).
    XLA_HLO_DEBUG=1 (PyTorch/XLA: Python frames as instruction metadata)
    warns once: the text is rewritten from StableHLO, which carries no
    frames; XLA_IR_DEBUG=1 shows them in _get_xla_tensors_text."""
    if _hlo_debug_requested() and not _warned[0]:
        _warned[0] = True
        warnings.warn("XLA_HLO_DEBUG=1: HLO text here has no per-instruction metadata; "
                      "use XLA_IR_DEBUG=1 and _get_xla_tensors_text for source locations")
    return to_hlo_text(_C.stablehlo_text(_handles(tensors)), next(_module_ids))


def _get_stablehlo(tensors, device="", devices=(), emit_bytecode=False):
    if emit_bytecode:
        from torch_xla.core import xla_model as xm
        return xm.get_stablehlo_bytecode(list(tensors) or None)
    from torch_xla.core import xla_model as xm
    return xm.get_stablehlo(list(tensors) or None).encode()


def _graph_hash_int(tensors):
    text = _C.graph_dump(_handles(tensors), 0)
    m = re.search(r"hash=([0-9a-f]+)", text)
    return int(m.group(1), 16) if m else 0


def _get_graph_hash(tensors):
    """The structural hash of the graph computing tensors, as bytes (8:
    the engine's hash is 64-bit; PyTorch/XLA's is 128-bit)."""
    return _graph_hash_int(tensors).to_bytes(8, "little")


def _xla_get_tensor_id(tensor):
    """Id of the engine value tensor holds now (a new value after an
    in-place update, as functionalization gives the tensor a new one)."""
    return bridge.handle_of(tensor).id


def _get_xla_tensor_shape_type(tensor):
    bridge.handle_of(tensor)
    return _DTYPE_NAMES[tensor.dtype]


def _check_tensor_need_materialization(tensors):
    """For each tensor: True if its value is still a pending graph."""
    return [bool(bridge.handle_of(t).pending) for t in tensors]


def _shape_text(tensor):
    return f"{_DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))}[{','.join(map(str, tensor.shape))}]"


def _get_xla_tensor_debug_info(tensor):
    """PyTorch/XLA's 'XLATensor {...}' block for tensor."""
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "xla":
        return "Not a XLATensor\n"
    from torch_xla._XLAC.sharding import _get_xla_sharding_spec
    from torchtpu import config
    h = bridge.handle_of(tensor)
    device = f"{config.device_type()}:{h.device}"
    spec = _get_xla_sharding_spec(tensor)
    lines = ["XLATensor {", f"TensorID: {h.id}", f"AliasID: {h.id}", f"Device: {device}",
             f"XLA Shape: {_shape_text(tensor)}", f"ShardingSpec: {spec or 'None'}"]
    if h.pending:
        ir = [ln.strip() for ln in _C.graph_dump([h], 0).splitlines() if "ROOT=" in ln]
        lines.append(f"IR: {ir[-1] if ir else 'None'}")
        lines.append("XLAData: None")
    else:
        lines.append("IR: None")
        lines += ["XLAData: ", f"  Data Device: {device}", f"  Data Shape: {_shape_text(tensor)}",
                  "  OpSharding: " + (spec or "{replicated}"), "  NumShards: 1"]
    lines += ["Tensor on host: None", "}"]
    return "\n".join(lines) + "\n"
