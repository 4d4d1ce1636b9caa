"""Convolutions with a 1x1 output plane (ResNet's last stage on small
images) lowered as one GEMM over the padded input window: forward and
every gradient against PyTorch CPU, and the graph holds a dot, not a
convolution."""
import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met
from torchtpu import _C
from torchtpu.bridge import inner_of

CASES = [
    # x shape, w shape, stride, padding, groups
    ((4, 16, 1, 1), (8, 16, 3, 3), 1, 1, 1),  # only the centre tap reads the input
    ((4, 16, 2, 2), (8, 16, 3, 3), 2, 1, 1),  # stride 2 onto 1x1
    ((2, 4, 5, 5), (6, 4, 3, 3), 4, 0, 1),    # window smaller than the input
    ((2, 4, 4, 4), (6, 4, 3, 3), 3, 0, 1),
    ((3, 8, 1, 1), (5, 8, 1, 1), 1, 0, 1),    # 1x1 kernel, 1x1 plane
    ((2, 4, 2, 2), (6, 4, 7, 7), 2, 3, 1),
    ((2, 8, 1, 1), (8, 4, 3, 3), 1, 1, 2),    # grouped: the convolution kernel
    ((2, 8, 3, 3), (6, 8, 5, 5), 1, 2, 1),    # 3x3 output: the convolution kernel
    ((2, 4, 1, 2), (6, 4, 3, 4), 1, 1, 1),    # taps [1, 2) x [1, 3) read the input
    ((2, 4, 3, 1), (6, 4, 5, 3), 1, (1, 1), 1),  # input rows cropped to the window's 4
    ((2, 4, 3, 2), (6, 4, 3, 3), (1, 2), (0, 1), 1),  # 3x2 taps: the first column pads
]


@pytest.mark.parametrize("xs,ws,stride,pad,groups", CASES)
def test_single_window_convolution_matches_cpu(xs, ws, stride, pad, groups):
    torch.manual_seed(0)
    x = torch.randn(*xs, requires_grad=True)
    w = torch.randn(*ws, requires_grad=True)
    b = torch.randn(ws[0], requires_grad=True)

    def f(x, w, b):
        return torch.nn.functional.conv2d(x, w, b, stride=stride, padding=pad, groups=groups)

    y = f(x, w, b)
    gy = torch.randn_like(y)
    (y * gy).sum().backward()
    xx, wx, bx = (t.detach().to("xla").requires_grad_() for t in (x, w, b))
    met.clear_all()
    yx = f(xx, wx, bx)
    (yx * gy.to("xla")).sum().backward()
    torch_xla.sync()
    torch.testing.assert_close(yx.cpu(), y, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(xx.grad.cpu(), x.grad, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(wx.grad.cpu(), w.grad, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(bx.grad.cpu(), b.grad, atol=1e-4, rtol=1e-5)


def test_single_window_graph_has_no_convolution():
    torch.manual_seed(1)
    x = torch.randn(4, 16, 1, 1).to("xla").requires_grad_()
    w = torch.randn(8, 16, 3, 3).to("xla").requires_grad_()
    torch_xla.sync()
    y = torch.nn.functional.conv2d(x, w, padding=1)
    y.square().sum().backward()
    text = _C.graph_dump([inner_of(t)._h for t in (y, x.grad, w.grad)])
    assert "dot(" in text and "conv2d" not in text, text
    # Only the centre tap reads the input: every product is over C = 16,
    # not C*3*3 = 144 (8/9 of it over padding).
    assert "float32[1,4,16] dot(" in text and "144" not in text, text
