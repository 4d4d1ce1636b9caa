"""XLA's shape syntax for text PyTorch/XLA prints: `f32[4,2]{1,0}`.

PyTorch/XLA's debug strings (tensor debug info, IR text, the dynamic
shape detector's messages) spell shapes as XLA does: the primitive type's
short name (f32, bf16, s64, pred, c64, ...), the dimensions, and, with a
layout, the minor-to-major order (row-major here: {n-1,...,0}; scalars
have none). Programs and PyTorch/XLA's own tests match these strings, so
every such text in torch_xla names shapes through this module.
"""
import torch

# torch dtype -> XLA primitive type name.
XLA_TYPE_NAMES = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int8: "s8", torch.int16: "s16", torch.int32: "s32", torch.int64: "s64",
    torch.uint8: "u8", torch.bool: "pred", torch.complex64: "c64", torch.complex128: "c128",
}
for _name, _xla in (("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64"),
                    ("float8_e4m3fn", "f8e4m3fn"), ("float8_e5m2", "f8e5m2")):
    if hasattr(torch, _name):
        XLA_TYPE_NAMES[getattr(torch, _name)] = _xla

# The engine's dtype names (src/base/dtype.c) -> XLA's.
ENGINE_TYPE_NAMES = {
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "s8",
    "uint8": "u8", "int16": "s16", "int32": "s32", "int64": "s64", "bool": "pred",
    "complex64": "c64", "complex128": "c128",
}


def type_name(dtype):
    """XLA's name for a torch dtype (str(dtype) for one XLA lacks)."""
    return XLA_TYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def shape_text(type_or_dtype, dims, layout=True):
    """'f32[4,2]{1,0}' (layout=False: 'f32[4,2]'); type_or_dtype is a torch
    dtype or an XLA type name."""
    name = type_or_dtype if isinstance(type_or_dtype, str) else type_name(type_or_dtype)
    dims = [int(d) for d in dims]
    text = f"{name}[{','.join(map(str, dims))}]"
    if layout and dims:
        text += "{" + ",".join(str(i) for i in reversed(range(len(dims)))) + "}"
    return text


def tensor_shape_text(tensor, layout=True):
    """XLA shape of a tensor's value as torch sees it (dtype and sizes)."""
    return shape_text(tensor.dtype, tensor.shape, layout)


def tuple_text(shapes):
    """One shape as is, several as XLA's tuple: '(f32[2]{0}, s64[])'."""
    return shapes[0] if len(shapes) == 1 else "(" + ", ".join(shapes) + ")"
