"""Counts and results PyTorch/XLA's own tests check (test_operations.py
test_replace_xla_tensor, test_ops.py's batch norm and mode references):
DestroyXlaTensor for wrapped-number operands and _replace_xla_tensor,
eval-mode batch norm's empty saved statistics through functionalization,
and torch.mode's indices among ties (the CPU kernel's)."""
import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met


def test_wrapped_number_operand_is_a_tensor_made_and_freed(dev, clean_metrics):
    t = torch.zeros(7, device=dev)
    made, freed = met.counter_value("CreateXlaTensor"), met.counter_value("DestroyXlaTensor")
    t += 1                      # the number's tensor, and t's old value
    assert met.counter_value("CreateXlaTensor") - made == 2
    assert met.counter_value("DestroyXlaTensor") - freed == 2
    u = t * torch.tensor(3.0)   # a 0-dim CPU tensor operand: the same
    assert met.counter_value("CreateXlaTensor") - made == 4
    assert met.counter_value("DestroyXlaTensor") - freed == 3
    v = t * u                   # two xla operands: only the result
    assert met.counter_value("CreateXlaTensor") - made == 5
    assert v.cpu().tolist() == [3.0] * 7


def test_replace_xla_tensor_counts_and_values(dev, clean_metrics):
    # PyTorch/XLA's test_replace_xla_tensor
    t1 = torch.zeros(50, device=dev)
    t1 += 1
    torch_xla.sync()
    assert met.counter_value("DestroyXlaTensor") == 3
    t2 = torch.zeros(10, device=dev)
    assert met.counter_value("DestroyXlaTensor") == 4
    out = torch_xla._XLAC._replace_xla_tensor(t1, t2)
    assert out is t1
    assert met.counter_value("DestroyXlaTensor") == 5
    assert t1.shape == (10,)
    assert t1.cpu().tolist() == [0.0] * 10 and t2.cpu().tolist() == [0.0] * 10


def test_replace_xla_tensor_refuses_cpu(dev):
    with pytest.raises(RuntimeError, match="must be an xla tensor"):
        torch_xla._XLAC._replace_xla_tensor(torch.zeros(2, device=dev), torch.zeros(2))


def test_batch_norm_legit_eval_saves_nothing(dev):
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 2, 4), torch.randn(2), torch.randn(2)
    rm, rv = torch.randn(2), torch.rand(2)
    op = torch.ops.aten._native_batch_norm_legit
    ref = op(x, w, b, rm, rv, False, -1.2, 1e-5)
    got = op(*(a.to(dev) for a in (x, w, b, rm, rv)), False, -1.2, 1e-5)
    assert [tuple(t.shape) for t in got] == [(3, 2, 4), (0,), (0,)]
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.cpu(), r)
    got = op(*(a.to(dev) for a in (x, w, b, rm, rv)), True, 0.1, 1e-5)
    assert [tuple(t.shape) for t in got] == [(3, 2, 4), (2,), (2,)]


@pytest.mark.parametrize("shape,dim", [((3000,), -1), ((6, 40), 1), ((9, 33), 0)])
def test_mode_indices_match_cpu_among_ties(dev, shape, dim):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-3, 3, shape, generator=g).float()
    v, i = torch.mode(x, dim)
    vx, ix = torch.mode(x.to(dev), dim)
    assert torch.equal(vx.cpu(), v) and torch.equal(ix.cpu(), i)
    assert "aten::mode" in met.executed_fallback_ops()
