"""torch_xla.experimental.scan through AOTAutograd forward/backward graphs
(value_and_grad_partitioned): values and gradients against the same loop
run by PyTorch on the CPU, the tracing cache, activations that are xs
itself, and the refusal of an external xla tensor inside fn."""
import pytest
import torch

import torch_xla
from torch_xla.experimental import scan as scan_module
from torch_xla.experimental.scan import scan, value_and_grad_partitioned


def _loop(fn, init, xs):
    carry, ys = init, []
    for i in range(xs.shape[0]):
        carry, y = fn(carry, xs[i])
        ys.append(y)
    return carry, torch.stack(ys)


def _step(c, x):
    i, h = c
    return (i + 1, torch.tanh(h * x)), h.sum() * i


def test_scan_matches_the_cpu_loop_with_gradients():
    def run(dev):
        h0 = torch.ones(3, device=dev, requires_grad=True)
        xs = torch.linspace(0.1, 1, 12).view(4, 3).to(dev).requires_grad_()
        init = (torch.tensor(0, device=dev), h0)  # an integer carry leaf too
        c, ys = scan(_step, init, xs) if dev != "cpu" else _loop(_step, init, xs)
        (c[1].sum() + ys.sum()).backward()
        return [c[0], c[1].detach(), ys.detach(), h0.grad, xs.grad]
    for got, want in zip(run("xla"), run("cpu")):
        torch.testing.assert_close(got.cpu(), want)


def test_pure_fn_is_traced_once_and_cached():
    calls = []

    def fn(carry, x):
        calls.append(1)
        return carry + x, x * 2

    init = torch.zeros(2, device="xla")
    xs = torch.ones(3, 2, device="xla", requires_grad=True)
    for _ in range(5):
        scan(fn, init, xs, is_fn_pure=True)
    n = len(calls)
    assert 0 < n <= 2  # the AOTAutograd trace only, not once per step or call
    (forward, alias_input, backward), = scan_module._SCAN_COMPUTATION_CACHE[fn].values()
    assert callable(forward) and callable(alias_input) and callable(backward)
    scan(fn, init, xs, is_fn_pure=False)  # not pure: traced again, not cached
    assert len(calls) > n


def test_activations_keep_xs_itself():
    carry = torch.randn(4, 4, requires_grad=True, device="xla")
    xs = torch.randn(6, 4, 4, requires_grad=True, device="xla")
    saved = []

    def pack(t):
        saved.append(t)
        return len(saved) - 1

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda i: saved[i]):
        _, ys = scan(lambda c, x: (c, torch.sin(x)), carry, xs)
        ys.sum().backward()
    same_shape = {id(t) for t in saved if t.shape == xs.shape}
    assert same_shape == {id(xs)}  # no stacked copy of xs' slices
    torch.testing.assert_close(xs.grad.cpu(), torch.cos(xs.detach().cpu()))


def test_value_and_grad_partitioned_matches_autograd_on_cpu():
    def fn(carry, x):
        new = torch.sin(carry @ x["w"] + x["b"])
        return new, torch.sigmoid(new)

    torch.manual_seed(0)
    c = torch.randn(2, 3)
    x = {"w": torch.randn(3, 3), "b": torch.randn(2, 3)}
    xc = {k: v.clone().requires_grad_() for k, v in x.items()}
    cc = c.clone().requires_grad_()
    want_carry, want_y = fn(cc, xc)
    torch.autograd.backward([want_carry, want_y], [torch.ones(2, 3), torch.ones(2, 3)])

    cx = c.to("xla").requires_grad_()
    xx = {k: v.to("xla").requires_grad_() for k, v in x.items()}
    forward, alias_input, backward = value_and_grad_partitioned(
        fn, cx, {k: v.unsqueeze(0) for k, v in xx.items()})
    carry, (y, partial) = forward(cx, xx)
    acts = alias_input(partial, xx)
    assert isinstance(acts, tuple)
    g_carry, g_x = backward(torch.ones(2, 3, device="xla"), (torch.ones(2, 3, device="xla"),
                                                              acts))
    torch.testing.assert_close(carry.cpu(), want_carry.detach())
    torch.testing.assert_close(y.cpu(), want_y.detach())
    torch.testing.assert_close(g_carry.cpu(), cc.grad)
    for k in x:
        torch.testing.assert_close(g_x[k].cpu(), xc[k].grad)


def test_random_numbers_differ_per_step():
    init = torch.zeros(2, device="xla")
    xs = torch.zeros(3, 2, device="xla")
    _, ys = scan(lambda c, x: (c + x, c + torch.rand(2, device=torch_xla.device())), init, xs)
    ys = ys.cpu()
    assert ys.shape == (3, 2) and len({tuple(r.tolist()) for r in ys}) == 3


def test_an_external_xla_tensor_in_fn_is_refused():
    outside = torch.zeros(2, device="xla")

    def fn(carry, x):
        return carry + x, carry + outside

    with pytest.raises(AssertionError, match="FakeTensor"):
        scan(fn, torch.zeros(2, device="xla"), torch.zeros(3, 2, device="xla"))


def test_integer_scan_has_no_backward_graph_and_matches_cpu():
    fn = lambda c, x: (c + x, c * x)  # noqa: E731
    c, ys = scan(fn, torch.tensor(1, device="xla"), torch.arange(4, device="xla"))
    wc, wys = _loop(fn, torch.tensor(1), torch.arange(4))
    assert torch.equal(c.cpu(), wc) and torch.equal(ys.cpu(), wys)


def test_cached_trace_keeps_no_xla_tensor_alive():
    # A traced tensor held by the cache would be computed at every sync.
    import gc

    from torchtpu import _C

    def fn(c, x):
        return torch.sin(c * x), c

    init = torch.ones(3, device="xla", requires_grad=True)
    xs = torch.ones(4, 3, device="xla")
    torch_xla.sync()
    gc.collect()
    before = _C.live_tensors()
    c, ys = scan(fn, init, xs, is_fn_pure=True)
    del c, ys
    gc.collect()
    assert _C.live_tensors() == before
