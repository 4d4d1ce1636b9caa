"""log_softmax keeping its probabilities (TT_OP_SOFTMAX's packed form,
tt_kernel_log_softmax_probs; lowering in python/torchtpu/lowering/
nn_ops.py): with grad mode on, a float32 log_softmax along the last dim is
one packed [log_softmax | softmax] result, and the cross-entropy backward
reads the softmax half instead of taking exp() of the log-probabilities.
Against PyTorch CPU: losses, gradients, the log-probabilities themselves
read as outputs, other consumers of them, the bias folded into the
softmax, PJRT's StableHLO; which graphs get the packed form."""
import re

import pytest
import torch
import torch.nn.functional as F

import torch_xla
from torchtpu import _C, pjrt
from torchtpu.bridge import inner_of
from child import run_json

DEV = torch_xla.device()


def _text(*tensors):
    return _C.graph_dump([inner_of(t)._h for t in tensors])


def _packed(text):
    return re.search(r"float32\[2,[0-9,]+\] softmax\(", text) is not None


@pytest.mark.parametrize("shape", [(16, 11), (64, 1000), (3, 5, 37)])
@pytest.mark.parametrize("bias", [False, True], ids=["logits", "linear"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_matches_cpu(shape, bias, reduction):
    g = torch.Generator().manual_seed(0)
    c = shape[-1]
    x = torch.randn(*shape, generator=g) * 3
    b = torch.randn(c, generator=g)
    target = torch.randint(0, c, shape[:-1], generator=g).reshape(-1)
    target[1] = -100
    res = []
    for dev in ("cpu", DEV):
        xs, bs = x.detach().to(dev).requires_grad_(), b.detach().to(dev).requires_grad_()
        logits = (xs + bs if bias else xs).reshape(-1, c)
        loss = F.cross_entropy(logits, target.to(dev), reduction=reduction)
        loss.backward()
        res.append((loss, xs.grad, bs.grad if bias else None))
        if dev != "cpu":
            text = _text(xs.grad)
            assert _packed(text), text
            # The backward reads the kept softmax: no exp over [N, C].
            assert not re.search(r"float32\[\d+,\d+\] unary\(", text), text
    for a, b_ in zip(*res, strict=True):
        if a is not None:
            torch.testing.assert_close(b_.cpu(), a, atol=2e-6, rtol=2e-5)


def test_log_probabilities_read_directly_match_cpu():
    """The log-probabilities as outputs, their exp, and a loss that takes the
    general softmax backward (KL divergence) all read the packed result's
    first half."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 50, generator=g)
    ref_t = torch.softmax(torch.randn(8, 50, generator=g), 1)
    res = []
    for dev in ("cpu", DEV):
        xs = x.detach().to(dev).requires_grad_()
        y = torch.log_softmax(xs, -1)
        kl = F.kl_div(y, ref_t.to(dev), reduction="batchmean")
        (gx,) = torch.autograd.grad(kl, xs)
        res.append((y, y.exp(), kl, gx))
        if dev != "cpu":
            assert _packed(_text(y)), _text(y)
    for a, b in zip(*res, strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=2e-6, rtol=2e-5)


@pytest.mark.parametrize("case", ["no_grad", "dim0", "float64", "softmax", "env_off"])
def test_other_softmaxes_keep_the_plain_form(case):
    x = torch.randn(6, 9, dtype=torch.float64 if case == "float64" else torch.float32)
    xs = x.to(DEV)
    if case == "no_grad":
        with torch.no_grad():
            y, want = torch.log_softmax(xs, 1), torch.log_softmax(x, 1)
    elif case == "dim0":
        y, want = torch.log_softmax(xs, 0), torch.log_softmax(x, 0)
    elif case == "softmax":
        y, want = torch.softmax(xs, 1), torch.softmax(x, 1)
    elif case == "env_off":
        out = run_json(ENV_CHILD, TORCHTPU_LOG_SOFTMAX_PROBS="0")
        assert not out["packed"] and out["err"] < 1e-6, out
        return
    else:
        y, want = torch.log_softmax(xs, 1), torch.log_softmax(x, 1)
    assert not _packed(_text(y)), _text(y)
    torch.testing.assert_close(y.cpu(), want, atol=1e-6, rtol=1e-6)


ENV_CHILD = r"""
import json, re, torch, torch_xla
import torch.nn.functional as F
from torchtpu import _C
from torchtpu.bridge import inner_of
x = torch.randn(10, 7)
t = torch.randint(0, 7, (10,))
xs = x.to("xla").requires_grad_()
F.cross_entropy(xs, t.to("xla")).backward()
text = _C.graph_dump([inner_of(xs.grad)._h])
xc = x.clone().requires_grad_()
F.cross_entropy(xc, t).backward()
print(json.dumps({"packed": re.search(r"\[2,[0-9,]+\] softmax", text) is not None,
                  "err": (xs.grad.cpu() - xc.grad).abs().max().item()}))
"""


TRAIN_CHILD = r"""
import json, torch, torch_xla
import torch.nn.functional as F
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 40))
ref = [p.detach().clone() for p in model.parameters()]
x, t = torch.randn(24, 16), torch.randint(0, 40, (24,))
def train(dev, params):
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 40)).to(dev)
    with torch.no_grad():
        for p, v in zip(m.parameters(), params):
            p.copy_(v)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    losses = []
    for _ in range(4):
        opt.zero_grad()
        loss = F.cross_entropy(m(x.to(dev)), t.to(dev))
        loss.backward()
        opt.step()
        if dev != "cpu":
            torch_xla.sync()
        losses.append(loss.item())
    return losses
import torch_xla.debug.metrics as met
out = {"cpu": train("cpu", ref), "xla": train("xla", ref)}
out["pjrt_execute"] = met.counter_value("PjrtExecute") or 0
print(json.dumps(out))
"""


@pytest.mark.parametrize("env", [{"TORCHTPU_TIER": "1"}, {"TORCHTPU_TIER": "0"},
                                 {"TORCHTPU_CPU_BACKEND": "pjrt", "CPU_NUM_DEVICES": "1"}],
                         ids=["tier1", "tier0", "pjrt"])
def test_training_losses_match_cpu(env):
    """A classifier trained on xla: both tiers, and XLA's CPU plugin (the
    packed form through StableHLO; requirements.txt installs it)."""
    pjrt_run = "TORCHTPU_CPU_BACKEND" in env
    if pjrt_run and pjrt.find_cpu_plugin() is None:
        pytest.skip("no XLA CPU PJRT plugin installed")
    out = run_json(TRAIN_CHILD, **env)
    assert (out["pjrt_execute"] > 0) == pjrt_run, out
    torch.testing.assert_close(torch.tensor(out["xla"]), torch.tensor(out["cpu"]),
                               atol=1e-5, rtol=1e-5)
