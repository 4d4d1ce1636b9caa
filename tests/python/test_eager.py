"""Issue 5, part 3: eager mode. torch_xla.experimental.eager_mode(True),
is_eager_mode(), eager_mode_context(enable) and XLA_USE_EAGER_DEBUG_MODE=1:
each op runs at once (EagerOpCompileTime / EagerOpExecuteTime), while
torch_xla.compile regions are still traced and compiled whole."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.experimental as exp
from torchtpu import bridge

sys.path.insert(0, os.path.dirname(__file__))
from models import loss_of, make_batch, make_model  # noqa: E402


def pending(t):
    return bridge.handle_of(t).pending


def samples(name):
    data = met.metric_data(name)
    return data[0] if data else 0


@pytest.fixture
def eager():
    saved = exp.is_eager_mode()
    exp.eager_mode(True)
    yield
    exp.eager_mode(saved)


def test_flag_and_context():
    assert exp.is_eager_mode() is False
    exp.eager_mode(True)
    try:
        assert exp.is_eager_mode() is True
        with exp.eager_mode_context(False):
            assert exp.is_eager_mode() is False
        assert exp.is_eager_mode() is True
    finally:
        exp.eager_mode(False)
    with exp.eager_mode_context(True):
        assert exp.is_eager_mode() is True
    assert exp.is_eager_mode() is False
    import torch_xla.experimental.eager as eager_mod
    assert eager_mod.eager_mode is exp.eager_mode


def test_each_op_runs_at_once(eager, clean_metrics, dev):
    x = torch.randn(4, 4).to(dev)
    y = x @ x
    assert not pending(y)
    z = (y + 1).relu()
    assert not pending(z)
    torch.testing.assert_close(z.cpu(), ((x.cpu() @ x.cpu()) + 1).relu())
    # The transfer's zero fill (PyTorch/XLA's empty runs in eager mode) and
    # three new op graphs were compiled; nothing waited for a sync.
    assert samples("EagerOpCompileTime") == 4
    assert (met.counter_value("MarkStep") or 0) == 0


def test_repeated_ops_hit_the_cache(eager, clean_metrics, dev):
    x = torch.randn(8).to(dev)
    for _ in range(3):
        x = x * 2 + 1
    # the transfer's zero fill, then mul and add compiled once each and
    # served from the cache four more times; every run is an execution
    # (PyTorch/XLA's EagerOpExecuteTime)
    assert samples("EagerOpCompileTime") == 3
    assert samples("EagerOpExecuteTime") == 7
    assert met.counter_value("UncachedCompile") == 3


def test_lazy_mode_records_no_eager_metrics(clean_metrics, dev):
    x = torch.randn(4).to(dev)
    y = x * 2
    assert pending(y)
    torch_xla.sync()
    assert samples("EagerOpCompileTime") == 0 and samples("EagerOpExecuteTime") == 0


def test_compile_region_is_traced_whole(eager, clean_metrics, dev):
    x = torch.randn(16).to(dev)
    met.clear_all()  # the transfer's eager zero fill

    @torch_xla.compile
    def region(a):
        b = a.sin()
        c = b * a
        assert pending(c)  # not run op by op
        return c.cos()

    out = region(x)
    assert not pending(out)
    torch.testing.assert_close(out.cpu(), (x.cpu().sin() * x.cpu()).cos())
    assert samples("EagerOpCompileTime") == 0 and samples("EagerOpExecuteTime") == 0
    assert met.counter_value("UncachedCompile") == 1
    y = out + 1  # eager again after the region
    assert not pending(y)
    assert exp.is_eager_mode()


def test_eager_training_matches_lazy(dev):
    def train(eager_on):
        with exp.eager_mode_context(eager_on):
            model = make_model("mlp").to(dev)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            losses = []
            for step in range(3):
                x, y = make_batch("mlp", step)
                opt.zero_grad()
                loss = loss_of("mlp", model(x.to(dev)), y.to(dev))
                loss.backward()
                opt.step()
                if not eager_on:
                    torch_xla.sync()
                losses.append(loss.item())
            return losses

    lazy = train(False)
    met.clear_all()
    eager_losses = train(True)
    assert eager_losses == pytest.approx(lazy, rel=1e-5)
    assert samples("EagerOpCompileTime") > 0


def test_experimental_compile_alias(eager, dev):
    f = exp.eager.compile(lambda a: a * 2 + 1)
    out = f(torch.ones(2).to(dev))
    assert out.cpu().tolist() == [3.0, 3.0]


def _run(code, **env):
    e = dict(os.environ, PJRT_DEVICE="CPU", **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=300)


def test_eager_debug_mode_env():
    r = _run("""
        import torch, torch_xla
        import torch_xla.experimental as exp
        import torch_xla.debug.metrics as met
        from torchtpu import bridge
        assert exp.is_eager_mode()
        x = torch.ones(3, device="xla")
        y = x * 5
        assert not bridge.handle_of(y).pending
        print("compiled", met.metric_data("EagerOpCompileTime")[0])
        idx = torch.tensor([7], device="xla")
        try:
            torch.index_select(x, 0, idx)   # the error surfaces at the op
            print("no error")
        except IndexError as e:
            print("IndexError at the op:", e)
    """, XLA_USE_EAGER_DEBUG_MODE="1")
    assert r.returncode == 0, r.stderr
    assert "compiled " in r.stdout
    assert "IndexError at the op:" in r.stdout, r.stdout


def test_eager_debug_mode_off_by_default():
    r = _run("""
        import torch_xla, torch_xla.experimental as exp
        print(exp.is_eager_mode())
    """, XLA_USE_EAGER_DEBUG_MODE="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_updated_arguments_run_with_the_op(eager, clean_metrics, dev):
    """Batch norm updates its running statistics in place; in eager mode
    they become device data with the op (as PyTorch/XLA's eager mode),
    and no graph runs just to fill a tensor that is about to be
    overwritten."""
    import torch.nn as nn
    m = nn.BatchNorm1d(73).to(dev)
    m.train()
    x = torch.randn(4, 73).to(dev)
    m(x)
    assert not pending(m.running_mean) and not pending(m.running_var)
    assert "Data Shape: f32[73]" in torch_xla._XLAC._get_xla_tensor_debug_info(m.running_mean)
    ref = nn.BatchNorm1d(73)
    ref.train()
    ref(x.cpu())
    torch.testing.assert_close(m.running_mean.cpu(), ref.running_mean)
    before = samples("EagerOpExecuteTime")
    torch.randn(5, 79).to(dev)  # a transfer runs its empty's zero fill, as PyTorch/XLA
    xm.wait_device_ops()
    assert samples("EagerOpExecuteTime") == before + 1
