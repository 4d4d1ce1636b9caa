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

from torchtpu import _C, bridge, xla_shapes
from torch_xla._XLAC.hlo_text import to_hlo_text

_module_ids = itertools.count(1)
_warned = [False]


def _hlo_debug_requested():
    return os.environ.get("XLA_HLO_DEBUG", "0").strip().lower() in ("1", "true", "yes", "on")
# `%3 = float32[4,2] op(...)`: the engine's value type in its IR text.
_IR_VALUE_TYPE = re.compile(r"(= )([a-z]+[0-9]*)\[([0-9,]*)\]")


# The engine's graph input holding device data is PyTorch/XLA's
# xla::device_data node; programs look for that name.
_IR_PARAM = re.compile(r"(= \S+ )param\(")


def _xla_types(text):
    """The engine's IR text with value types in XLA's syntax
    (float32[4,2] -> f32[4,2]{1,0}) and device-data inputs named
    xla::device_data, as PyTorch/XLA's IR text shows them."""
    def sub(m):
        name = xla_shapes.ENGINE_TYPE_NAMES.get(m.group(2))
        if name is None:
            return m.group(0)
        dims = [d for d in m.group(3).split(",") if d]
        return m.group(1) + xla_shapes.shape_text(name, dims)
    return _IR_PARAM.sub(r"\1xla::device_data(", _IR_VALUE_TYPE.sub(sub, text))


def _handles(tensors):
    import torch_xla.distributed.spmd as xs
    xs.reapply_shardings()
    return [bridge.handle_of(t) for t in tensors]


def _get_xla_tensors_text(tensors):
    """The IR graph computing tensors, as text ('IR {...}'): the engine's
    nodes (docs/debugging.md), value types in XLA's shape syntax."""
    return _xla_types(_C.graph_dump(_handles(tensors), 0))


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
    return xla_shapes.type_name(tensor.dtype)


def _check_tensor_need_materialization(tensors):
    """For each tensor: True if its value is still a pending graph."""
    return [bool(bridge.handle_of(t).pending) for t in tensors]


def _ir_node_text(tensor, h):
    """PyTorch/XLA's IR node text for the op that made tensor's pending
    value: '[] aten::add, xla_shape=f32[5]{0}, dynamic_dims: ()'. The op
    is the aten op recorded on the value (torchtpu.lowering._tag); a value
    made otherwise is named by the engine's root op ('xla::<op>')."""
    name = None
    try:
        op = getattr(bridge.inner_of(tensor), "_op", None)
    except RuntimeError:
        op = None
    if op is not None and op[1] == h.id:
        schema = getattr(op[0], "_schema", None)
        name = schema.name if schema is not None else str(op[0])
    if name is None:
        roots = [ln for ln in _C.graph_dump([h], 0).splitlines() if "ROOT=" in ln]
        m = re.search(r"= \S+ (\w+)\(", roots[-1]) if roots else None
        name = f"xla::{m.group(1) if m else 'unknown'}"
    return (f"[] {name}, xla_shape={xla_shapes.shape_text(tensor.dtype, tensor.shape)}, "
            "dynamic_dims: ()")


def _get_xla_tensor_debug_info(tensor):
    """PyTorch/XLA's 'XLATensor {...}' block for tensor: shapes in XLA's
    syntax (XLA Shape / Data Shape without layout, the IR node's with it),
    the IR node of a pending value (or the device_data node ops read its
    data through), the device data, the host value of data still on the
    host. In SPMD mode the device is the virtual `SPMD:0` and device data
    is sharded data, one shard per device (replicated unless annotated or
    held as shards)."""
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "xla":
        return "Not a XLATensor\n"
    from torch_xla._XLAC.sharding import _get_xla_sharding_spec
    from torchtpu import config
    h = bridge.handle_of(tensor)
    spmd = _C.spmd_virtual_device()
    device = f"SPMD:{h.device}" if spmd else f"{config.device_type()}:{h.device}"
    shape = xla_shapes.tensor_shape_text(tensor, layout=False)
    spec = _get_xla_sharding_spec(tensor)
    lines = ["XLATensor {", f"TensorID: {h.id}", f"AliasID: {h.id}", f"Device: {device}",
             f"XLA Shape: {shape}", f"ShardingSpec: {spec or 'None'}"]
    on_host = h.on_host
    if h.pending:
        lines += [f"IR: {_ir_node_text(tensor, h)}", "XLAData: None"]
    elif on_host:
        lines += ["IR: None", "XLAData: None"]
    else:
        if h.data_node:
            node = (f"[] xla::device_data, xla_shape="
                    f"{xla_shapes.shape_text(tensor.dtype, tensor.shape)}, dynamic_dims: (), "
                    f"device={device}")
            lines.append(f"IR: {node}")
        else:
            lines.append("IR: None")
        if spec or spmd:
            shards = config.ensure_runtime() if spmd else 1
            lines += ["XLAShardedData: ", f"  Data Device: {device}", f"  Data Shape: {shape}",
                      f"  OpSharding: {spec or '{replicated}'}", f"  NumShards: {shards}"]
        else:
            lines += ["XLAData: ", f"  Data Device: {device}", f"  Data Shape: {shape}",
                      f"  Data Handle: {h.id}"]
    host = f"with size [{', '.join(str(d) for d in tensor.shape)}]" if on_host else "None"
    lines += [f"Tensor on host: {host}", "}"]
    return "\n".join(lines) + "\n"
