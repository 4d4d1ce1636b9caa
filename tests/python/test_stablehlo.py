"""StableHLO emission (issue 7): golden text for tiny graphs, MLIR parsing of
the text for broad op sets, the per-opcode lowering table, errors, and the
torch.export path (exported_program_to_stablehlo / save_as_stablehlo)."""
import json
import os
import subprocess

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla import stablehlo as shlo
from torchtpu import _C, bridge
from torchtpu.lowering import core

MLIR_OPT = xm._mlir_opt()
needs_mlir = pytest.mark.skipif(
    MLIR_OPT is None,
    reason="mlir-opt (LLVM 19) is not installed: apt-get install mlir-19-tools "
           "(scripts/bootstrap.sh does it)")


def parse(text):
    """Parses text with mlir-opt (stablehlo ops as unregistered generic ops);
    returns mlir-opt's re-printed module, failing the test on an error."""
    r = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect"], input=text,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:] + "\n--- text ---\n" + text[:3000]
    return r.stdout


def ops_of(text):
    return {tok.split('"')[1] for tok in text.split() if tok.startswith('"stablehlo.')
            or tok.startswith('"chlo.')}


# ------------------------------------------------------------------ goldens
GOLDEN_ADD = """\
module @"torchtpu" {
  func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<f32>) -> tensor<2x3xf32> {
    %0 = "stablehlo.broadcast_in_dim"(%arg1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2x3xf32>
    %1 = "stablehlo.add"(%arg0, %0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    return %1 : tensor<2x3xf32>
  }
}
"""

GOLDEN_MATMUL = """\
module @"torchtpu" {
  func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3x4xf32>) -> tensor<2x4xf32> {
    %0 = "stablehlo.reshape"(%arg0) : (tensor<2x3xf32>) -> tensor<1x2x3xf32>
    %1 = "stablehlo.reshape"(%arg1) : (tensor<3x4xf32>) -> tensor<1x3x4xf32>
    %2 = "stablehlo.dot_general"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>} : (tensor<1x2x3xf32>, tensor<1x3x4xf32>) -> tensor<1x2x4xf32>
    %3 = "stablehlo.reshape"(%2) : (tensor<1x2x4xf32>) -> tensor<2x4xf32>
    return %3 : tensor<2x4xf32>
  }
}
"""

GOLDEN_SUM = """\
module @"torchtpu" {
  func.func @main(%arg0: tensor<2x3xf32>) -> tensor<2xf32> {
    %0 = "stablehlo.constant"() {value = dense<0.000000000e+00> : tensor<f32>} : () -> tensor<f32>
    %1 = "stablehlo.reduce"(%arg0, %0) ({
    ^bb0(%2: tensor<f32>, %3: tensor<f32>):
      %4 = "stablehlo.add"(%2, %3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%4) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    return %1 : tensor<2xf32>
  }
}
"""


@pytest.fixture
def ab(dev):
    a = torch.ones(2, 3, device=dev)
    b = torch.ones(3, 4, device=dev)
    torch_xla.sync()
    return a, b


def test_golden_add(ab):
    a, _ = ab
    assert xm.get_stablehlo([a + 1]) == GOLDEN_ADD


def test_golden_matmul(ab):
    a, b = ab
    assert xm.get_stablehlo([a @ b]) == GOLDEN_MATMUL


def test_golden_sum(ab):
    a, _ = ab
    assert xm.get_stablehlo([a.sum(1)]) == GOLDEN_SUM


def test_emission_executes_nothing(ab, clean_metrics):
    a, b = ab
    c = (a @ b).relu()
    xm.get_stablehlo([c])
    assert bridge.handle_of(c).pending
    assert clean_metrics.metric_data("ExecuteTime") is None
    assert clean_metrics.metric_data("CompileTime") is None


def test_inputs_and_outputs_in_order(dev):
    x = torch.randn(3, device=dev)
    y = torch.randn(2, 2, dtype=torch.float64, device=dev)
    torch_xla.sync()
    text, inputs = _C.stablehlo_emit([bridge.handle_of(t) for t in (y * 2, x.exp(), x)])
    assert [(kind, tuple(shape)) for _, kind, _, shape, _ in inputs][:1] == [("param", (2, 2))]
    head = text.splitlines()[1]
    assert "-> (tensor<2x2xf64>, tensor<3xf32>, tensor<3xf32>)" in head
    # x passed straight through is an argument returned as is.
    assert text.rstrip().splitlines()[-3].startswith("    return ")
    assert "%arg" in text.rstrip().splitlines()[-3].split(":")[0].split(",")[-1]
    keys = {k for k, *_ in inputs}
    assert _C.stablehlo_tensor_key(bridge.handle_of(x)) in keys


def test_get_stablehlo_without_tensors_takes_pending(dev):
    torch_xla.sync()
    a = torch.randn(5, 7, device=dev)
    torch_xla.sync()
    pending = a.tanh() * 3  # noqa: F841 (kept alive for the dump)
    text = xm.get_stablehlo()
    assert "stablehlo.tanh" in text
    assert "tensor<5x7xf32>" in text


# ------------------------------------------------------- the lowering table
def test_every_opcode_has_a_lowering():
    table = _C.stablehlo_lowering_table()
    assert len(table) == core.OPT_BARRIER + 1  # TT_OP_COUNT, as core.py numbers ops
    missing = [i for i, s in enumerate(table) if not s]
    assert missing == []


def test_unlowerable_variant_is_a_clear_error(dev):
    i = torch.arange(6, device=dev)
    torch_xla.sync()
    h = bridge.handle_of(i)
    bad = _C.op(core.BINARY, [h, h], (core.BIN["div"],))  # integer true division: no kernel
    with pytest.raises(NotImplementedError, match=r"binary op 3 has no lowering for dtype int64"):
        _C.stablehlo_text([bad])


# ------------------------------------------------------------- parse tests
def _parse_outputs(outs):
    text = xm.get_stablehlo(list(outs))
    parse(text)
    return text


@needs_mlir
def test_parse_mlp_forward_backward(dev):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 3)).to(dev)
    x = torch.randn(4, 5, device=dev)
    tgt = torch.tensor([0, 2, 1, 2], device=dev)
    loss = F.cross_entropy(model(x), tgt)
    loss.backward()
    text = _parse_outputs([loss] + [p.grad for p in model.parameters()])
    assert {"stablehlo.dot_general", "stablehlo.reduce", "chlo.erf"} <= ops_of(text)


@needs_mlir
def test_parse_cnn_conv_pool_batchnorm(dev):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Conv2d(4, 4, 3, padding=1, groups=2), nn.MaxPool2d(2, ceil_mode=True),
                          nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
                          nn.Linear(4, 2)).to(dev)
    x = torch.randn(2, 3, 16, 16, device=dev, requires_grad=True)
    out = model(x)
    out.sum().backward()
    text = _parse_outputs([out, x.grad] + [p.grad for p in model.parameters()])
    ops = ops_of(text)
    assert {"stablehlo.convolution", "stablehlo.reduce_window", "stablehlo.scatter",
            "stablehlo.reverse"} <= ops
    # Both backward convolutions: one dilates its input (grad wrt x), one
    # groups the batch (grad wrt a grouped weight).
    assert "lhs_dilation = array<i64: 2, 2>" in text
    assert "batch_group_count = 2 : i64" in text


@needs_mlir
def test_parse_softmax_cross_entropy(dev):
    x = torch.randn(6, 10, device=dev, requires_grad=True)
    tgt = torch.randint(0, 10, (6,), device=dev)
    loss = F.cross_entropy(x, tgt) + F.softmax(x, 1).sum() + F.nll_loss(F.log_softmax(x, 0), tgt)
    loss.backward()
    text = _parse_outputs([loss, x.grad])
    assert {"stablehlo.exponential", "stablehlo.log", "stablehlo.divide"} <= ops_of(text)


@needs_mlir
def test_parse_indexing(dev):
    x = torch.randn(5, 6, device=dev)
    i = torch.tensor([4, 0, 2], device=dev)
    j = torch.randint(0, 6, (5, 6), device=dev)
    y = x.clone()
    y[:, ::2] = 1.0
    outs = [x[i], x.index_select(1, i), torch.gather(x, 1, j), x.scatter(1, j, 2.0),
            x.scatter_add(1, j, x), x.scatter_reduce(1, j, x, "amax", include_self=False),
            x.scatter_reduce(1, j, x, "mean"), torch.zeros(5, 6, device=dev).index_add(0, i, x[:3]),
            y, x[1:4, 2:], x.flip(1), F.pad(x, (1, -1, 2, 0)), torch.cat([x, x], 1),
            F.embedding(i, x), torch.where(x > 0, x, -x)]
    text = _parse_outputs(outs)
    assert {"stablehlo.gather", "stablehlo.scatter", "stablehlo.pad", "stablehlo.select",
            "stablehlo.concatenate", "stablehlo.slice"} <= ops_of(text)


@needs_mlir
def test_parse_sort_and_search(dev):
    x = torch.randn(4, 7, device=dev)
    outs = [x.argsort(1), x.sort(0, descending=True)[0], torch.topk(x, 3, 1)[1],
            torch.searchsorted(torch.tensor([-1.0, 0.0, 1.0], device=dev), x),
            torch.cummax(x, 1)[1], torch.logcumsumexp(x, 0), x.cumsum(1), x.argmax(1)]
    text = _parse_outputs(outs)
    assert "stablehlo.sort" in ops_of(text)
    assert "is_stable = true" in text


@needs_mlir
def test_parse_elementwise_dtypes_rng_and_custom_calls(dev):
    x = torch.randn(3, 4, device=dev)
    n = torch.randint(-5, 5, (3, 4), device=dev)
    outs = [x.to(torch.bfloat16) * 2, x.half().exp(), x.double().sin(), n // 3, n % 3, n >> 1,
            n.to(torch.uint8) & 7, n.to(torch.int8) * 2, n.to(torch.int16) + 1, n > 0, ~(n > 0),
            x.view(torch.int32), torch.special.zeta(x.abs() + 2, x.abs() + 1), torch.lgamma(x),
            torch.rand(3, 4, device=dev), torch.randn(5, device=dev, dtype=torch.float64),
            F.dropout(x, 0.5), torch.arange(1, 10, 2, device=dev), x / 0,
            torch.linalg.cholesky(x @ x.T + 4 * torch.eye(3, device=dev)),
            torch.special.chebyshev_polynomial_t(x, 3), x.amax(1)]
    text = _parse_outputs(outs)
    ops = ops_of(text)
    assert {"stablehlo.rng_bit_generator", "stablehlo.custom_call", "stablehlo.bitcast_convert",
            "chlo.zeta", "chlo.lgamma"} <= ops
    assert 'call_target_name = "torchtpu.linalg.cholesky"' in text
    for ty in ("bf16", "f16", "f64", "ui8", "i8", "i16", "i1"):
        assert f"x{ty}>" in text, ty
    assert "0x7F800000" in text or "0xFF800000" in text  # non-finite constants in hex


@needs_mlir
def test_bytecode(ab):
    a, b = ab
    code = xm.get_stablehlo_bytecode([a @ b])
    assert code[:4] == b"ML\xefR"  # MLIR bytecode magic


# ------------------------------------------------------------ torch.export
class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x, unused):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return F.log_softmax(self.fc(h.flatten(1)) * 0.5, 1)


def _export():
    torch.manual_seed(0)
    model = _Net().eval()
    args = (torch.randn(2, 1, 8, 8), torch.randn(3))
    return model, args, torch.export.export(model, args)


def test_exported_program_to_stablehlo_meta(dev):
    model, args, ep = _export()
    prog = shlo.exported_program_to_stablehlo(ep)
    text = prog.get_stablehlo_text("forward")
    assert text.startswith('module @"torchtpu"') and "func.func @main(" in text
    meta = prog.meta()
    kinds = [loc.type_ for loc in meta.input_locations]
    assert kinds.count(shlo.VariableType.INPUT_ARG) == 1
    names = {loc.name for loc in meta.input_locations if loc.type_ == shlo.VariableType.PARAMETER}
    assert {"conv.weight", "conv.bias", "fc.weight", "fc.bias"} <= names
    assert len(meta.input_signature) == len(meta.input_locations)
    assert len(meta.input_signature) == text.splitlines()[1].count("%arg")
    assert [u[0].position for u in meta.unused_inputs] == [1]
    assert meta.output_signature[0].shape == [2, 3]
    assert meta.output_signature[0].dtype == "float32"
    if MLIR_OPT:
        parse(text)
    # Calling it runs the program on the device.
    out = prog(args[0].to(dev), args[1].to(dev))
    torch.testing.assert_close(out.cpu(), model(*args), rtol=1e-4, atol=1e-4)


def test_save_as_stablehlo_layout(tmp_path):
    import numpy as np
    _, _, ep = _export()
    d = tmp_path / "shlo"
    shlo.save_as_stablehlo(ep, str(d))
    assert (d / "functions" / "forward.mlir").is_file()
    assert (d / "functions" / "forward.meta").is_file()
    assert (d / "functions" / "forward.bytecode").is_file() == (MLIR_OPT is not None)
    meta = json.loads((d / "functions" / "forward.meta").read_text())
    assert meta["name"] == "forward"
    assert {"input_signature", "output_signature", "input_locations", "unused_inputs",
            "input_pytree_spec", "output_pytree_spec", "stablehlo_version"} <= set(meta)
    assert {loc["type_"] for loc in meta["input_locations"]} <= {"input_arg", "parameter",
                                                                 "constant"}
    w = np.load(d / "data" / "conv.weight")
    torch.testing.assert_close(torch.from_numpy(w), ep.state_dict["conv.weight"])
    n_const = sum(loc["type_"] == "constant" for loc in meta["input_locations"])
    assert len(os.listdir(d / "constants")) == n_const
    loaded = shlo.StableHLOGraphModule.load(str(d))
    assert loaded.get_stablehlo_text() == (d / "functions" / "forward.mlir").read_text()
    assert loaded.meta().input_locations[0].type_ in set(shlo.VariableType)
    # A loaded module runs its StableHLO through XLA's CPU PJRT plugin.
    model, args, _ = _export()
    out = loaded(*args)
    assert out.device.type == "xla"
    torch.testing.assert_close(out.cpu(), model(*args), rtol=1e-5, atol=1e-5)
