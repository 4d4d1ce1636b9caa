"""Part 7 of issue 2: mistakes raise what PyTorch raises on CPU, with the
values named; nothing crashes."""
import pytest
import torch
import torch.nn.functional as F

import torch_xla


def same_error(fn, *cpu_args, match=None):
    """fn raises the same exception type on CPU and on xla tensors, and the
    xla message mentions `match` (the values involved)."""
    with pytest.raises(Exception) as cpu_err:
        fn(*cpu_args)
    xla_args = [a.to("xla") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    with pytest.raises(Exception) as xla_err:
        out = fn(*xla_args)
        if isinstance(out, torch.Tensor):
            out.cpu()
    assert type(xla_err.value) is type(cpu_err.value), (xla_err.value, cpu_err.value)
    if match:
        assert match in str(xla_err.value), str(xla_err.value)
    return xla_err.value


def test_broadcast_mismatch():
    same_error(lambda a, b: a + b, torch.ones(3), torch.ones(4),
               match="The size of tensor a (3) must match the size of tensor b (4) at "
                     "non-singleton dimension 0")


def test_matmul_shapes():
    same_error(torch.mm, torch.ones(2, 3), torch.ones(4, 5),
               match="mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")
    same_error(F.linear, torch.ones(2, 3), torch.ones(4, 5), match="cannot be multiplied")


def test_matmul_dtypes():
    same_error(torch.mm, torch.ones(2, 3), torch.ones(3, 2, dtype=torch.int64),
               match="same dtype")


def test_dim_out_of_range():
    same_error(lambda t: t.sum(5), torch.ones(2, 3),
               match="Dimension out of range (expected to be in range of [-2, 1], but got 5)")
    same_error(lambda t: t.softmax(-3), torch.ones(2, 3), match="Dimension out of range")


def test_bad_view():
    same_error(lambda t: t.view(5), torch.ones(2, 3), match="shape '[5]' is invalid for input of size 6")


def test_cat_mismatch():
    same_error(lambda a, b: torch.cat([a, b]), torch.ones(2, 3), torch.ones(2, 4),
               match="Sizes of tensors must match except in dimension 0")


def test_index_out_of_range():
    same_error(lambda t, i: t.index_select(0, i), torch.ones(3, 2), torch.tensor([5]),
               match="index 5 is out of bounds for dimension 0 with size 3")
    same_error(lambda t, i: F.embedding(i, t), torch.ones(3, 2), torch.tensor([7]),
               match="index 7 is out of bounds")


def test_conv_channels():
    same_error(F.conv2d, torch.ones(1, 3, 8, 8), torch.ones(4, 2, 3, 3), match="channels")


def test_device_mismatch():
    a = torch.ones(3).to("xla:0")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        (a + torch.ones(3).to("xla:1")).cpu()
    # Binary arithmetic copies a CPU tensor operand over, as PyTorch/XLA does
    # (tests/python/test_upstream_op_semantics.py); other ops refuse one.
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.maximum(a, torch.ones(3)).cpu()
    # A 0-dim CPU tensor is a scalar, as in PyTorch.
    assert (a + torch.tensor(2.0)).cpu().tolist() == [3, 3, 3]


def test_unsupported_dtype():
    # complex64 is supported (docs/complex.md); complex128 and uint64 are not.
    with pytest.raises(TypeError, match="complex128"):
        torch.ones(2, dtype=torch.complex128).to("xla")
    with pytest.raises(TypeError, match="uint64"):
        torch.ones(2, dtype=torch.uint64).to("xla")


def test_engine_survives_errors():
    with pytest.raises(IndexError):
        torch.ones(3).to("xla").index_select(0, torch.tensor([9]).to("xla")).cpu()
    torch_xla.sync()
    assert (torch.ones(2).to("xla") * 2).cpu().tolist() == [2, 2]


def test_fallback_of_in_place_op_writes_back_or_refuses():
    """An in-place op on the CPU fallback updates the xla tensor it writes;
    inside a decomposition (where that tensor may be a view the CPU run
    cannot reach) it raises instead of losing the write."""
    import sys
    import torch_xla.debug.metrics as met
    from torchtpu import bridge
    fb = sys.modules["torchtpu.lowering.fallback"]  # the package re-exports the function
    x = torch.arange(4.0).to("xla")
    inner = bridge.inner_of(x.clone())
    fb.fallback(torch.ops.aten.add_.Tensor, (inner, torch.ones(4)), {})
    assert bridge.download(inner._h).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert met.counter_value("aten::add_.Tensor") >= 1
    fb.decomposition_depth[0] += 1
    try:
        with pytest.raises(NotImplementedError, match="inside a decomposition"):
            fb.fallback(torch.ops.aten.add_.Tensor, (inner, torch.ones(4)), {})
    finally:
        fb.decomposition_depth[0] -= 1
    assert bridge.download(inner._h).tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("device", ["xla", "meta"])
def test_in_place_ops_check_shape_and_result_type(device):
    """In-place ops keep eager PyTorch's checks (torchtpu.inplace_meta: fast
    meta kernels for the optimizers' in-place ops), on xla and on meta."""
    def t(*shape, dtype=torch.float32):
        return torch.zeros(*shape, dtype=dtype).to(device)
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the "
                                           r"broadcast shape \[2, 3\]"):
        t(3).add_(t(2, 3))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        t(3).lerp_(t(2, 3), 0.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        t(1, 3).addcmul_(t(4, 1), t(1, 3))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        t(3, dtype=torch.int64).add_(1.5)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        t(3, dtype=torch.int64).div_(2)
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        t(3, dtype=torch.int64).mul_(t(3))
    # Allowed: broadcasting into self, same-kind narrowing, integer into float.
    a = t(2, 3).add_(t(3)).mul_(2).div_(t(2, 1) + 1).lerp_(t(2, 3), 0.5)
    a = a.addcmul_(t(3), t(2, 1), value=2).addcdiv_(t(3), t(2, 3) + 1)
    h = t(3, dtype=torch.float16).add_(t(3)).mul_(t(3, dtype=torch.int64))
    assert h.dtype == torch.float16 and a.shape == (2, 3)
    if device == "xla":
        assert a.cpu().tolist() == [[0.0] * 3] * 2
    assert t(3, dtype=torch.int64).div_(2, rounding_mode="floor").dtype == torch.int64
