"""xm.optimization_barrier_ (the engine's OPT_BARRIER op, ops.def;
docs/compiler.md "Optimization barriers"): the tensors keep their values,
the barrier is in the HLO text (`opt-barrier` over a tuple, a transposed
gradient with XLA's permuted layout) and in the
StableHLO (one stablehlo.optimization_barrier per call), gradients through
apply_backward_optimization_barrier equal PyTorch's on the CPU, and a
partitioned SPMD execution runs it on each device's shards."""
import os
import re

import torch

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.distributed.spmd import apply_backward_optimization_barrier

from spmd_script import run_result_script  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_values_unchanged_and_replaced_in_place():
    a = torch.randn(2, 3)
    b = torch.arange(4)
    xa, xb = a.to("xla"), b.to("xla")
    xc = xa * 2
    before = torch_xla._XLAC._get_xla_tensors_hlo([xc])
    xm.optimization_barrier_([xc, xb])
    after = torch_xla._XLAC._get_xla_tensors_hlo([xc])
    assert "opt-barrier" not in before
    assert "opt-barrier" in after  # xc now holds the barrier's result
    assert torch.equal(xc.cpu(), a * 2)
    assert torch.equal(xb.cpu(), b) and xb.dtype == torch.int64
    # used afterwards like any tensor
    assert torch.allclose((xc + 1).cpu(), a * 2 + 1)


def test_hlo_text_and_stablehlo():
    xa = torch.randn(2, 3).to("xla") * 2
    xb = torch.arange(4).to("xla") + 1
    xm.optimization_barrier_([xa, xb])
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([xa, xb])
    lines = [ln.strip() for ln in hlo.splitlines() if "opt-barrier(" in ln]
    assert len(lines) == 1, hlo
    m = re.fullmatch(r"%(opt-barrier\.\d+) = \(f32\[2,3\]\{1,0\}, s64\[4\]\{0\}\) opt-barrier\("
                     r"\(f32\[2,3\]\{1,0\}, s64\[4\]\{0\}\) %(tuple\.\d+)\)", lines[0])
    assert m, lines[0]
    # the operand tuple and both results read back through get-tuple-element
    assert f"%{m.group(2)} = (f32[2,3]{{1,0}}, s64[4]{{0}}) tuple(" in hlo
    assert hlo.count(f"get-tuple-element((f32[2,3]{{1,0}}, s64[4]{{0}}) %{m.group(1)})") == 2
    text = xm.get_stablehlo([xa, xb])
    assert text.count("stablehlo.optimization_barrier") == 1, text
    assert re.search(r'%\d+:2 = "stablehlo.optimization_barrier"', text), text


def test_single_tensor_and_errors():
    x = torch.randn(5).to("xla")
    xm.optimization_barrier_([x])
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([x])
    assert "(f32[5]{0}) opt-barrier((f32[5]{0}) %tuple." in hlo, hlo
    xm.optimization_barrier_([])  # nothing to do
    try:
        xm.optimization_barrier_([x, 3])
    except TypeError as e:
        assert "expects tensors, got int" in str(e)
    else:
        raise AssertionError("no TypeError")


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 6)
        self.fc2 = torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_backward_barrier_gradients_match_cpu():
    torch.manual_seed(0)
    ref = _MLP()
    dev = _MLP()
    dev.load_state_dict(ref.state_dict())
    dev = dev.to("xla")
    apply_backward_optimization_barrier(dev.fc2)
    apply_backward_optimization_barrier(dev.fc1)
    x = torch.randn(4, 8)
    ref(x).pow(2).sum().backward()
    dev(x.to("xla")).pow(2).sum().backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([dev.fc1.weight.grad])
    assert "opt-barrier" in hlo
    for r, d in zip(ref.parameters(), dev.parameters()):
        assert d.grad is not None
        torch.testing.assert_close(d.grad.cpu(), r.grad, rtol=1e-5, atol=1e-6)


def test_backward_barrier_hlo_text_layouts():
    # PyTorch/XLA's test_backward_optimization_barrier: the weight gradient
    # is a transpose's result, which XLA gives the permuted layout {0,1}.
    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(128, 64).to("xla"), torch.nn.Linear(64, 1).to("xla")
    apply_backward_optimization_barrier(fc2)
    y = fc2(torch.relu(fc1(torch.randn(2, 128).to("xla"))))
    y.sum().backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([fc2.weight.grad])
    tup = "(f32[1,64]{0,1}, f32[1]{0}, f32[2,64]{1,0})"
    assert re.search(re.escape(f"%opt-barrier.1 = {tup} opt-barrier({tup} %tuple.") + r"\d+\)",
                     hlo), hlo
    assert "transpose(f32[64,1]{1,0}" in hlo and "f32[1,64]{0,1} transpose(" in hlo


SPMD = """
import json, numpy as np, torch
import torch_xla, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
import torch_xla.debug.metrics as met
xr.use_spmd()
mesh = xs.Mesh(np.arange(4), (4,), ("data",))
torch.manual_seed(0)
a, w = torch.randn(8, 6), torch.randn(6, 5)
xa, xw = a.to("xla"), w.to("xla")
xs.mark_sharding(xa, mesh, ("data", None))
h = xa @ xw
g = torch.relu(h)
xs.mark_sharding(h, mesh, ("data", None))
spec_before = xs.get_sharding_spec(h)
xm.optimization_barrier_([h, g])
spec_after = xs.get_sharding_spec(h)
y = (h * 2 + g).sum(dim=1)
text = xm.get_stablehlo([y])
met.clear_all()
torch_xla.sync()
out = y.cpu()
ref = ((a @ w) * 2 + torch.relu(a @ w)).sum(dim=1)
print("RESULT " + json.dumps(dict(
    diff=float((out - ref).abs().max()),
    partitioned=met.counter_value("SpmdPartitionedExecution") or 0,
    fallback=met.counter_value("SpmdPartitionFallback") or 0,
    barrier=text.count("stablehlo.optimization_barrier"),
    spec_before=spec_before, spec_after=spec_after)))
"""


def test_spmd_partitioned_execution_with_barrier(tmp_path):
    r = run_result_script(tmp_path, "spmd_barrier", SPMD, devices=4)
    assert r["diff"] < 1e-4, r
    assert r["barrier"] == 1, r
    assert r["partitioned"] >= 1 and r["fallback"] == 0, r
    # the annotation stays with the tensor's new value
    assert r["spec_before"] == r["spec_after"] == "{devices=[4,1]0,1,2,3}", r
