"""Large f32 GEMMs run through MKL's sgemm inside PyTorch's own
libtorch_cpu.so when it exports one (docs/kernels.md); TORCHTPU_BLAS=own
keeps them on the engine's micro-kernels. Both give PyTorch's results for
every operand layout the lowering produces."""
import os
import subprocess
import sys

import pytest
import torch

import torch_xla
from torchtpu import _C, config

DEV = None


def dev():
    global DEV
    if DEV is None:
        DEV = torch_xla.device()
    return DEV


def products():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(197, 96, generator=g)
    w = torch.randn(160, 96, generator=g)
    b = torch.randn(160, generator=g)
    yield "x @ w.T", (lambda a, w, b: a @ w.T), (a, w, b)
    yield "linear", (lambda a, w, b: torch.nn.functional.linear(a, w, b)), (a, w, b)
    yield "a.T @ w.T (transposed A)", (lambda a, w, b: a.T.contiguous().T @ w.T), (a, w, b)
    yield "x @ w (plain B)", (lambda a, w, b: a @ w.T.contiguous()), (a, w, b)
    yield "grad-like a.T @ x", (lambda a, w, b: a.T @ a), (a, w, b)
    # batched: few problems (each split over the threads) and many (one each)
    q = torch.randn(3, 130, 64, generator=g)
    k = torch.randn(3, 140, 64, generator=g)
    yield "bmm few", (lambda q, k, b: q @ k.transpose(1, 2)), (q, k, b)
    q8 = torch.randn(12, 128, 64, generator=g)
    k8 = torch.randn(12, 128, 64, generator=g)
    yield "bmm many", (lambda q, k, b: torch.softmax(q @ k.transpose(1, 2), -1) @ k), (q8, k8, b)


def _mkl_calls():
    # plain or on a packed B; how many pieces a product is split into
    # depends on the threads free when it runs
    return _C.blas_info()[1] + _C.blas_packed_info()[2]


def run_all(calls=None):
    out = {}
    for name, fn, args in products():
        ref = fn(*args)
        c0 = _mkl_calls()
        got = fn(*[t.to(dev()) for t in args]).cpu()
        if calls is not None:
            calls[name] = _mkl_calls() - c0
        out[name] = ((got - ref).abs().max() / (ref.abs().max() + 1e-30)).item()
    return out


@pytest.fixture
def restore_blas():
    # The runtime installs the default choice when it starts: start it
    # first, so the choice a test installs is the one its products meet.
    dev()
    yield
    config.install_blas()


@pytest.mark.parametrize("choice", ["mkl", "own"])
def test_products_match_pytorch(choice, restore_blas):
    active = config.install_blas(choice)
    if choice == "mkl" and not active:
        pytest.fail("this torch build exports no MKL sgemm_ in libtorch_cpu.so")
    calls = {}
    errors = run_all(calls)
    for name, err in errors.items():
        assert err < 1e-5, (choice, name, err)
    if choice == "mkl":
        # the [197, 96] x [96, 160] products are large enough for MKL
        assert _C.blas_info()[0]
        assert all(calls[name] >= 1 for name in list(calls)[:4]), calls
    else:
        assert not _C.blas_info()[0] and sum(calls.values()) == 0, calls


def test_small_products_stay_on_own_kernels(restore_blas):
    assert config.install_blas("mkl")
    calls0 = _C.blas_info()[1]
    a, w = torch.randn(16, 32), torch.randn(24, 32)
    got = (a.to(dev()) @ w.to(dev()).T).cpu()
    assert torch.allclose(got, a @ w.T, atol=1e-5)
    assert _C.blas_info()[1] == calls0  # 2*16*24*32 flops: below the threshold


def test_bf16_products_stay_on_own_kernels(restore_blas):
    assert config.install_blas("mkl")
    calls0 = _C.blas_info()[1]
    a, w = torch.randn(200, 128).bfloat16(), torch.randn(256, 128).bfloat16()
    got = (a.to(dev()) @ w.to(dev()).T).cpu().float()
    ref = (a.float() @ w.float().T)
    assert ((got - ref).abs().max() / ref.abs().max()).item() < 1e-2
    assert _C.blas_info()[1] == calls0


def test_env_choice_and_bad_value():
    with pytest.raises(ValueError, match="TORCHTPU_BLAS"):
        config.install_blas("openblas")
    code = ("import torch, torch_xla; from torchtpu import _C; torch_xla.device(); "
            "a = torch.randn(200, 300); (a.to('xla') @ a.to('xla').T).cpu(); "
            "print(_C.blas_info())")
    env = dict(os.environ, PJRT_DEVICE="CPU", TORCHTPU_BLAS="own")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "(False, 0)"


@pytest.mark.parametrize("choice", ["mkl", "own"])
def test_pointwise_conv_is_a_plain_product(choice, restore_blas):
    """A 1x1/1 convolution's B is the f32 input itself: MKL takes it, and
    both libraries give PyTorch's result (strided and padded 1x1 convs keep
    the implicit-im2col kernel)."""
    config.install_blas(choice)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 64, 28, 28, generator=g)
    w = torch.randn(128, 64, 1, 1, generator=g)
    calls0 = _C.blas_info()[1]
    for kw in ({}, {"stride": 2}, {"padding": 1}):
        ref = torch.nn.functional.conv2d(x, w, **kw)
        got = torch.nn.functional.conv2d(x.to(dev()), w.to(dev()), **kw).cpu()
        assert ((got - ref).abs().max() / ref.abs().max()).item() < 1e-5, kw
    calls = _C.blas_info()[1] - calls0
    assert (calls >= 2) if choice == "mkl" else (calls == 0), calls  # 1x1/1, per image


# ---- packed weights (blas_ext.c) --------------------------------------------
# A graph input read as a GEMM's B (a Linear's weight) keeps MKL's packed
# layout from its second use on; its results are the plain sgemm's bit for
# bit, and the copy goes with the weight's buffer.

def _linear_runs(m, k, n, runs=4, seed=2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    lin = torch.nn.Linear(k, n)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) * 0.05)
    ref = lin(x).detach()
    lx = torch.nn.Linear(k, n).to(dev())
    with torch.no_grad():
        lx.weight.copy_(lin.weight.to(dev()))
        lx.bias.copy_(lin.bias.to(dev()))
        xd = x.to(dev())
        torch_xla.sync()
        outs = [lx(xd).cpu() for _ in range(runs)]
    return ref, outs, lx


@pytest.mark.parametrize("m", [128, 197])  # 197: row pieces of unequal size
def test_packed_weights_equal_plain_sgemm(m, restore_blas):
    assert config.install_blas("mkl")
    e0, _, c0 = _C.blas_packed_info()
    ref, outs, lx = _linear_runs(m, 256, 384)
    e1, b1, c1 = _C.blas_packed_info()
    assert e1 > e0 and b1 > 0 and c1 > c0, (e0, e1, c0, c1)
    assert torch.allclose(outs[0], ref, atol=1e-4)
    for o in outs[1:]:  # packed from the second run on
        assert torch.equal(o, outs[0])
    del lx
    import gc
    gc.collect()
    assert _C.blas_packed_info()[0] < e1  # the weight's buffer went, so did its copy


def test_training_weights_are_never_packed(restore_blas):
    """Weights that change every step are new buffers each time: seen once,
    never packed."""
    assert config.install_blas("mkl")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 384), torch.nn.ReLU(),
                                torch.nn.Linear(384, 128)).to(dev())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    e0, _, c0 = _C.blas_packed_info()
    for _ in range(4):
        # a new batch each step, as in training (a batch fed twice is a
        # graph input seen twice, and may be packed)
        x = torch.randn(128, 256).to(dev())
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        torch_xla.sync(wait=True)
    e1, _, c1 = _C.blas_packed_info()
    assert (e1, c1) == (e0, c0)


def test_packed_weights_limit(restore_blas, monkeypatch):
    monkeypatch.setenv("TORCHTPU_PACKED_WEIGHTS_MB", "0")
    assert config.install_blas("mkl")
    e0, _, c0 = _C.blas_packed_info()
    ref, outs, _ = _linear_runs(128, 256, 320, seed=3)
    assert _C.blas_packed_info()[2] == c0  # nothing packed, nothing run packed
    for o in outs:
        assert torch.equal(o, outs[0])
    monkeypatch.setenv("TORCHTPU_PACKED_WEIGHTS_MB", "lots")
    with pytest.raises(ValueError, match="TORCHTPU_PACKED_WEIGHTS_MB"):
        config.install_blas("mkl")
    monkeypatch.delenv("TORCHTPU_PACKED_WEIGHTS_MB")


@pytest.mark.parametrize("choice", ["mkl", "own"])
def test_small_plane_conv_chunks(choice, restore_blas):
    """Convolutions on small planes im2col several images per GEMM; with
    MKL a chunk may hold up to 8 MiB of col (all 8 images here, 2 with our
    kernels). Same result either way, forward and backward."""
    config.install_blas(choice)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(8, 256, 7, 7, generator=g, requires_grad=True)
    w = (torch.randn(256, 256, 3, 3, generator=g) * 0.05).requires_grad_()
    ref = torch.nn.functional.conv2d(x, w, padding=1)
    ref.square().sum().backward()
    xd = x.detach().to(dev()).requires_grad_()
    wd = w.detach().to(dev()).requires_grad_()
    got = torch.nn.functional.conv2d(xd, wd, padding=1)
    got.square().sum().backward()
    for a, b in ((got, ref), (xd.grad, x.grad), (wd.grad, w.grad)):
        a = a.cpu()
        assert ((a - b).abs().max() / b.abs().max()).item() < 1e-5


def _cpuinfo_words():
    with open("/proc/cpuinfo") as f:
        return set(f.read().split())


def _cpu_has_avx512():
    return "avx512f" in _cpuinfo_words()


def _cpu_is_intel():
    return "GenuineIntel" in _cpuinfo_words()


def test_auto_policy_by_cpu(restore_blas):
    """TORCHTPU_BLAS=auto: on a CPU that is not Intel's MKL takes no
    product (the engine's kernels led it on every shape measured on a Zen 4
    host). On Intel's, with AVX-512 MKL takes every large plain
    product; without, only small-batch products on a weight (a graph
    input), and activations-times-activations products (weight gradients)
    and large-batch ones stay on the engine's AVX2 kernel, which measured
    at or above MKL there (docs/kernels.md)."""
    assert config.install_blas("auto")
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(256, 300, generator=g), torch.randn(300, 200, generator=g)
    c0 = _mkl_calls()
    got = ((a.to(dev()) + 0) @ (b.to(dev()) + 0)).cpu()  # intermediates: no key
    assert torch.allclose(got, a @ b, atol=1e-4)
    unkeyed = _mkl_calls() - c0
    c0 = _mkl_calls()
    ref, outs, _ = _linear_runs(128, 256, 384, seed=5)  # x @ W^T, W a graph input
    keyed = _mkl_calls() - c0
    for o in outs:
        assert torch.allclose(o, ref, atol=1e-4)
    c0 = _mkl_calls()
    _linear_runs(512, 256, 384, seed=6)
    large_batch = _mkl_calls() - c0
    if not _cpu_is_intel():
        assert unkeyed == 0 and keyed == 0 and large_batch == 0, (unkeyed, keyed, large_batch)
    elif _cpu_has_avx512():
        assert unkeyed > 0 and keyed > 0 and large_batch > 0, (unkeyed, keyed, large_batch)
    else:
        assert unkeyed == 0 and keyed > 0 and large_batch == 0, (unkeyed, keyed, large_batch)
