"""Parts 3 and 4 of issue 2: laziness, value reads, asynchrony, the graph
cache (steady loops compile once; changing Python scalars never recompile)."""
import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torchtpu import bridge


def executions():
    d = met.metric_data("ExecuteTime")
    return d[0] if d else 0


def pending(t):
    return bridge.handle_of(t).pending


def test_ops_are_recorded_not_run(clean_metrics, dev):
    x = torch.randn(4, 4).to(dev)
    torch_xla.sync(wait=True)
    n0 = executions()
    y = (x * 2).relu().sum(0)
    z = x.exp()
    assert pending(y) and pending(z)
    xm.wait_device_ops()
    assert executions() == n0
    # A value read runs only what that value needs.
    assert y.cpu().shape == (4,)
    xm.wait_device_ops()
    assert executions() == n0 + 1
    assert not pending(y) and pending(z)
    torch_xla.sync()
    assert not pending(z)
    xm.wait_device_ops()
    assert executions() == n0 + 2
    torch.testing.assert_close(z.cpu(), x.cpu().exp())


def test_step_context_and_mark_step(clean_metrics, dev):
    x = torch.ones(3).to(dev)
    with torch_xla.step():
        y = x + 1
        assert pending(y)
    assert not pending(y)
    z = y * 3
    xm.mark_step()
    assert not pending(z)
    assert met.counter_value("MarkStep") >= 3
    assert z.cpu().tolist() == [6, 6, 6]


def test_sync_is_async_and_wait_device_ops(dev):
    x = torch.randn(256, 256).to(dev)
    y = x
    for _ in range(5):
        y = y @ x * 1e-3
    torch_xla.sync()           # returns once queued
    xm.wait_device_ops()       # waits
    assert not pending(y)
    ref = x.cpu()
    r = ref
    for _ in range(5):
        r = r @ ref * 1e-3
    torch.testing.assert_close(y.cpu(), r, rtol=1e-4, atol=1e-6)


def _train_loop(dev, steps, lr_fn):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    compiles = []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_fn(step)
        x = torch.randn(4, 8).to(dev)
        with torch_xla.step():
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        compiles.append(met.counter_value("UncachedCompile") or 0)
    return compiles


def test_steady_loop_compiles_once(clean_metrics, dev):
    compiles = _train_loop(dev, 8, lambda s: 1e-2)
    # Step 1 differs (optimizer state is created); from step 3 on nothing compiles.
    assert compiles[-1] == compiles[2], compiles
    assert met.counter_value("CachedCompile") >= 5


def test_changing_scalars_do_not_recompile(clean_metrics, dev):
    compiles = _train_loop(dev, 8, lambda s: 1e-2 * (0.9 ** s))  # lr schedule
    assert compiles[-1] == compiles[2], compiles
    x = torch.randn(5).to(dev)
    torch_xla.sync()
    base = met.counter_value("UncachedCompile") or 0  # None once cleared
    for k in range(5):
        (x * (k + 0.5) + k).cpu()
    assert met.counter_value("UncachedCompile") - base == 1
    assert met.counter_value("CachedCompile") >= 4
    assert torch_xla.runtime.get_num_cached_compilation_graph() >= 1


def test_new_shape_compiles_new_graph(clean_metrics, dev):
    # Shapes no other test uses: the graph cache is shared by the process.
    a = (torch.randn(1303).to(dev) * 2).cpu()
    n1 = met.counter_value("UncachedCompile") or 0  # None once cleared
    b = (torch.randn(1304).to(dev) * 2).cpu()
    assert met.counter_value("UncachedCompile") == n1 + 1
    assert a.shape == (1303,) and b.shape == (1304,)
