"""nll_loss_backward over [N, C] lowered as one select (nn_ops.py), against
PyTorch CPU: every reduction, class weights, ignore_index (the default
-100 and an in-range class), float and double; cross_entropy end to end."""
import pytest
import torch

import torch_xla
from torchtpu import _C
from torchtpu.bridge import inner_of


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, 2])
@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_nll_loss_backward_matches_cpu(reduction, weighted, ignore_index, dt):
    g = torch.Generator().manual_seed(0)
    n, c = 9, 5
    x = torch.randn(n, c, generator=g, dtype=dt).log_softmax(1)
    target = torch.randint(0, c, (n,), generator=g)
    target[0] = 2
    weight = torch.rand(c, generator=g, dtype=dt) + 0.5 if weighted else None
    out, total = torch.ops.aten.nll_loss_forward(x, target, weight, reduction, ignore_index)
    grad = torch.randn(out.shape, generator=g, dtype=dt)
    ref = torch.ops.aten.nll_loss_backward(grad, x, target, weight, reduction, ignore_index,
                                           total)
    d = "xla"
    got = torch.ops.aten.nll_loss_backward(
        grad.to(d), x.to(d), target.to(d), None if weight is None else weight.to(d), reduction,
        ignore_index, total.to(d)).cpu()
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)


def test_cross_entropy_training_gradient():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(16, 11, generator=g)
    target = torch.randint(0, 11, (16,), generator=g)
    target[3] = -100
    a = logits.clone().requires_grad_()
    b = logits.to("xla").requires_grad_()
    torch.nn.functional.cross_entropy(a, target).backward()
    torch.nn.functional.cross_entropy(b, target.to("xla")).backward()
    text = _C.graph_dump([inner_of(b.grad)._h])
    assert "scatter" not in text and "where(" in text, text  # not the decomposition
    torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_backward_skips_the_softmax_reduction(reduction, weighted, smoothing):
    """log_softmax's backward of nll_loss's one-hot gradient is g - exp(y) *
    c with c each row's one value (or 0 for an ignored row): recorded as
    elementwise ops that fuse with the one-hot select, with no softmax
    backward reduction. With label smoothing the gradient reaching
    log_softmax is another tensor, which takes the general path."""
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(12, 7, generator=g)
    target = torch.randint(0, 7, (12,), generator=g)
    target[5] = -100
    weight = torch.rand(7, generator=g) + 0.5 if weighted else None
    cot = torch.randn(12 if reduction == "none" else (), generator=g)

    def grad_of(x, dev):
        x = x.to(dev).requires_grad_()
        loss = torch.nn.functional.cross_entropy(
            x, target.to(dev), weight=None if weight is None else weight.to(dev),
            reduction=reduction, label_smoothing=smoothing)
        return torch.autograd.grad(loss, x, cot.to(dev))[0]

    want, got = grad_of(logits, "cpu"), grad_of(logits, "xla")
    text = _C.graph_dump([inner_of(got)._h])
    assert ("softmax_bwd" in text) == (smoothing > 0), text
    torch.testing.assert_close(got.cpu(), want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("shape", [(6, 4), (2, 4, 3, 3)])
def test_cross_entropy_float_class_index_target(shape):
    # PyTorch/XLA accepts class indices held in a float tensor (PyTorch's
    # CPU kernel raises); loss and gradient equal the int64 target's.
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(shape, generator=g)
    target = torch.randint(0, shape[1], (shape[0],) + shape[2:], generator=g)
    a = logits.clone().requires_grad_()
    ref = torch.nn.functional.cross_entropy(a, target)
    ref.backward()
    b = logits.to("xla").requires_grad_()
    got = torch.nn.functional.cross_entropy(b, target.float().to("xla"))
    got.backward()
    torch.testing.assert_close(got.cpu(), ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-6, rtol=1e-6)
