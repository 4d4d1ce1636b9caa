"""Eager mode's metrics, as PyTorch/XLA records them: the engine's eager
setting (_C.set_eager_mode, runtime.h) samples an eager op's compile only in
EagerOpCompileTime and its execution only in EagerOpExecuteTime, never in
CompileTime/ExecuteTime; a torch_xla.compile region's graphs are sampled in
CompileTime/ExecuteTime; empty runs its zero fill in eager mode (so
torch.randn(..., device=xla) runs two graphs and torch.tensor one)."""
import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.experimental as exp
from torchtpu import _C


def samples(name):
    data = met.metric_data(name)
    return data[0] if data else 0


@pytest.fixture
def eager():
    with exp.eager_mode_context(True):
        yield


def test_engine_flag_follows_eager_mode_and_regions(dev):
    assert _C.eager_mode() is False
    with exp.eager_mode_context(True):
        assert _C.eager_mode() is True
        seen = []

        @torch_xla.compile
        def region(a):
            seen.append(_C.eager_mode())
            return a + 1

        region(torch.ones(2, device=dev))
        assert seen == [False]
        assert _C.eager_mode() is True
    assert _C.eager_mode() is False


def test_constant_and_add_are_two_eager_graphs(eager, clean_metrics, dev):
    # PyTorch/XLA's test_metrics.py test_eager_metrics, with a shape of its own
    t1 = torch.tensor([156, 157, 158], device=dev)
    t2 = t1 + 100
    xm.wait_device_ops()
    assert samples("EagerOpCompileTime") == 2   # the constant's fill, the add
    assert samples("EagerOpExecuteTime") == 2
    torch_xla.sync()  # nothing pending: a no-op
    assert "CompileTime" not in met.metric_names()
    assert "ExecuteTime" not in met.metric_names()
    assert t2.cpu().tolist() == [256, 257, 258]


def test_randn_runs_its_fill_then_normal(eager, clean_metrics, dev):
    t = torch.randn(3, 7, device=dev)
    xm.wait_device_ops()
    assert samples("EagerOpCompileTime") == 2
    assert samples("EagerOpExecuteTime") == 2
    t *= 5
    xm.wait_device_ops()
    assert samples("EagerOpCompileTime") == 3
    assert samples("EagerOpExecuteTime") == 3
    assert samples("ExecuteTime") == 0
    assert float(t.abs().sum().cpu()) > 0


def test_each_eager_execution_counted_before_the_next_op(eager, clean_metrics, dev):
    # As PyTorch/XLA's device lock: the next op's graph is queued once the
    # previous one has run, so its sample is there without a wait.
    t = torch.randn(4, 9, device=dev)
    t *= 5
    assert samples("EagerOpExecuteTime") >= 2


def test_compiled_region_is_sampled_as_a_graph(eager, clean_metrics, dev):
    t1 = torch.randn(6, 5, device=dev)
    t1.add_(0.5)
    f = torch_xla.compile(lambda x: torch.cos(torch.sin(x)))
    res = f(f(t1))
    torch.testing.assert_close(res.cpu(), torch.cos(torch.sin(torch.cos(torch.sin(t1.cpu())))))
    xm.wait_device_ops()
    assert samples("ExecuteTime") == 2
    assert samples("CompileTime") == 1
    assert samples("EagerOpExecuteTime") == 3  # fill, normal_, add_


def test_lazy_mode_empty_stays_pending(clean_metrics, dev):
    from torchtpu import bridge
    t = torch.empty(3, 4, device=dev)
    assert bridge.handle_of(t).pending
    assert samples("EagerOpExecuteTime") == 0 and samples("ExecuteTime") == 0
