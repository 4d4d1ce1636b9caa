"""Training-mode batch norm lowered natively (nn_ops.py): forward, running
statistics and backward against PyTorch CPU, and few IR tensors per call
(PyTorch's decomposition, which float32 no longer takes, made more)."""
import copy

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met


def _pair(shape, affine, track):
    C = shape[1]
    cls = torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d
    ref = cls(C, affine=affine, track_running_stats=track, momentum=0.3)
    return ref, copy.deepcopy(ref).to("xla")


@pytest.mark.parametrize("shape", [(4, 8, 5, 5), (6, 3), (3, 4, 7), (2, 5, 1, 1)])
@pytest.mark.parametrize("affine,track", [(True, True), (False, True), (True, False)])
def test_training_batch_norm_matches_cpu(shape, affine, track):
    torch.manual_seed(0)
    ref, mine = _pair(shape, affine, track)
    for step in range(3):
        x = torch.randn(*shape) * 3 + 1
        g = torch.randn(*shape)
        xc, xx = x.clone().requires_grad_(), x.to("xla").requires_grad_()
        yc, yx = ref(xc), mine(xx)
        (yc * g).sum().backward()
        (yx * g.to("xla")).sum().backward()
        torch_xla.sync()
        torch.testing.assert_close(yx.cpu(), yc, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(xx.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
    for a, b in zip(ref.parameters(), mine.parameters(), strict=True):
        torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-4, rtol=1e-5)
    for a, b in zip(ref.buffers(), mine.buffers(), strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5)
    ref.eval()
    mine.eval()
    x = torch.randn(*shape)
    torch.testing.assert_close(mine(x.to("xla")).cpu(), ref(x), atol=1e-5, rtol=1e-5)


def test_eval_backward_uses_running_statistics():
    torch.manual_seed(1)
    ref, mine = _pair((4, 6, 3, 3), True, True)
    ref.running_var.uniform_(0.5, 2.0)
    mine.running_var.copy_(ref.running_var.to("xla"))
    ref.eval()
    mine.eval()
    x = torch.randn(4, 6, 3, 3)
    xc, xx = x.clone().requires_grad_(), x.to("xla").requires_grad_()
    ref(xc).square().sum().backward()
    mine(xx).square().sum().backward()
    torch.testing.assert_close(xx.grad.cpu(), xc.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mine.weight.grad.cpu(), ref.weight.grad, atol=1e-4, rtol=1e-5)


def test_training_batch_norm_records_few_tensors():
    torch.manual_seed(2)
    _, mine = _pair((8, 16, 4, 4), True, True)
    x = torch.randn(8, 16, 4, 4).to("xla").requires_grad_()
    torch_xla.sync()
    c0 = met.counter_value("CreateXlaTensor") or 0
    mine(x).sum().backward()
    made = (met.counter_value("CreateXlaTensor") or 0) - c0
    torch_xla.sync()
    # 49 with the native lowering (the sum and its backward included); the
    # decomposition (still taken by float64) makes 68
    assert made <= 55, made
