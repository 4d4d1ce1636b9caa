"""Convolution epilogues (src/runtime/executable.c): a conv2d whose only
reader is a fused elementwise instruction (eval-mode batch norm, an
activation, a residual add) computes it over each plane or image as it
stores it. Results must be PyTorch's at tier 0 and tier 1, on every
forward path of the convolution (phase planes, chunked 1x1, batched small
planes, depthwise, groups, strides, bf16), written to an output slot
or in place, and must not change when the epilogue is off."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.debug.metrics as met
from torchtpu import _C


def _bn(y, c, g):
    mean = torch.randn(c, generator=g)
    var = torch.rand(c, generator=g) + 0.5
    w = torch.randn(c, generator=g)
    b = torch.randn(c, generator=g)
    return mean, var, w, b


def _case(name):
    """(fn, args) with fn(x, wt, mean, var, bw, bb, extra) -> tensor(s)."""
    g = torch.Generator().manual_seed(7)
    cfg = {
        # name: (N, C, H, O, k, stride, pad, groups, dtype)
        "3x3": (2, 8, 12, 16, 3, 1, 1, 1, torch.float32),
        "3x3_s2": (2, 8, 13, 16, 3, 2, 1, 1, torch.float32),
        "1x1_chunked": (2, 16, 64, 96, 1, 1, 0, 1, torch.float32),
        "small_planes": (8, 32, 7, 32, 3, 1, 1, 1, torch.float32),
        "depthwise": (2, 12, 15, 12, 3, 1, 1, 12, torch.float32),
        "groups": (2, 8, 10, 12, 3, 1, 1, 2, torch.float32),
        "f64": (2, 4, 9, 6, 3, 1, 1, 1, torch.float64),
        "bf16": (2, 8, 12, 16, 3, 1, 1, 1, torch.bfloat16),
    }[name]
    n, c, h, o, k, s, p, groups, dt = cfg
    x = torch.randn(n, c, h, h, generator=g).to(dt)
    wt = (torch.randn(o, c // groups, k, k, generator=g) * 0.3).to(dt)
    mean, var, bw, bb = (t.to(dt) for t in _bn(None, o, g))
    return (x, wt, mean, var, bw, bb), dict(stride=s, padding=p, groups=groups)


def conv_bn(conv_kw, act):
    def fn(x, wt, mean, var, bw, bb):
        y = F.conv2d(x, wt, **conv_kw)
        y = F.batch_norm(y, mean, var, bw, bb, training=False, eps=1e-5)
        return act(y)
    return fn


def _run(fn, args, repeats=3):
    """Tier 0 on the first run, tier 1 once compiled; both results. Every
    run computes all of fn's results in one graph."""
    dev = [a.to("xla") for a in args]

    def once():
        out = fn(*dev)
        torch_xla.sync(wait=True)
        return [t.cpu() for t in out] if isinstance(out, tuple) else out.cpu()

    first = once()
    for _ in range(repeats):
        once()
    _C.tier1_wait()
    return first, once()


def _close(got, ref, dt):
    tol = {torch.float32: 1e-4, torch.float64: 1e-10, torch.bfloat16: 5e-2}[dt]
    torch.testing.assert_close(got.float(), ref.float(), atol=tol * 10, rtol=tol)


@pytest.mark.parametrize("name", ["3x3", "3x3_s2", "1x1_chunked", "small_planes",
                                  "depthwise", "groups", "f64", "bf16"])
def test_conv_bn_act_matches_pytorch(name):
    args, kw = _case(name)
    fn = conv_bn(kw, lambda y: F.hardtanh(y, 0.0, 6.0))
    ref = fn(*args)
    met.clear_counters()
    first, last = _run(fn, args)
    # f64 ops are never fused (fuse_elementwise.c), so there is no epilogue
    # to take; the kernel's f64 path is covered in tests/c/test_kernels_nn.c.
    fused = met.counter_value("ConvEpilogueFused") or 0
    assert fused == 0 if name == "f64" else fused >= 2, (name, fused)
    _close(first, ref, args[0].dtype)
    _close(last, ref, args[0].dtype)


def test_in_place_epilogue_feeding_more_work():
    """The epilogue's result is an intermediate: it takes over the
    convolution's buffer; the next convolution reads it."""
    args, kw = _case("3x3")
    g = torch.Generator().manual_seed(3)
    w2 = torch.randn(4, 16, 3, 3, generator=g) * 0.2

    def fn(x, wt, mean, var, bw, bb, w2):
        y = F.relu(F.batch_norm(F.conv2d(x, wt, **kw), mean, var, bw, bb, False))
        return F.conv2d(y, w2, padding=1).sum(dim=(2, 3))

    ref = fn(*args, w2)
    met.clear_counters()
    first, last = _run(fn, (*args, w2))
    assert (met.counter_value("ConvEpilogueFused") or 0) >= 2
    _close(first, ref, torch.float32)
    _close(last, ref, torch.float32)


def test_residual_and_two_convs_into_one_epilogue():
    """A ResNet downsample block: bn(conv_a) + bn(conv_b), relu. Only the
    later convolution can run the add (the earlier one's would read a
    value not computed yet)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 8, 14, 14, generator=g)
    wa = torch.randn(16, 8, 3, 3, generator=g) * 0.2
    wb = torch.randn(16, 8, 1, 1, generator=g) * 0.2
    s = torch.rand(16, generator=g) + 0.5

    def fn(x, wa, wb, s):
        a = F.conv2d(x, wa, stride=2, padding=1) * s.view(16, 1, 1)
        b = F.conv2d(x, wb, stride=2) - s.view(16, 1, 1)
        return F.relu(a + b)

    ref = fn(x, wa, wb, s)
    met.clear_counters()
    first, last = _run(fn, (x, wa, wb, s))
    assert (met.counter_value("ConvEpilogueFused") or 0) >= 2
    _close(first, ref, torch.float32)
    _close(last, ref, torch.float32)


def test_conv_read_twice_is_not_fused():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(1, 4, 8, 8, generator=g)
    w = torch.randn(4, 4, 3, 3, generator=g)

    def fn(x, w):
        y = F.conv2d(x, w, padding=1)
        return F.relu(y) + y.sum()

    ref = fn(x, w)
    met.clear_counters()
    first, last = _run(fn, (x, w))
    assert (met.counter_value("ConvEpilogueFused") or 0) == 0
    _close(first, ref, torch.float32)
    _close(last, ref, torch.float32)


# An epilogue reading a reshape the buffer plan copies (so it is not ready
# when the convolution runs) falls back to running at its own place, in
# place: tests/c/test_passes.c (test_conv_epilogue_plans) builds that
# schedule, which traced programs do not reliably produce.


_BITS_CHILD = r"""
import sys, torch, torch.nn.functional as F, torch_xla
from torchtpu import _C
g = torch.Generator().manual_seed(1)
x = torch.randn(4, 16, 28, 28, generator=g)
w = torch.randn(24, 16, 3, 3, generator=g) * 0.2
m, v = torch.randn(24, generator=g), torch.rand(24, generator=g) + 0.5
a, b = torch.randn(24, generator=g), torch.randn(24, generator=g)
args = [t.to("xla") for t in (x, w, m, v, a, b)]
def fn(x, w, m, v, a, b):
    return F.hardswish(F.batch_norm(F.conv2d(x, w, padding=1), m, v, a, b, False))
outs = []
for i in range(4):
    outs.append(fn(*args).cpu())
    _C.tier1_wait()
torch.save(outs, sys.argv[1])
"""


def test_epilogue_results_equal_unfused_bit_for_bit(tmp_path):
    res = {}
    for flag in ("0", "1"):
        path = tmp_path / f"out{flag}.pt"
        env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1",
                   TORCHTPU_CONV_EPILOGUE=flag)
        r = subprocess.run([sys.executable, "-c", _BITS_CHILD, str(path)], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        res[flag] = torch.load(path)
    for off, on in zip(res["0"], res["1"], strict=True):
        assert torch.equal(off, on)
