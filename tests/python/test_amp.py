"""Automatic mixed precision on xla: torch.autocast('xla') / torch_xla.amp
against PyTorch/XLA's cast policy and CPU autocast, GradScaler, the
sync-free optimizers, and XLA_USE_BF16 / XLA_DOWNCAST_BF16."""
import os
import subprocess
import sys

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.amp import GradScaler, autocast, syncfree


def _cpu_ops():
    """Ops that ran on the CPU fallback, value reads aside: .item() is
    listed as aten::_local_scalar_dense, as PyTorch/XLA lists it."""
    return [op for op in met.executed_fallback_ops() if op != "aten::_local_scalar_dense"]


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_policy_dtypes(dev):
    x = torch.randn(4, 8, device=dev)
    w = torch.randn(8, 8, device=dev)
    with torch.autocast("xla", dtype=torch.bfloat16):
        assert torch.mm(x, w).dtype == torch.bfloat16               # lower precision
        assert torch.nn.functional.linear(x, w).dtype == torch.bfloat16
        assert torch.relu(x).dtype == torch.bfloat16
        assert torch.einsum("ij,jk->ik", x, w).dtype == torch.bfloat16
        b = x.bfloat16()
        assert torch.softmax(b, 1).dtype == torch.float32           # fp32
        assert torch.log_softmax(b, 1).dtype == torch.float32
        assert torch.prod(b).dtype == torch.float32
        assert b.pow(2).dtype == torch.float32
        assert torch.cat([x, b]).dtype == torch.float32             # promote
        assert torch.cat([b, b]).dtype == torch.bfloat16
        assert (x + 1).dtype == torch.float32                       # unlisted
        assert torch.mm(x.double(), w.double()).dtype == torch.float64  # not eligible
        assert torch.add(b, b).dtype == torch.bfloat16
    # outside the region nothing is cast
    assert torch.mm(x, w).dtype == torch.float32


def test_float16_and_disabled(dev):
    x = torch.randn(4, 8, device=dev)
    with torch_xla.amp.autocast(dev, dtype=torch.float16):
        assert torch.mm(x, x.t()).dtype == torch.float16
    with torch_xla.amp.autocast(dev, enabled=False):
        assert torch.mm(x, x.t()).dtype == torch.float32
    with pytest.warns(UserWarning, match="not supported"):
        ctx = torch_xla.amp.autocast(dev, dtype=torch.float64)
    with ctx:
        assert torch.mm(x, x.t()).dtype == torch.float32
    with pytest.raises(AssertionError):
        torch_xla.amp.autocast("cpu")


def _train(device, steps=4):
    model = _mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1)
    x = torch.randn(32, 8).to(device)
    y = torch.randint(0, 4, (32,)).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast(device.type if isinstance(device, torch.device) else device,
                            dtype=torch.bfloat16):
            out = model(x)
            assert out.dtype == torch.bfloat16
            loss = torch.nn.functional.cross_entropy(out, y)
            assert loss.dtype == torch.float32
        loss.backward()
        opt.step()
        if device != "cpu":
            torch_xla.sync()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_training_matches_cpu_autocast(dev):
    ref_losses, ref_params = _train("cpu")
    losses, params = _train(dev)
    assert losses[-1] < losses[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=2e-2, rtol=2e-2)
    for a, b in zip(params, ref_params):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)


def test_autocast_graph_converts(dev):
    data = torch.randn(16, 10).to(torch.bfloat16).to(dev)
    with torch.autocast("xla"):
        out = torch.nn.Softmax(dim=1)(data)
        hlo = torch_xla._XLAC._get_xla_tensors_hlo([out])
    assert out.dtype == torch.float32
    assert "f32[16,10]{1,0} convert(bf16[16,10]{1,0}" in hlo
    assert "exponential(f32[16,10]" in hlo


def test_grad_scaler_skips_inf_step_on_device(dev, clean_metrics):
    model = _mlp().to(dev)
    opt = syncfree.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = GradScaler(init_scale=1024.0, growth_interval=2)
    x = torch.randn(8, 8).to(dev)
    y = torch.randint(0, 4, (8,)).to(dev)
    scales, firsts = [], []
    for i in range(4):
        opt.zero_grad()
        with autocast(dev, dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if i == 2:
            model[0].weight.grad.mul_(float("inf"))
        before = model[0].weight.detach().clone()
        scaler.step(opt)
        scaler.update()
        torch_xla.sync()
        scales.append(scaler.get_scale())
        firsts.append(torch.equal(before.cpu(), model[0].weight.detach().cpu()))
    # grows after 2 good steps, halves on the inf step (which resets the
    # growth count); the inf step left the weights as they were
    assert scales == [1024.0, 2048.0, 1024.0, 1024.0]
    assert firsts == [False, False, True, False]
    assert _cpu_ops() == []  # the scaler's ops ran on the device


@pytest.mark.parametrize("cls,ref,kw", [
    (syncfree.SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.5, "weight_decay": 0.1,
                                     "nesterov": True}),
    (syncfree.SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.5, "dampening": 0.1}),
    (syncfree.Adam, torch.optim.Adam, {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
    (syncfree.AdamW, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}),
])
def test_syncfree_matches_reference_skipping_inf_steps(dev, cls, ref, kw):
    a, b = _mlp().to(dev), _mlp().to(dev)
    oa, ob = cls(a.parameters(), **kw), ref(b.parameters(), **kw)
    x = torch.randn(8, 8).to(dev)
    y = torch.randint(0, 4, (8,)).to(dev)
    for i in range(5):
        for m, o in ((a, oa), (b, ob)):
            o.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
        skip = i % 2 == 0
        oa.step(found_inf=torch.tensor(1.0 if skip else 0.0, device=dev))
        if not skip:
            ob.step()
        torch_xla.sync()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="scalar"):
        oa.step(found_inf=torch.zeros(2, device=dev))


_BF16_ENV_CHILD = r"""
import torch, torch_xla
dev = torch_xla.device()
torch.manual_seed(0)
w, x = torch.randn(16, 8), torch.randn(5, 16)
d = torch.tensor([1.0, 2.0], dtype=torch.float64)
got = (x.to(dev) @ w.to(dev)).tanh()
dd = d.to(dev) * 3
text = torch_xla._XLAC._get_xla_tensors_text([got, dd])
host = got.cpu()
print(repr((str(got.dtype), str(host.dtype), str(dd.dtype), str(dd.cpu().dtype))))
print(repr(text))
ref16 = (x.bfloat16() @ w.bfloat16()).tanh().float()
print(repr(((host - ref16).abs().max().item(), (host - (x @ w).tanh()).abs().max().item())))
"""


@pytest.mark.parametrize("var", ["XLA_USE_BF16", "XLA_DOWNCAST_BF16"])
def test_bf16_env_switches_store_floats_narrower(var):
    # Read at the first xla tensor (not at import), as PyTorch/XLA reads
    # them; PyTorch keeps seeing float32 (float64 for DOWNCAST's float32).
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env[var] = "1"
    r = subprocess.run([sys.executable, "-c", _BF16_ENV_CHILD], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith(f"{var} will be deprecated after the 2.6 release")
    dtypes, text, (err16, err32) = (eval(v) for v in lines[1:4])
    assert "bf16[5,8]{1,0}" in text and "f32[5,8]{1,0}" not in text
    if var == "XLA_USE_BF16":  # float64 is bfloat16 too
        assert dtypes == ("torch.float32", "torch.float32", "torch.float32", "torch.float32")
        assert "bf16[2]{0}" in text
    else:  # float64 is float32 on the device, float64 to PyTorch
        assert dtypes == ("torch.float32", "torch.float32", "torch.float64", "torch.float64")
        assert "f32[2]{0}" in text
    # The values are bfloat16 computations, not float32 ones.
    assert err16 < 2e-2 and err32 > 1e-4


def test_bf16_env_switch_off_keeps_float32():
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")}
    env["PJRT_DEVICE"] = "CPU"
    r = subprocess.run([sys.executable, "-c", _BF16_ENV_CHILD], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert "deprecated" not in r.stdout
    assert "f32[5,8]{1,0}" in eval(lines[1]) and eval(lines[2])[1] < 1e-5


def test_grad_scaler_with_plain_optimizer_reads_found_inf(dev):
    model = _mlp().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=64.0)
    x = torch.randn(8, 8).to(dev)
    y = torch.randint(0, 4, (8,)).to(dev)
    changed = []
    for i in range(2):
        opt.zero_grad()
        with autocast(dev, dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if i == 0:
            model[2].bias.grad.fill_(float("nan"))
        before = model[2].bias.detach().cpu()
        scaler.step(opt)
        scaler.update()
        changed.append(not torch.equal(before, model[2].bias.detach().cpu()))
    assert changed == [False, True]
    assert scaler.get_scale() == 32.0
