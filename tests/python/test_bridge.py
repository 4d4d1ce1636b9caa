"""Part 2 of issue 2: the tensor bridge (transfers, factories, modules,
autograd, optimizers, printing, saving)."""
import io

import pytest
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm


def test_to_and_back(dev):
    c = torch.randn(3, 4)
    for t in (c.to("xla"), c.to(dev), c.to(torch.device("xla:0")), c.to("xla:1")):
        assert t.device.type == "xla"
        assert t.shape == c.shape and t.dtype == c.dtype
        torch.testing.assert_close(t.cpu(), c)
        torch.testing.assert_close(t.to("cpu"), c)
    assert c.to("xla:1").device == torch.device("xla:1")
    assert str(c.to("xla").device) == "xla:0"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32,
                                   torch.int64, torch.bool, torch.uint8, torch.int8,
                                   torch.float64])
def test_roundtrip_dtypes(dtype):
    c = (torch.randn(5, 3) * 10).to(dtype)
    t = c.to("xla")
    assert t.dtype == dtype
    assert torch.equal(t.cpu(), c)


def test_factories(dev):
    assert torch.equal(torch.zeros(2, 3, device="xla").cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.ones(2, 3, device=dev).cpu(), torch.ones(2, 3))
    assert torch.equal(torch.full((2, 2), 7.5, device="xla").cpu(), torch.full((2, 2), 7.5))
    assert torch.equal(torch.arange(10, device="xla").cpu(), torch.arange(10))
    assert torch.equal(torch.arange(1, 4, 0.5, device="xla").cpu(), torch.arange(1, 4, 0.5))
    t = torch.tensor([[1, 2], [3, 4]], device="xla")
    assert t.dtype == torch.int64 and torch.equal(t.cpu(), torch.tensor([[1, 2], [3, 4]]))
    e = torch.empty(4, 5, device="xla")
    assert e.shape == (4, 5) and e.device == dev
    torch_xla.manual_seed(1)
    r = torch.randn(1000, device="xla").cpu()
    assert abs(r.mean().item()) < 0.15 and abs(r.std().item() - 1) < 0.15
    u = torch.rand(1000, device="xla").cpu()
    assert u.min().item() >= 0 and u.max().item() < 1
    assert torch.zeros(3, device="xla:2").device == torch.device("xla:2")
    z = torch.zeros(2, dtype=torch.bfloat16, device="xla")
    assert z.dtype == torch.bfloat16


def test_item_tolist_print(dev):
    t = torch.tensor([1.5, 2.5], device=dev)
    assert t.sum().item() == 4.0
    assert t.tolist() == [1.5, 2.5]
    assert torch.tensor(3, device=dev).item() == 3
    s = repr(t * 2)
    assert s == "tensor([3., 5.], device='xla:0')"
    assert str(torch.tensor([True], device="xla:1")) == "tensor([True], device='xla:1')"


def test_module_to_and_state_dict(dev):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ref = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ref.load_state_dict(m.state_dict())
    m.to(dev)
    params = list(m.parameters())
    assert [p.device for p in params] == [dev] * 4  # two weights, two biases
    x = torch.randn(3, 4)
    torch.testing.assert_close(m(x.to(dev)).cpu(), ref(x))
    sd = {k: v.cpu() for k, v in m.state_dict().items()}
    m2 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(dev)
    m2.load_state_dict(sd)
    torch.testing.assert_close(m2(x.to(dev)).cpu(), ref(x))
    # load_state_dict with xla tensors as the source
    m3 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(dev)
    m3.load_state_dict(m.state_dict())
    torch.testing.assert_close(m3(x.to(dev)).cpu(), ref(x))


def test_torch_save_load_roundtrip(dev):
    t = torch.randn(3, 3).to(dev)
    buf = io.BytesIO()
    torch.save({"w": t}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded["w"].device == dev
    torch.testing.assert_close(loaded["w"].cpu(), t.cpu())


def test_autograd(dev):
    w_cpu = torch.randn(4, 3, requires_grad=True)
    x_cpu = torch.randn(5, 4)
    w = w_cpu.detach().to(dev).requires_grad_()
    x = x_cpu.to(dev)
    loss = (x @ w).tanh().sum()
    loss.backward()
    (x_cpu @ w_cpu).tanh().sum().backward()
    assert w.grad is not None and w.grad.device == dev
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        y = x @ w
    assert not y.requires_grad


def test_autograd_other_device():
    d = torch.device("xla:3")
    w = torch.randn(3, requires_grad=True, device="cpu").detach().to(d).requires_grad_()
    (w * w).sum().backward()
    assert w.grad.device == d
    torch.testing.assert_close(w.grad.cpu(), 2 * w.detach().cpu())


@pytest.mark.parametrize("opt_name", ["SGD", "Adam", "AdamW", "SGD_momentum"])
def test_optimizers_match_cpu(dev, opt_name):
    torch.manual_seed(0)
    ref = nn.Linear(6, 3)
    model = nn.Linear(6, 3)
    model.load_state_dict(ref.state_dict())
    model.to(dev)

    def make(params):
        if opt_name == "SGD":
            return torch.optim.SGD(params, lr=0.1)
        if opt_name == "SGD_momentum":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)
        return getattr(torch.optim, opt_name)(params, lr=0.01, weight_decay=0.1)

    o_ref, o = make(ref.parameters()), make(model.parameters())
    for step in range(4):
        x = torch.randn(8, 6)
        for m, opt, xx in ((ref, o_ref, x), (model, o, x.to(dev))):
            opt.zero_grad()
            m(xx).pow(2).mean().backward()
            opt.step()
        torch_xla.sync()
    for p_ref, p in zip(ref.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p.cpu(), p_ref, rtol=1e-5, atol=1e-5)


def test_zero_grad_and_set_to_none(dev):
    m = nn.Linear(2, 2).to(dev)
    m(torch.ones(1, 2, device=dev)).sum().backward()
    assert m.weight.grad is not None
    m.zero_grad(set_to_none=False)
    assert torch.equal(m.weight.grad.cpu(), torch.zeros(2, 2))
    m.zero_grad()
    assert m.weight.grad is None


def test_xla_tensor_predicates(dev):
    t = torch.ones(2, device=dev)
    assert xm.is_xla_tensor(t) and not xm.is_xla_tensor(torch.ones(2))
    # torch.Tensor.is_xla is a property of every tensor: checked outright.
    assert t.is_xla is True and torch.ones(2).is_xla is False
    # Views, results, a moved module's parameters and their gradients are
    # xla tensors by both predicates.
    m = nn.Linear(3, 2).to(dev)
    m(torch.ones(1, 3, device=dev)).sum().backward()
    checked = [t[0], t * 2, *m.parameters(), *(p.grad for p in m.parameters())]
    assert len(checked) == 6
    assert [c.is_xla for c in checked] == [True] * 6
    assert [xm.is_xla_tensor(c) for c in checked] == [True] * 6
