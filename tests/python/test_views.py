"""Views and in-place ops keep PyTorch's aliasing semantics on xla."""
import torch

import torch_xla


def both(fn):
    c = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    x = c.clone().to("xla")
    out_c = fn(c)
    out_x = fn(x)
    torch.testing.assert_close(x.cpu(), c)
    for a, b in zip(out_x, out_c, strict=True):
        torch.testing.assert_close(a.cpu(), b)


def test_write_through_view_shows_in_base_and_sibling():
    def fn(t):
        v = t.view(2, 12)
        s = t[1]
        v[0, 7].fill_(-1)        # t[1, 1]
        s.mul_(2)
        return v, s, t[:, 1]
    both(fn)


def test_inplace_on_slices_and_transposes():
    def fn(t):
        tt = t.t()
        tt[2].add_(100)
        col = t[:, 3]
        col.zero_()
        t.narrow(0, 1, 2).sub_(1)
        return tt, col
    both(fn)


def test_inplace_arith_and_index_put_like():
    def fn(t):
        t += 1
        t[t > 10] = 0.5
        t.clamp_(max=20)
        u = t.unsqueeze(0).expand(2, 4, 6)
        return (u.sum(0),)
    both(fn)


def test_view_of_view_chain_and_sync():
    c = torch.zeros(8)
    x = c.clone().to("xla")
    for t in (c, x):
        a = t.view(2, 4)
        b = a[1]
        b2 = b[1:3]
        b2.fill_(5)
    torch_xla.sync()
    torch.testing.assert_close(x.cpu(), c)


def test_detach_shares_and_clone_does_not():
    x = torch.zeros(3).to("xla")
    d = x.detach()
    c = x.clone()
    d.add_(1)
    assert x.cpu().tolist() == [1, 1, 1]
    assert c.cpu().tolist() == [0, 0, 0]
