"""Op semantics PyTorch/XLA's own test_operations.py / test_core_aten_ops.py
check, each compared with PyTorch on the CPU: error types and messages,
CPU tensor operands of binary arithmetic, shifts without fallback,
clip_grad_norm_ with no gradients, native_dropout(train=None) and its
backward, as_strided over a slice's storage, and the _XLAC calls
_unsafe_buffer_pointer and _init_xla_lazy_backend."""
import ctypes

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met

DEV = "xla"


def _raises_like_cpu(fn, *args):
    """fn raises on CPU and on xla; returns (cpu error, xla error)."""
    with pytest.raises(Exception) as cpu:
        fn(*args)
    xargs = [a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(Exception) as xla:
        out = fn(*xargs)
        if isinstance(out, torch.Tensor):
            out.cpu()
    return cpu.value, xla.value


# ------------------------------------------------------------------ arange
@pytest.mark.parametrize("bounds", [(-5, float("nan")), (float("nan"), 5),
                                    (2.5, float("inf")), (float("-inf"), 3)])
def test_arange_non_finite_bound(bounds):
    with pytest.raises(RuntimeError) as c:
        torch.arange(*bounds)
    with pytest.raises(RuntimeError) as x:
        torch.arange(*bounds, device=DEV)
    assert str(x.value) == str(c.value)  # "unsupported range: -5 -> nan"


def test_arange_step_checks_keep_their_order_and_words():
    for args in [(2, float("nan"), 0), (0, 5, -1)]:
        with pytest.raises(RuntimeError) as c:
            torch.arange(*args)
        with pytest.raises(RuntimeError) as x:
            torch.arange(*args, device=DEV)
        assert str(x.value) == str(c.value)


# -------------------------------------------------------------------- flip
def test_flip_repeated_dim_names_it_as_cpu():
    cpu, xla = _raises_like_cpu(lambda t: t.flip(0, -1, 2), torch.ones(2, 2, 2))
    assert type(xla) is RuntimeError and str(xla) == str(cpu)


@pytest.mark.parametrize("dims", [(3,), (0, 1, 2, 3), (-4,)])
def test_flip_dim_out_of_range_is_index_and_runtime_error(dims):
    # PyTorch raises IndexError, PyTorch/XLA RuntimeError: either catch works.
    cpu, xla = _raises_like_cpu(lambda t: t.flip(*dims), torch.ones(2, 2, 2))
    assert isinstance(cpu, IndexError)
    assert isinstance(xla, IndexError) and isinstance(xla, RuntimeError)
    assert str(xla) == str(cpu)


# ------------------------------------------- binary ops with a CPU operand
@pytest.mark.parametrize("op", [torch.add, torch.sub, torch.mul, torch.div, torch.pow,
                                torch.fmod, torch.rsub])
def test_arith_takes_a_cpu_tensor_operand_either_side(op):
    x = torch.rand(5) + 0.5
    y = torch.rand(5) + 0.5
    xx = x.to(DEV)
    for got, want in [(op(xx, y), op(x, y)), (op(y, xx), op(y, x))]:
        assert got.device.type == "xla"
        torch.testing.assert_close(got.cpu(), want)


def test_int_ops_take_a_cpu_tensor_operand():
    a = torch.randint(0, 50, (3, 4))
    b = torch.randint(0, 5, (4,))
    for op in [torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor,
               torch.bitwise_left_shift, torch.bitwise_right_shift]:
        assert torch.equal(op(a.to(DEV), b).cpu(), op(a, b))
        assert torch.equal(op(b, a.to(DEV)).cpu(), op(b, a))


def test_other_ops_still_refuse_a_cpu_tensor_operand():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.maximum(torch.ones(3, device=DEV), torch.ones(3)).cpu()


# ------------------------------------------------------------------ shifts
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32,
                                   torch.int64])
def test_shifts_lower_without_fallback(dtype):
    lo = 0 if dtype == torch.uint8 else -100
    a = torch.randint(lo, 100, (3, 70)).to(dtype)
    b = torch.arange(-3, 67)  # negative and past-the-width counts too
    met.clear_all()
    fns = [torch.bitwise_left_shift, torch.bitwise_right_shift, lambda p, q: p << q,
           lambda p, q: p >> q, lambda p, q: p << 3, lambda p, q: 3 >> q,
           lambda p, q: torch.bitwise_left_shift(5, q)]
    for f in fns:
        want = f(a, b)
        got = f(a.to(DEV), b.to(DEV)).cpu()
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert met.executed_fallback_ops() == []


def test_shift_of_float_or_bool_raises_as_cpu():
    for f, args in [(lambda p: p << 1, (torch.ones(2),)),
                    (lambda p, q: p >> q, (torch.ones(2), torch.ones(2))),
                    (lambda p, q: p << q, (torch.tensor([True]), torch.tensor([True])))]:
        cpu, xla = _raises_like_cpu(f, *args)
        assert type(xla) is type(cpu) and str(xla) == str(cpu)


# --------------------------------------------------------- clip_grad_norm_
def test_clip_grad_norm_without_gradients_is_an_xla_zero():
    t = torch.rand(10, 10, dtype=torch.bfloat16).to(DEV)
    r = torch.nn.utils.clip_grad_norm_(t, 1.0)
    assert r.device.type == "xla" and r.dtype == torch.float32 and r.cpu().item() == 0.0
    # CPU parameters keep PyTorch's own function and result.
    r_cpu = torch.nn.utils.clip_grad_norm_(torch.rand(3), 1.0)
    assert r_cpu.device.type == "cpu" and r_cpu.item() == 0.0


def test_clip_grad_norm_with_gradients_matches_cpu():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.rand(4, 3))
    p.grad = torch.rand(4, 3) * 5
    q = torch.nn.Parameter(p.detach().to(DEV))
    q.grad = p.grad.to(DEV)
    want = torch.nn.utils.clip_grad_norm_([p], 1.0, norm_type=3.0)
    got = torch.nn.utils.clip_grad_norm_(iter([q]), 1.0, norm_type=3.0)
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(q.grad.cpu(), p.grad)
    with pytest.raises(RuntimeError, match="foreach=True is not supported with XLA"):
        torch.nn.utils.clip_grad_norm_([q], 1.0, foreach=True)


# ----------------------------------------------------------------- dropout
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_native_dropout_train_none_means_training(dtype):
    # torch.export writes native_dropout(x, p, None); ATen treats None as train.
    x = torch.randn(10, 10).to(dtype)
    x[0, 0] = float("nan")
    want = torch.ops.aten.native_dropout(x, 1.0, None)
    got = torch.ops.aten.native_dropout(x.to(DEV), 1.0, None)
    assert torch.equal(got[1].cpu(), want[1])
    torch.testing.assert_close(got[0].cpu(), want[0], equal_nan=True)
    assert torch.equal(torch.signbit(got[0].cpu()), torch.signbit(want[0]))  # x * 0 keeps -0
    kept = torch.ops.aten.native_dropout(x.to(DEV), 0.5, None)[1].cpu()
    assert 0 < int(kept.sum()) < 100  # random, not all kept


def test_native_dropout_backward_is_lowered():
    g = torch.randn(7, 7)
    g[0, 0] = float("nan")
    mask = torch.rand(7, 7) > 0.5
    mask[0, 0] = False
    met.clear_all()
    got = torch.ops.aten.native_dropout_backward(g.to(DEV), mask.to(DEV), 2.0).cpu()
    want = torch.ops.aten.native_dropout_backward(g, mask, 2.0)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert "xla::native_dropout_backward" in met.counter_names()
    assert met.executed_fallback_ops() == []


def test_dropout_backward_through_autograd_matches_its_mask():
    x = torch.randn(7, 7, device=DEV, requires_grad=True)
    out, mask = torch.native_dropout(x, 0.5, train=True)
    (out + 0.5).mean().backward()
    want = mask.cpu().float() * 2.0 / 49
    torch.testing.assert_close(x.grad.cpu(), want)


# -------------------------------------------------- as_strided of a slice
def _both(fn):
    a = torch.arange(25.).view(5, 5)
    return fn(a), fn(a.to(DEV)).cpu()


@pytest.mark.parametrize("fn", [
    lambda a: a[:, ::2].as_strided((5, 5), (5, 1), 0),       # larger than the slice
    lambda a: a[1:, ::2].as_strided((2, 2), (1, 1)),          # offset from the view
    lambda a: a[1:, ::2].as_strided((2, 2), (1, 1), 3),       # explicit storage offset
    lambda a: a[1:, ::2].as_strided((3,), (2,)).as_strided((2,), (3,)),
    lambda a: a[2:].as_strided((2,), (1,)),
])
def test_as_strided_of_a_slice_reads_its_base_as_cpu(fn):
    want, got = _both(fn)
    assert torch.equal(got, want)


def test_as_strided_write_inside_the_slice_matches_cpu():
    def run(dev):
        b = torch.arange(25., device=dev).view(5, 5)
        b[1:, ::2].as_strided((2,), (2,)).mul_(-1)
        return b.cpu()
    assert torch.equal(run(DEV), run("cpu"))


def test_as_strided_write_outside_the_slice_is_refused():
    b = torch.ones(5, 5, device=DEV)
    w = b[:, ::2].as_strided((5, 5), (5, 1), 0)
    with pytest.raises(NotImplementedError, match="outside the view"):
        w.mul_(2)
        b.cpu()


# ------------------------------------------------------------------- _XLAC
def test_unsafe_buffer_pointer_addresses_the_data():
    t = torch.arange(5, device=DEV)
    torch_xla.sync()
    ptr = torch_xla._XLAC._unsafe_buffer_pointer(t)
    assert isinstance(ptr, int) and ptr > 0
    assert list((ctypes.c_int64 * 5).from_address(ptr)) == [0, 1, 2, 3, 4]
    u = torch.tensor([7.5]).to(DEV)  # data from the host, no sync needed
    assert ctypes.c_float.from_address(torch_xla._XLAC._unsafe_buffer_pointer(u)).value == 7.5
    with pytest.raises(RuntimeError, match="IR that's not DeviceData"):
        torch_xla._XLAC._unsafe_buffer_pointer(t + 1)


def test_init_xla_lazy_backend_counts_once():
    # The import leaves the metrics report empty; the first explicit call
    # counts RegisterXLAFunctions, later calls change nothing.
    import subprocess, sys
    child = ("import torch_xla, torch_xla.debug.metrics as met\n"
             "print(repr(met.metrics_report()))\n"
             "torch_xla._XLAC._init_xla_lazy_backend()\n"
             "torch_xla._XLAC._init_xla_lazy_backend()\n"
             "print(met.counter_value('RegisterXLAFunctions'))\n")
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                       env=dict(__import__("os").environ, PJRT_DEVICE="CPU"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["''", "1"]
