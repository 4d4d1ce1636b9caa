"""The _foreach_* ops on xla (lowering/foreach_ops.py) against PyTorch CPU,
and torch.optim / clip_grad_norm_ taking their foreach path on xla
(torchtpu/optim_foreach.py): same results as CPU, no CPU fallback, one
graph for every step."""
import os
import subprocess
import sys

import pytest
import torch

import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

F = torch


def _lists(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (5,), (2, 3, 2)][:n]
    xs = [torch.randn(s, generator=g) for s in shapes]
    ys = [torch.randn(s, generator=g) for s in shapes]
    ps = [torch.rand(s, generator=g) + 0.5 for s in shapes]
    return xs, ys, ps


def _to(ts):
    return [t.to("xla") for t in ts]


def _fallbacks():
    return [n for n in met.counter_names() if n.startswith("aten::_foreach")
            and met.counter_value(n)]


CASES = {
    "add_scalar": lambda x, y, p: F._foreach_add(x, 2.5),
    "add_list_alpha": lambda x, y, p: F._foreach_add(x, y, alpha=-0.5),
    "add_scalarlist": lambda x, y, p: F._foreach_add(x, [1.0, 2.0, 3.0]),
    "add_tensor": lambda x, y, p: F._foreach_add(x, p[1][0], alpha=2),
    "sub_list": lambda x, y, p: F._foreach_sub(x, y),
    "mul_scalar": lambda x, y, p: F._foreach_mul(x, 0.9),
    "mul_list": lambda x, y, p: F._foreach_mul(x, y),
    "mul_tensor": lambda x, y, p: F._foreach_mul(x, p[1][2]),
    "div_scalarlist": lambda x, y, p: F._foreach_div(x, [2.0, 4.0, 8.0]),
    "div_list": lambda x, y, p: F._foreach_div(x, p),
    "maximum_list": lambda x, y, p: F._foreach_maximum(x, y),
    "maximum_scalar": lambda x, y, p: F._foreach_maximum(x, 0.1),
    "minimum_scalarlist": lambda x, y, p: F._foreach_minimum(x, [0.0, 0.5, -0.5]),
    "clamp_min_list": lambda x, y, p: F._foreach_clamp_min(x, y),
    "clamp_max_scalar": lambda x, y, p: F._foreach_clamp_max(x, 0.2),
    "pow_scalar": lambda x, y, p: F._foreach_pow(p, 2.0),
    "pow_list": lambda x, y, p: F._foreach_pow(p, y),
    "pow_scalar_and_tensor": lambda x, y, p: F._foreach_pow(2.0, x),
    "addcmul_scalar": lambda x, y, p: F._foreach_addcmul(x, y, p, value=0.25),
    "addcmul_scalarlist": lambda x, y, p: F._foreach_addcmul(x, y, y, [0.1, 0.2, 0.3]),
    "addcdiv_scalarlist": lambda x, y, p: F._foreach_addcdiv(x, y, p, [-0.1, 0.2, -0.3]),
    "addcdiv_tensor": lambda x, y, p: F._foreach_addcdiv(x, y, p, torch.tensor([1.0, 2.0, 3.0])),
    "lerp_scalar_small": lambda x, y, p: F._foreach_lerp(x, y, 0.1),
    "lerp_scalar_large": lambda x, y, p: F._foreach_lerp(x, y, 0.9),
    "lerp_scalarlist": lambda x, y, p: F._foreach_lerp(x, y, [0.1, 0.6, 0.3]),
    "lerp_list": lambda x, y, p: F._foreach_lerp(x, y, [t * 0.5 for t in p]),
    "sqrt": lambda x, y, p: F._foreach_sqrt(p),
    "exp": lambda x, y, p: F._foreach_exp(x),
    "neg": lambda x, y, p: F._foreach_neg(x),
    "abs": lambda x, y, p: F._foreach_abs(x),
    "reciprocal": lambda x, y, p: F._foreach_reciprocal(p),
    "sign": lambda x, y, p: F._foreach_sign(x),
    "zero": lambda x, y, p: torch.ops.aten._foreach_zero(x),
    "norm": lambda x, y, p: F._foreach_norm(x),
    "norm_inf": lambda x, y, p: F._foreach_norm(x, float("inf")),
    "max": lambda x, y, p: F._foreach_max(x),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_foreach_matches_cpu(name, clean_metrics):
    x, y, p = _lists()
    ref = CASES[name](x, y, p)
    got = CASES[name](_to(x), _to(y), _to(p))
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.device.type == "xla"
        torch.testing.assert_close(a.cpu(), b, atol=1e-6, rtol=1e-5)
    assert _fallbacks() == []


INPLACE = {
    "mul_": lambda x, y, p: F._foreach_mul_(x, 0.5),
    "add_list_": lambda x, y, p: F._foreach_add_(x, y, alpha=2.0),
    "addcmul_": lambda x, y, p: F._foreach_addcmul_(x, y, y, value=0.1),
    "addcdiv_scalarlist_": lambda x, y, p: F._foreach_addcdiv_(x, y, p, [0.5, -1.0, 2.0]),
    "lerp_": lambda x, y, p: F._foreach_lerp_(x, y, 0.3),
    "sqrt_": lambda x, y, p: F._foreach_sqrt_(p),
    "div_scalarlist_": lambda x, y, p: F._foreach_div_(x, [3.0, 5.0, 7.0]),
    "zero_": lambda x, y, p: F._foreach_zero_(x),
    "copy_": lambda x, y, p: F._foreach_copy_(x, y),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_foreach_inplace_matches_cpu(name, clean_metrics):
    x, y, p = _lists(seed=1)
    dx, dy, dp = _to(x), _to(y), _to(p)
    views = [t.view(-1) for t in dx]  # a view of each written tensor sees the write
    INPLACE[name](x, y, p)
    INPLACE[name](dx, dy, dp)
    for a, b in zip(dx + dp, x + p, strict=True):
        torch.testing.assert_close(a.cpu(), b, atol=1e-6, rtol=1e-5)
    for v, b in zip(views, x, strict=True):
        torch.testing.assert_close(v.cpu(), b.reshape(-1), atol=1e-6, rtol=1e-5)
    assert _fallbacks() == []


def test_foreach_list_length_errors():
    x, y, _ = _lists()
    dx, dy = _to(x), _to(y)
    with pytest.raises(RuntimeError, match="same number of"):
        F._foreach_add(dx, dy[:2])
    with pytest.raises(RuntimeError, match="scalar list"):
        F._foreach_mul(dx, [1.0, 2.0])
    with pytest.raises(RuntimeError, match="scalar list"):
        F._foreach_addcdiv(dx, dy, dy, torch.tensor([1.0, 2.0]))


def test_foreach_mixed_devices_error():
    x, y, _ = _lists()
    with pytest.raises(RuntimeError, match="device"):
        F._foreach_add(_to(x), y)


def test_optimizers_default_to_foreach_on_xla():
    from torch.optim.optimizer import _default_to_fused_or_foreach
    params = list(torch.nn.Linear(3, 2).to("xla").parameters())
    assert _default_to_fused_or_foreach(params, False) == (False, True)
    # CPU keeps PyTorch's choice.
    cpu = list(torch.nn.Linear(3, 2).parameters())
    assert _default_to_fused_or_foreach(cpu, False) == (False, False)


def test_optim_foreach_off_switch():
    code = ("import torch, torch_xla\n"
            "from torch.optim.optimizer import _default_to_fused_or_foreach\n"
            "p = list(torch.nn.Linear(3, 2).to('xla').parameters())\n"
            "print(_default_to_fused_or_foreach(p, False))\n")
    env = dict(os.environ, TORCHTPU_OPTIM_FOREACH="0", PJRT_DEVICE="CPU")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(False, False)"


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                              weight_decay=1e-3),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
}


def _train(device, make_opt, steps, clip=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 3)).to(device)
    opt = make_opt(model.parameters())
    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(steps)]
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if device != "cpu":
            xm.mark_step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_foreach_training_matches_cpu(name, clean_metrics):
    ref = _train("cpu", OPTIMIZERS[name], 5)
    got = _train("xla", OPTIMIZERS[name], 5)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    assert _fallbacks() == []
    assert met.counter_value("aten::_local_scalar_dense") in (None, 0)


def test_foreach_optimizer_step_compiles_once(clean_metrics):
    """Per-step scalars (Adam's bias corrections) are data, not constants:
    the steady-state step graph is compiled once and cached after."""
    _train("xla", OPTIMIZERS["adamw"], 6)
    compiles = met.counter_value("UncachedCompile") or 0
    # Step 1 (no optimizer state yet) and step 2 differ; the rest hit the
    # cache (earlier tests may have compiled all of them already).
    assert compiles <= 3, compiles
    assert (met.counter_value("CachedCompile") or 0) >= 6 - compiles


def test_clip_grad_norm_foreach_matches_cpu(clean_metrics):
    ref = _train("cpu", OPTIMIZERS["sgd_momentum"], 3, clip=0.05)
    got = _train("xla", OPTIMIZERS["sgd_momentum"], 3, clip=0.05)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    assert _fallbacks() == []


def test_explicit_foreach_false_still_loops(clean_metrics):
    ref = _train("cpu", lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False), 3)
    got = _train("xla", lambda p: torch.optim.AdamW(p, lr=1e-2, foreach=False), 3)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)



def test_foreach_inplace_errors_match_cpu():
    for d in ("cpu", "xla"):
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
            F._foreach_add_([torch.arange(3).to(d)], 1.5)
        with pytest.raises(RuntimeError, match=r"doesn't match the broadcast shape \[2, 3\]"):
            F._foreach_add_([torch.ones(3).to(d)], [torch.ones(2, 3).to(d)])
