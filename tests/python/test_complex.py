"""complex64 tensors and the discrete Fourier transforms on xla (issue 3):
values against PyTorch CPU, gradients, zero fallbacks, the engine's refusal
of complex operands outside data movement, errors, and the StableHLO text."""
import math
import subprocess
import warnings

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torchtpu import _C, bridge
from torchtpu.lowering import core


def _close(got, expected, tol=1e-4):
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    torch.testing.assert_close(got, expected, atol=tol, rtol=tol)


def _run(fn, *cpu_args, dev):
    torch_xla.sync(wait=True)
    met.clear_counters()
    expected = fn(*cpu_args)
    got = fn(*[a.to(dev) for a in cpu_args])
    got = got.cpu()
    assert met.executed_fallback_ops() == [], met.executed_fallback_ops()
    return got, expected


# Lengths: powers of two (radix 2), short others (direct sum), long others
# (Bluestein through a power-of-two transform), and 1.
LENGTHS = [1, 2, 3, 5, 8, 12, 16, 63, 64, 65, 97, 100, 128, 257]


@pytest.mark.parametrize("n", LENGTHS)
def test_fft_lengths(dev, n):
    torch.manual_seed(n)
    x = torch.randn(3, n)
    c = torch.randn(2, n, dtype=torch.complex64)
    scale = max(1.0, math.sqrt(n))
    for fn, arg in ((torch.fft.fft, x), (torch.fft.rfft, x), (torch.fft.ifft, c),
                    (torch.fft.fft, c), (lambda t: torch.fft.hfft(t, n=n), c), (torch.fft.ihfft, x)):
        got, expected = _run(fn, arg, dev=dev)
        _close(got, expected, tol=2e-5 * scale * max(1.0, expected.abs().max().item()))
    got, expected = _run(lambda t: torch.fft.irfft(t, n=n), c, dev=dev)
    _close(got, expected, tol=2e-5 * scale * max(1.0, expected.abs().max().item()))


@pytest.mark.parametrize("norm", [None, "ortho", "forward", "backward"])
def test_fft_multidim_norms_and_sizes(dev, norm):
    torch.manual_seed(1)
    x = torch.randn(2, 6, 7)
    c = torch.randn(4, 5, 6, dtype=torch.complex64)
    cases = [
        (lambda t: torch.fft.fft2(t, norm=norm), x),
        (lambda t: torch.fft.fftn(t, s=(3, 10), dim=(1, 2), norm=norm), x),
        (lambda t: torch.fft.rfftn(t, norm=norm), x),
        (lambda t: torch.fft.rfft2(t, s=(4, 9), norm=norm), x),
        (lambda t: torch.fft.irfftn(t, s=(5, 9), norm=norm), c),
        (lambda t: torch.fft.ifftn(t, dim=(0, 2), norm=norm), c),
        (lambda t: torch.fft.hfft2(t, norm=norm), c),
        (lambda t: torch.fft.fft(t, n=11, dim=0, norm=norm), x),
    ]
    for fn, arg in cases:
        got, expected = _run(fn, arg, dev=dev)
        _close(got, expected, tol=1e-4 * max(1.0, expected.abs().max().item()))


def test_fft_gradients_match_cpu(dev):
    torch.manual_seed(2)
    fns = [lambda t: torch.fft.rfft(t).abs().sum(),
           lambda t: torch.view_as_real(torch.fft.fft2(t)).pow(2).sum(),
           lambda t: torch.fft.irfft(torch.fft.rfft(t) * 2, n=t.shape[-1]).sum(),
           lambda t: (torch.fft.ihfft(t).conj() * torch.fft.ihfft(t)).real.sum(),
           lambda t: torch.fft.fftn(t, norm="ortho").angle().sum()]
    for fn in fns:
        x = torch.randn(3, 10, requires_grad=True)
        xd = x.detach().to(dev).requires_grad_()
        fn(x).backward()
        met.clear_counters()
        fn(xd).backward()
        _close(xd.grad.cpu(), x.grad, tol=1e-4)
        assert met.executed_fallback_ops() == []


def test_complex_arithmetic_matches_cpu(dev):
    torch.manual_seed(3)
    a = torch.randn(3, 4, dtype=torch.complex64)
    b = torch.randn(3, 4, dtype=torch.complex64)
    r = torch.randn(4)
    cases = [lambda p, q, s: p + q, lambda p, q, s: p - 2 * q, lambda p, q, s: p * q,
             lambda p, q, s: p / q, lambda p, q, s: p * s, lambda p, q, s: s / (q + 3),
             lambda p, q, s: p + s, lambda p, q, s: -p, lambda p, q, s: p.conj(),
             lambda p, q, s: p.abs(), lambda p, q, s: p.angle(), lambda p, q, s: p.exp(),
             lambda p, q, s: p.sgn(), lambda p, q, s: p.reciprocal(),
             lambda p, q, s: p.sum(), lambda p, q, s: p.sum(1), lambda p, q, s: p.mean(0),
             lambda p, q, s: p.real, lambda p, q, s: p.imag, lambda p, q, s: p * (1 - 2j),
             lambda p, q, s: torch.view_as_real(p), lambda p, q, s: p == p.clone(),
             lambda p, q, s: p.t().reshape(2, 6)[1], lambda p, q, s: torch.cat([p, q], 1),
             lambda p, q, s: torch.nn.functional.pad(p, (1, 2)), lambda p, q, s: p.flip(0),
             lambda p, q, s: p.expand(2, 3, 4), lambda p, q, s: p[:, 1:3] * q[:, :2]]
    for i, fn in enumerate(cases):
        got, expected = _run(fn, a, b, r, dev=dev)
        _close(got, expected, tol=1e-5)


def test_building_and_converting(dev):
    torch.manual_seed(4)
    re, im = torch.randn(5), torch.randn(5)
    got, expected = _run(torch.complex, re, im, dev=dev)
    _close(got, expected)
    got, expected = _run(torch.polar, re.abs(), im, dev=dev)
    _close(got, expected)
    got, expected = _run(lambda t: torch.view_as_complex(t.reshape(5, 2, 2)), torch.randn(20),
                         dev=dev)
    _close(got, expected)
    got, expected = _run(lambda t: t.to(torch.complex64), torch.arange(6), dev=dev)
    _close(got, expected)
    full = torch.full((2, 3), 1 - 2j, device=dev)
    _close(full.cpu(), torch.full((2, 3), 1 - 2j))
    z = torch.zeros(3, dtype=torch.complex64, device=dev)
    _close(z.cpu(), torch.zeros(3, dtype=torch.complex64))
    c = torch.randn(4, dtype=torch.complex64)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = c.to(dev).to(torch.float32).cpu()
    assert any("discards the imaginary part" in str(x.message) for x in w)
    _close(got, c.real)
    # In-place update of a complex tensor through a view.
    base = c.clone().to(dev)
    base[1:3] = base[1:3] * 2j
    expected = c.clone()
    expected[1:3] = expected[1:3] * 2j
    _close(base.cpu(), expected)


def test_unlowered_complex_op_falls_back_visibly(dev):
    c = torch.randn(6, dtype=torch.complex64)
    met.clear_counters()
    got = torch.sin(c.to(dev)).cpu()
    _close(got, torch.sin(c), tol=1e-5)
    assert any("sin" in name for name in met.executed_fallback_ops()), met.executed_fallback_ops()


def test_unsupported_complex_dtypes_raise_type_error(dev):
    with pytest.raises(TypeError, match="complex128"):
        torch.randn(3, dtype=torch.complex128).to(dev)
    with pytest.raises(TypeError, match="complex128"):
        torch.fft.fft(torch.randn(4, dtype=torch.float64).to(dev))


def test_engine_refuses_complex_outside_data_movement(dev):
    h = bridge.handle_of(torch.randn(4, dtype=torch.complex64).to(dev))
    assert h.dtype == core.TT_C64
    # The engine's type errors surface as RuntimeError (as all engine
    # statuses but range, unimplemented and memory errors do).
    with pytest.raises(RuntimeError, match="unary does not take complex64"):
        _C.op(core.UNARY, [h], (core.UN["neg"],), (0.0, 0.0))
    with pytest.raises(RuntimeError, match="convert does not take complex64"):
        _C.op(core.CONVERT, [h], (core.TT_F32,))
    with pytest.raises(RuntimeError, match="complex64 scalars"):
        _C.scalar(0, core.TT_C64, 0.0)
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        _C.op(core.FFT, [h], (1, 5), (1.0,))
    with pytest.raises(RuntimeError, match="expected a float32 operand"):
        _C.op(core.FFT, [h], (2, 4), (1.0,))


def test_real_programs_do_not_pay_for_complex_checks():
    """The per-op complex check is skipped until a complex tensor exists
    (checked in a fresh process)."""
    code = ("import torch, torch_xla; from torchtpu import bridge; "
            "x = torch.randn(3).to('xla'); y = (x * 2).sum(); y.item(); "
            "print(bridge.complex_in_use[0]); "
            "z = torch.fft.rfft(x); print(bridge.complex_in_use[0])")
    r = subprocess.run([__import__('sys').executable, "-c", code], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "True"]


MLIR_OPT = xm._mlir_opt()


@pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt (LLVM 19) is not installed")
def test_stablehlo_fft_text_parses(dev):
    x = torch.randn(3, 8).to(dev)
    c = torch.randn(2, 5, dtype=torch.complex64).to(dev)
    outs = [torch.fft.rfft(x), torch.fft.ifft(c, norm="ortho"), torch.fft.irfft(c, n=8),
            torch.view_as_real(c * c), torch.fft.fft(c)]
    text = xm.get_stablehlo(outs)
    for t in ("fft_type FFT", "fft_type IFFT", "fft_type RFFT", "fft_type IRFFT",
              "complex<f32>", '"stablehlo.complex"', '"stablehlo.real"'):
        assert t in text, t
    r = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect"], input=text,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
