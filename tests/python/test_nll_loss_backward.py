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
