"""gelu's backward reading the forward's output (lowering in
python/torchtpu/lowering/elementwise.py): with grad mode on, an exact
(erf) float32 gelu remembers its output y = x * Phi(x) on its input, and
gelu_backward takes Phi(x) as y / x (0.5 where |x| < 1e-20) instead of a
second erf. Against PyTorch CPU over ordinary, tiny, subnormal, large and
non-finite inputs and in a Linear + GELU + Linear stack; which graphs take
the quotient; TORCHTPU_GELU_FROM_OUTPUT=0 keeps the erf."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_xla
from torchtpu import _C
from torchtpu.bridge import inner_of
from torchtpu.lowering.core import UN

DEV = torch_xla.device()

SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 1e-45, -1e-45, 1e-20, -1e-20, 3e-20, -3e-20, 0.5, -0.5,
           -3.0, -5.0, -9.0, -10.0, -20.0, -100.0, 5.0, 20.0, 1e30, -1e30,
           float("inf"), float("-inf"), float("nan")]


def _grad_text(t):
    return _C.graph_dump([inner_of(t.grad)._h])


def _has_erf(text):
    return re.search(r"unary\(%\d+\), i=\{" + str(UN["erf"]) + r"\}", text) is not None


def _gelu_grads(x, g, dev):
    xs = x.detach().to(dev).requires_grad_()
    y = F.gelu(xs)
    y.backward(g.to(dev))
    return xs


@pytest.mark.parametrize("values", ["normal", "special"])
def test_gelu_backward_matches_cpu(values):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen) * 4 if values == "normal" else torch.tensor(SPECIAL)
    g = torch.randn(x.shape, generator=gen)
    want = _gelu_grads(x, g, "cpu").grad
    xs = _gelu_grads(x, g, DEV)
    text = _grad_text(xs)
    assert not _has_erf(text), text
    torch.testing.assert_close(xs.grad.cpu(), want, atol=1e-6, rtol=1e-5, equal_nan=True)


def test_mlp_block_matches_cpu():
    """Linear -> GELU -> Linear, as a transformer's feed-forward block: the
    gelu's input is the first product plus its bias, its output the second
    product's input (kept for that product's weight gradient anyway)."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
    x = torch.randn(40, 32)
    res = []
    for dev in ("cpu", DEV):
        m = block.to(dev)
        for p in m.parameters():
            p.grad = None
        loss = m(x.to(dev)).square().mean()
        loss.backward()
        res.append([loss.detach().cpu()] + [p.grad.cpu() for p in m.parameters()])
        if dev != "cpu":
            assert not _has_erf(_C.graph_dump([inner_of(m[0].weight.grad)._h]))
        block = block.to("cpu")
    for a, b in zip(*res, strict=True):
        torch.testing.assert_close(b, a, atol=2e-6, rtol=2e-5)


def test_only_exact_gelu_under_grad_remembers_its_output():
    """Without grad mode nothing is remembered on the input (inference keeps
    no extra reference to the output); the tanh approximation's backward is
    PyTorch's tanh formula and matches CPU."""
    x = torch.randn(64)
    xt = x.to(DEV)
    with torch.no_grad():
        F.gelu(xt)
    assert getattr(inner_of(xt), "_gelu_out", None) is None
    xs = x.to(DEV).requires_grad_()
    F.gelu(xs, approximate="tanh").sum().backward()
    assert getattr(inner_of(xs), "_gelu_out", None) is None
    want = x.clone().requires_grad_()
    F.gelu(want, approximate="tanh").sum().backward()
    torch.testing.assert_close(xs.grad.cpu(), want.grad, atol=1e-6, rtol=1e-5)
    xe = x.to(DEV).requires_grad_()
    F.gelu(xe)
    assert getattr(inner_of(xe), "_gelu_out", None) is not None


def test_env_off_recomputes_erf():
    code = (
        "import torch, torch_xla, re\n"
        "import torch.nn.functional as F\n"
        "from torchtpu import _C\n"
        "from torchtpu.bridge import inner_of\n"
        "from torchtpu.lowering.core import UN\n"
        "x = torch.randn(64).to(torch_xla.device()).requires_grad_()\n"
        "F.gelu(x).sum().backward()\n"
        "t = _C.graph_dump([inner_of(x.grad)._h])\n"
        "print(bool(re.search(r'unary\\(%\\d+\\), i=\\{' + str(UN['erf']) + '}', t)))\n")
    env = {"TORCHTPU_GELU_FROM_OUTPUT": "0", "PJRT_DEVICE": "CPU"}
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True", out.stdout
