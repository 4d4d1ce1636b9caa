"""torch_xla.distributed.spmd's patched nn.Linear (PyTorch/XLA's
xla_patched_nn_linear_forward, apply_xla_patch_to_nn_linear): a rank-3
input keeps its dimensions (no reshape in the program, so shardings
propagate), and values and gradients match nn.Linear on the CPU."""
import copy
import re

import pytest
import torch
import torch.nn as nn

import torch_xla
import torch_xla.distributed.spmd as xs
from torch_xla.distributed.fsdp.utils import apply_xla_patch_to_nn_linear as fsdp_patch


def _pair(in_shape, bias, dev):
    torch.manual_seed(0)
    lin = nn.Linear(in_shape[-1], 5, bias=bias)
    x = torch.randn(*in_shape, requires_grad=True)
    return lin, copy.deepcopy(lin).to(dev), x, x.detach().clone().to(dev).requires_grad_()


@pytest.mark.parametrize("in_shape,bias", [((4, 3, 7), False), ((4, 3, 7), True),
                                           ((6, 7), True), ((7,), True)])
def test_values_and_gradients_match_nn_linear(dev, in_shape, bias):
    lin, xlin, x, xx = _pair(in_shape, bias, dev)
    fsdp_patch(xlin, xs.xla_patched_nn_linear_forward)
    out, xout = lin(x), xlin(xx)
    assert xout.shape == out.shape
    torch.testing.assert_close(xout.cpu(), out.detach(), rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    xout.square().sum().backward()
    torch.testing.assert_close(xx.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xlin.weight.grad.cpu(), lin.weight.grad, rtol=1e-5, atol=1e-5)
    if bias:
        torch.testing.assert_close(xlin.bias.grad.cpu(), lin.bias.grad, rtol=1e-5, atol=1e-5)


def test_rank3_input_is_not_reshaped(dev):
    _, xlin, _, xx = _pair((4, 3, 11), False, dev)
    out = xs.xla_patched_nn_linear_forward(xlin, xx)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out])
    assert "reshape" not in hlo
    # One dot straight from the parameters: input [4,3,11], weight [5,11].
    assert re.search(r"dot\(f32\[4,3,11\]\{2,1,0\} %p\d+\.\d+, f32\[5,11\]\{1,0\} %p\d+", hlo), hlo
    # F.linear's own path flattens the input (the reason for the patch).
    assert "reshape" in torch_xla._XLAC._get_xla_tensors_hlo([xlin(xx)])


def test_apply_patch_swaps_modules(dev):
    model = nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Sequential(nn.Linear(5, 2, bias=False)))
    ref = copy.deepcopy(model)
    model = xs.apply_xla_patch_to_nn_linear(model.to(dev))
    assert isinstance(model[0], xs.EinsumLinear) and isinstance(model[2][0], xs.EinsumLinear)
    assert model[2][0].bias is None
    x = torch.randn(2, 3, 7)
    torch.testing.assert_close(model(x.to(dev)).cpu(), ref(x).detach(), rtol=1e-5, atol=1e-5)


def test_dtype_mismatch_is_a_clear_error(dev):
    lin = nn.Linear(3, 2).to(dev)
    with pytest.raises(RuntimeError, match="same dtype"):
        xs.xla_patched_nn_linear_forward(lin, torch.randn(2, 2, 3, dtype=torch.float64).to(dev))
