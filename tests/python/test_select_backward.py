"""select_backward and unit-step slice_backward lowered as a zero pad
(shape_ops.py), against PyTorch CPU, for every dim, negative indices and
bounds, float, half and integer dtypes; a strided slice keeps PyTorch's
decomposition."""
import pytest
import torch

import torch_xla

SIZES = [3, 4, 5]


def _rand(shape, dt, g):
    if dt.is_floating_point:
        return torch.randn(*shape, generator=g).to(dt)
    return torch.randint(-9, 9, shape, generator=g, dtype=dt)


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("dim,index", [(0, 1), (1, -1), (2, 0), (-1, 4)])
def test_select_backward(dt, dim, index):
    g = torch.Generator().manual_seed(0)
    shape = list(SIZES)
    del shape[dim]
    grad = _rand(shape, dt, g)
    ref = torch.ops.aten.select_backward(grad, SIZES, dim, index)
    got = torch.ops.aten.select_backward(grad.to("xla"), SIZES, dim, index).cpu()
    assert torch.equal(ref, got)


@pytest.mark.parametrize("dt", [torch.float32, torch.int64])
@pytest.mark.parametrize("dim,start,end,step", [(0, 1, 3, 1), (1, 0, 2, 1), (2, 1, 2**62, 1),
                                                (2, -3, -1, 1), (1, 0, 4, 2)])
def test_slice_backward(dt, dim, start, end, step):
    g = torch.Generator().manual_seed(1)
    sl = [slice(None)] * 3
    sl[dim] = slice(start, end, step)
    grad = _rand(SIZES, dt, g)[tuple(sl)].clone()
    ref = torch.ops.aten.slice_backward(grad, SIZES, dim, start, end, step)
    got = torch.ops.aten.slice_backward(grad.to("xla"), SIZES, dim, start, end, step).cpu()
    assert torch.equal(ref, got)


def test_select_backward_index_out_of_range():
    with pytest.raises(IndexError, match="out of range"):
        torch.ops.aten.select_backward(torch.ones(4, 5).to("xla"), SIZES, 0, 3)


def test_stacked_projection_backward_matches_cpu():
    """The qkv pattern of nn.MultiheadAttention: three selects of one
    stacked projection, each used, gradients summed by autograd."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 8, 3 * 16, generator=g)
    w = torch.randn(6, 8, 16, generator=g)

    def f(x):
        p = x.unflatten(-1, (3, 16)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
        q, k, v = p[0], p[1], p[2]
        return ((q * w.to(x.device)).sum() + (k * k).sum() + v.sin().sum())

    xc, xx = x.clone().requires_grad_(), x.to("xla").requires_grad_()
    f(xc).backward()
    f(xx).backward()
    torch.testing.assert_close(xx.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
