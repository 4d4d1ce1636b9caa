"""The engine's layer-norm ops (TT_OP_LAYER_NORM / _BWD, src/kernels/
layer_norm.c; lowering in python/torchtpu/lowering/nn_ops.py) against
PyTorch CPU: which gradients are asked for, parameters with and without
gradients, several normalized shapes; which instructions a training step
runs, and TORCHTPU_FUSED_LAYER_NORM=0 keeping the IR primitives."""
import pytest
import torch
import torch.nn.functional as F

import torch_xla
from child import run_json

DEV = torch_xla.device()


@pytest.mark.parametrize("shape,normalized,affine", [
    ((4, 6, 32), (32,), True), ((3, 5, 8), (5, 8), False), ((7, 130), (130,), True),
    ((2, 3, 4, 5), (3, 4, 5), True), ((1, 1), (1,), True)])
@pytest.mark.parametrize("grads", ["all", "params_only", "input_only"])
def test_layer_norm_matches_cpu(shape, normalized, affine, grads):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g) * 3 + 1
    w = torch.rand(normalized, generator=g) + 0.5 if affine else None
    b = torch.randn(normalized, generator=g) if affine else None
    cot = torch.randn(*shape, generator=g)
    results = []
    for dev in ("cpu", DEV):
        xs = x.to(dev).requires_grad_(grads != "params_only")
        ws = w.to(dev).requires_grad_(grads != "input_only") if affine else None
        bs = b.to(dev).requires_grad_(grads != "input_only") if affine else None
        y = F.layer_norm(xs, normalized, ws, bs, 1e-5)
        leaves = [t for t in (xs, ws, bs) if t is not None and t.requires_grad]
        gs = torch.autograd.grad(y, leaves, cot.to(dev)) if leaves else ()
        results.append([y] + list(gs))
    # One element per row: x - mean is 0 here exactly, on CPU a rounding
    # residual that rstd = 1/sqrt(eps) scales to ~2e-5 in grad_weight.
    atol = 1e-4 if x.numel() == 1 else 2e-5
    for a, b_ in zip(*results, strict=True):
        torch.testing.assert_close(b_.cpu(), a, atol=atol, rtol=1e-5)


@pytest.mark.parametrize("grad_mode", [True, False], ids=["packed", "no_grad"])
def test_native_layer_norm_statistics_match_cpu(grad_mode):
    """Output, mean and rstd: one packed instruction with grad mode on, the
    output and the statistics as two under no_grad."""
    x = torch.randn(3, 4, 16) * 2
    w, b = torch.rand(16) + 0.5, torch.randn(16)
    want = torch.ops.aten.native_layer_norm(x, (16,), w, b, 1e-5)
    with torch.set_grad_enabled(grad_mode):
        got = torch.ops.aten.native_layer_norm(x.to(DEV), (16,), w.to(DEV), b.to(DEV), 1e-5)
    for a, g in zip(want, got, strict=True):
        assert g.shape == a.shape and g.dtype == a.dtype
        torch.testing.assert_close(g.cpu(), a, atol=2e-6, rtol=1e-5)


PROFILE_CHILD = r"""
import json, torch, torch_xla
import torch_xla.debug.metrics as met
dev = torch_xla.device()
ln = torch.nn.LayerNorm(32).to(dev)
x = torch.randn(8, 32, device=dev, requires_grad=True)
def ops():
    out = {n: met.metric_data(n)[0] for n in met.metric_names() if n.startswith("ExecuteOp.")}
    met.clear_metrics()
    return out
with torch_xla.step():
    ln(x).square().sum().backward()
torch_xla.sync(wait=True)
train = ops()
with torch.no_grad():
    y = ln(x)
torch_xla.sync(wait=True)
print(json.dumps({"train": train, "infer": ops()}))
"""


def _profiled_ops(**env):
    return run_json(PROFILE_CHILD, TORCHTPU_EXEC_PROFILE="1", **env)


def test_step_runs_the_layer_norm_instructions():
    """A training step: one forward instruction (output and statistics
    packed) and one backward, no other reduction; inference (no_grad):
    the output alone, its own instruction (the statistics are another, dead
    code), no slice of a packed result."""
    ops = _profiled_ops()
    train, infer = ops["train"], ops["infer"]
    assert train.get("ExecuteOp.layer_norm") == 1, train
    assert train.get("ExecuteOp.layer_norm_bwd") == 1, train
    assert "ExecuteOp.fused_reduce" not in train, train
    assert infer.get("ExecuteOp.layer_norm") == 1 and "ExecuteOp.output_copy" in infer, infer
    assert len([k for k in infer if k not in ("ExecuteOp.layer_norm",
                                              "ExecuteOp.output_copy")]) == 0, infer
    off = _profiled_ops(TORCHTPU_FUSED_LAYER_NORM="0")["train"]
    assert "ExecuteOp.layer_norm" not in off and "ExecuteOp.layer_norm_bwd" not in off, off


def test_half_types_keep_the_primitives():
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    y = F.layer_norm(x.to(DEV), (16,))
    torch.testing.assert_close(y.cpu(), F.layer_norm(x, (16,)), atol=2e-2, rtol=2e-2)


PJRT_CHILD = r"""
import json, torch, torch_xla, torch_xla.debug.metrics as met
d = torch_xla.device()
g = torch.Generator().manual_seed(0)
x = torch.randn(3, 4, 16, generator=g) * 2
w, b = torch.rand(16, generator=g) + 0.5, torch.randn(16, generator=g)
want = torch.ops.aten.native_layer_norm(x, (16,), w, b, 1e-5)
err = []
for grad in (True, False):
    with torch.set_grad_enabled(grad):
        got = torch.ops.aten.native_layer_norm(x.to(d), (16,), w.to(d), b.to(d), 1e-5)
    err.append(max(float((a - c.cpu()).abs().max()) for a, c in zip(want, got, strict=True)))
print(json.dumps({"err": err, "pjrt": met.counter_value("PjrtExecute") or 0}))
"""


def test_every_form_through_a_pjrt_plugin():
    """The StableHLO lowering of each forward form (packed, output alone,
    statistics alone) run by XLA's CPU plugin; the backward's runs in
    test_pjrt_engine.py (op table, transformer training)."""
    out = run_json(PJRT_CHILD, TORCHTPU_CPU_BACKEND="pjrt", CPU_NUM_DEVICES="1")
    assert out["pjrt"] >= 2 and max(out["err"]) < 1e-5, out


@pytest.mark.parametrize("which", ["weight", "bias"])
def test_one_affine_parameter(which):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 24, generator=g)
    p = torch.randn(24, generator=g)
    cot = torch.randn(5, 24, generator=g)
    results = []
    for dev in ("cpu", DEV):
        xs = x.to(dev).requires_grad_()
        ps = p.to(dev).requires_grad_()
        kw = {which: ps}
        y = F.layer_norm(xs, (24,), **kw)
        results.append([y] + list(torch.autograd.grad(y, [xs, ps], cot.to(dev))))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=2e-5, rtol=1e-5)
