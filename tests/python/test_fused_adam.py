"""Adam and AdamW's update recorded straight on engine handles
(torchtpu/optim_foreach.py, _adam_step): the same results as PyTorch's
foreach path bit for bit (TORCHTPU_FUSED_ADAM=0 runs that path), PyTorch
CPU's within rounding, one functional update per tensor, and the foreach
path untouched for what the fast path does not take (amsgrad, maximize,
bfloat16, a tensor lr)."""
import os
import subprocess
import sys

import pytest
import torch

import torch_xla
from torchtpu import optim_foreach

_CHILD = r"""
import sys, torch, torch_xla
kind, wd, steps = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
model.to("xla")
opt = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind](
    model.parameters(), lr=1e-2, weight_decay=wd)
g = torch.Generator().manual_seed(1)
for i in range(steps):
    x = torch.randn(8, 16, generator=g).to("xla")
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    torch_xla.sync()
state = [{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in s.items()}
         for s in opt.state.values()]
torch.save({"params": [p.detach().cpu() for p in model.parameters()], "state": state},
           sys.argv[1])
"""


def _run(tmp_path, fused, kind, wd, steps=4):
    path = tmp_path / f"{kind}-{wd}-{fused}.pt"
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1", TORCHTPU_FUSED_ADAM=fused)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(path), kind, str(wd), str(steps)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return torch.load(path)


@pytest.mark.parametrize("kind,wd", [("adamw", 0.01), ("adamw", 0.0), ("adam", 0.0),
                                     ("adam", 0.1)])
def test_fused_equals_foreach_bit_for_bit(tmp_path, kind, wd):
    off, on = _run(tmp_path, "0", kind, wd), _run(tmp_path, "1", kind, wd)
    for a, b in zip(off["params"], on["params"], strict=True):
        assert torch.equal(a, b)
    for sa, sb in zip(off["state"], on["state"], strict=True):
        assert sa.keys() == sb.keys()
        for k in sa:
            assert torch.equal(torch.as_tensor(sa[k]), torch.as_tensor(sb[k])), k


def _train(device, opt_fn, steps=3, dtype=torch.float32):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(dtype).to(device)
    opt = opt_fn(model.parameters())
    g = torch.Generator().manual_seed(2)
    for _ in range(steps):
        x = torch.randn(16, 8, generator=g).to(dtype).to(device)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        if device != "cpu":
            torch_xla.sync()
    return [p.detach().cpu() for p in model.parameters()], opt


def _fused_calls(monkeypatch):
    calls = []
    real = optim_foreach._adam_step
    monkeypatch.setattr(optim_foreach, "_adam_step",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_matches_pytorch_cpu_and_takes_the_fast_path(monkeypatch):
    calls = _fused_calls(monkeypatch)
    fn = lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05)  # noqa: E731
    got, opt = _train("xla", fn)
    ref, _ = _train("cpu", fn)
    assert len(calls) == 3
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    steps = [s["step"] for s in opt.state.values()]
    assert all(s.device.type == "cpu" and s.item() == 3 for s in steps)


@pytest.mark.parametrize("case", ["amsgrad", "maximize", "bfloat16", "tensor_lr"])
def test_other_configurations_take_pytorchs_path(monkeypatch, case):
    calls = _fused_calls(monkeypatch)
    kw = {"amsgrad": {"amsgrad": True}, "maximize": {"maximize": True}}.get(case, {})
    dtype = torch.bfloat16 if case == "bfloat16" else torch.float32
    if case == "tensor_lr":
        fn = lambda ps: torch.optim.Adam(ps, lr=torch.tensor(1e-2), foreach=True)  # noqa: E731
    else:
        fn = lambda ps: torch.optim.Adam(ps, lr=1e-2, **kw)  # noqa: E731
    try:
        got, _ = _train("xla", fn, dtype=dtype)
    except (RuntimeError, ValueError) as e:  # a tensor lr without capturable: PyTorch's error
        assert case == "tensor_lr", e
        assert not calls
        return
    ref, _ = _train("cpu", fn, dtype=dtype)
    assert not calls, case
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-6)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_records_no_per_tensor_dispatch():
    """The update of every parameter reaches the lowering table only
    through the engine's functional updates (no aten op per tensor)."""
    from torchtpu import bridge
    seen = []
    inner = bridge._dispatch_fn[0]
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)).to("xla")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 8).to("xla")).sum().backward()

    def counting(func, args, kwargs):
        seen.append(str(func))
        return inner(func, args, kwargs)

    bridge._dispatch_fn[0] = counting
    try:
        opt.step()
    finally:
        bridge._dispatch_fn[0] = inner
    torch_xla.sync()
    ops = {s for s in seen if "_propagate_xla_data" not in s}
    assert not any(s.startswith("aten._foreach") for s in ops), ops
