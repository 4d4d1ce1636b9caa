"""PyTorch/XLA's text formats that programs and its own tests read:
_get_xla_tensor_debug_info's block and _get_xla_tensors_text's value types
in XLA's shape syntax (f32[4,2]{1,0}, c64[4], ...), and the op a pending
tensor's IR node names (aten::add). Shapes are ones no other test uses."""
import torch

import torch_xla
import torch_xla._XLAC as X
from torchtpu import xla_shapes


def test_xla_shape_syntax():
    assert xla_shapes.shape_text(torch.float32, (4, 2)) == "f32[4,2]{1,0}"
    assert xla_shapes.shape_text(torch.complex64, (4,), layout=False) == "c64[4]"
    assert xla_shapes.shape_text(torch.int64, ()) == "s64[]"
    assert xla_shapes.shape_text(torch.bool, (2, 3, 5)) == "pred[2,3,5]{2,1,0}"
    assert xla_shapes.type_name(torch.bfloat16) == "bf16"
    assert xla_shapes.type_name(torch.uint8) == "u8"


def test_debug_info_pending_then_data(dev):
    cpu = torch.randn(53)
    t = cpu.to(dev) + 5
    info = X._get_xla_tensor_debug_info(t)
    assert "XLA Shape: f32[53]\n" in info
    assert "IR: [] aten::add, xla_shape=f32[53]{0}, dynamic_dims: ()\n" in info
    assert "XLAData: None\n" in info
    torch_xla.sync()
    info = X._get_xla_tensor_debug_info(t)
    assert "IR: None\n" in info and "XLAData: None" not in info
    assert "XLAData: \n  Data Device: CPU:0\n  Data Shape: f32[53]\n  Data Handle: " in info
    assert info.endswith("Tensor on host: None\n}\n")
    assert torch.allclose(t.cpu(), cpu + 5)


def test_debug_info_names_the_outermost_op(dev):
    x = torch.randn(3, 59).to(dev)
    y = torch.logsumexp(x, 1)  # decomposed: the outer op names the node
    assert "IR: [] aten::logsumexp, xla_shape=f32[3]{0}" in X._get_xla_tensor_debug_info(y)
    y.add_(1)  # a new value: named by the op that made it
    assert "IR: [] aten::add" in X._get_xla_tensor_debug_info(y)


def test_view_as_real_and_complex_types(dev):
    x = torch.randn(61, dtype=torch.complex64, device=dev)
    real = torch.view_as_real(x)
    assert "XLA Shape: f32[61,2]\n" in X._get_xla_tensor_debug_info(real)
    last = X._get_xla_tensors_text([real]).split("\n")[-3]
    assert " = f32[61,2]{1,0} " in last and "ROOT=0" in last
    c = torch.view_as_complex(torch.randn(67, 2, device=dev))
    assert "XLA Shape: c64[67]\n" in X._get_xla_tensor_debug_info(c)
    assert " = c64[67]{0} " in X._get_xla_tensors_text([c]).split("\n")[-3]
    assert X._get_xla_tensor_shape_type(c) == "c64"


def test_ir_text_types_every_value(dev):
    a = torch.arange(71, dtype=torch.int64).to(dev)
    b = (a > 3).sum()
    text = X._get_xla_tensors_text([b])
    assert "s64[71]{0}" in text and "pred[71]{0}" in text and "s64[]" in text
    assert "int64" not in text and "bool[" not in text


def test_device_data_is_named_as_pytorch_xla_names_it(dev):
    t = torch.randn(1, 83).to(dev)
    text = X._get_xla_tensors_text([t])
    assert "%0 = f32[1,83]{1,0} xla::device_data(), input=0, ROOT=0" in text
    assert " param(" not in X._get_xla_tensors_text([t * 2])
