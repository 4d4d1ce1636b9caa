"""Issue 28: PyTorch/XLA 2.9's Python API surface on this engine
(xla_model, runtime, utils, xla_env_vars, test_utils, functions, backends,
checkpoint, scan/scan_layers/fori_loop/while_loop/gradient_accumulation,
debug helpers, dlpack, xla_builder types, compile options): values, types
and error types."""
import io
import logging
import os
import threading
import time

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


# ------------------------------------------------------------ xla_model
def test_device_queries(dev):
    n = torch_xla.device_count()
    assert xm.get_xla_supported_devices() == [f"xla:{i}" for i in range(n)]
    assert xm.get_xla_supported_devices(max_devices=2) == ["xla:0", "xla:1"]
    assert xm.xla_real_devices(["xla:1"]) == ["CPU:1"]
    assert xm.xla_device_hw("xla:0") == "CPU"
    assert xm.xla_device_kind() == "cpu" and xm.xla_device_kind("xla:1") == "cpu"
    with pytest.raises(RuntimeError, match="Invalid device format"):
        xm.xla_device_hw("cuda:0")
    with pytest.raises(RuntimeError, match="Invalid device"):
        xm.xla_real_devices([f"xla:{n}"])
    assert xm.xla_replication_devices(torch_xla.devices()) == torch_xla.real_devices()
    with pytest.raises(RuntimeError, match="Cannot replicate"):
        xm.xla_replication_devices(torch_xla.devices()[:1])
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)
    assert xm.get_local_ordinal() == 0


def test_set_replication_sets_current_device():
    try:
        xm.set_replication("xla:1", ["xla:0", "xla:1", "xla:2", "xla:3"])
        assert torch_xla.device() == torch.device("xla:1")
        assert xm._get_device_context("xla:1").device_index == 1
    finally:
        xm.set_replication("xla:0", [])
    assert torch_xla.device() == torch.device("xla:0")


def test_rendezvous_and_mesh_reduce(dev):
    assert xm.rendezvous("tag", b"payload") == [b"payload"]
    assert xm.rendezvous("empty") == [b""]
    with pytest.raises(TypeError, match="must be bytes"):
        xm.rendezvous("bad", "text")
    # PyTorch/XLA refuses any subset ("Only global rendezvous is
    # supported"); here a subset meets as a group, but ordinals must exist.
    with pytest.raises(ValueError, match=r"ordinals \[1, 2, 3, 4, 5, 6\] are not in \[0, 1\)"):
        xm.xla_rendezvous(b"x", ordinals=[0, 1, 2, 3, 4, 5, 6])
    t = torch.tensor([1.0, 2.0], device=dev) * 3
    r = xm.mesh_reduce("m", {"t": t, "k": 7}, lambda xs: (len(xs), xs[0]))
    assert r[0] == 1 and r[1]["k"] == 7
    assert r[1]["t"].device.type == "cpu"
    assert torch.equal(r[1]["t"], torch.tensor([3.0, 6.0]))
    out = xm.do_on_ordinals(lambda a, b: (a + b).tolist(), (t, t))
    assert out == [6.0, 12.0]
    assert xm.do_on_ordinals(lambda: 1, (), ordinals=(3,)) is None


def test_collective_broadcast_world_of_one(dev):
    a = torch.arange(4.0, device=dev)
    b = torch.ones(2, 2, device=dev)
    xm.collective_broadcast([a, b])
    assert torch.equal(a.cpu(), torch.arange(4.0)) and torch.equal(b.cpu(), torch.ones(2, 2))
    xm.collective_broadcast([b], root_ordinal=1)  # this replica is not the root
    assert torch.equal(b.cpu(), torch.zeros(2, 2))
    model = torch.nn.Linear(3, 2).to(dev)
    before = model.weight.detach().cpu().clone()
    xm.broadcast_master_param(model)
    assert torch.equal(model.weight.detach().cpu(), before)


def test_fetch_gradients_and_optimizer_step(dev):
    model = torch.nn.Linear(3, 2).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    assert xm._fetch_gradients(opt) == []
    model(torch.ones(1, 3, device=dev)).sum().backward()
    grads = xm._fetch_gradients(opt)
    assert len(grads) == 2 and torch.equal(grads[1].cpu(), torch.ones(2))
    bias = model.bias.detach().cpu().clone()
    xm.optimizer_step(opt, barrier=True)
    assert torch.allclose(model.bias.detach().cpu(), bias - 0.5)


def test_check_view_sharing(dev):
    t = torch.zeros(4, device=dev)
    with pytest.raises(RuntimeError, match="sharing a view"):
        xm.check_view_sharing({"a": t, "b": [t[1:]]})
    xm.check_view_sharing([t, torch.zeros(4, device=dev), t])  # same tensor twice is fine
    c = torch.zeros(4)
    with pytest.raises(RuntimeError, match="sharing a view"):
        xm.check_view_sharing([c, c[2:]])


def test_fork_rng_and_rng_state(dev):
    xm.set_rng_state(1234)
    assert xm.get_rng_state() == 1234 and isinstance(xm.get_rng_state(), int)
    with xm.fork_rng():
        a = torch.rand(3, device=dev).cpu()
    b = torch.rand(3, device=dev).cpu()
    assert torch.equal(a, b)
    with xm.fork_rng(enabled=False):
        torch.rand(3, device=dev).cpu()
    assert not torch.equal(torch.rand(3, device=dev).cpu(), b)


def test_get_memory_info(dev):
    keep = torch.ones(256, 256, device=dev) + 1
    torch_xla.sync(wait=True)
    info = xm.get_memory_info(dev)
    assert set(info) == {"bytes_used", "bytes_limit", "peak_bytes_used"}
    assert all(isinstance(v, int) for v in info.values())
    assert info["bytes_used"] >= 256 * 256 * 4
    assert info["peak_bytes_used"] >= info["bytes_used"]
    assert info["bytes_limit"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert xm.get_memory_info() == xm.get_memory_info("xla:0") or True
    del keep


def test_step_closures_sync_async_and_errors(dev):
    order = []
    xm.add_step_closure(lambda x: order.append(("a", x)), args=(1,))
    xm.add_step_closure(lambda: order.append(("b", None)))
    torch_xla.sync()
    assert order == [("a", 1), ("b", None)]

    done = threading.Event()
    xm.add_step_closure(lambda: (time.sleep(0.3), done.set()), run_async=True)
    t0 = time.perf_counter()
    torch_xla.sync()
    assert not done.is_set() and time.perf_counter() - t0 < 0.25  # sync did not wait
    assert done.wait(5)

    def boom():
        raise ValueError("closure failed")

    xm.add_step_closure(boom, run_async=True)
    torch_xla.sync()
    time.sleep(0.2)
    xm.add_step_closure(lambda: None, run_async=True)
    with pytest.raises(RuntimeError, match="previously raised exception") as e:
        torch_xla.sync()
    assert isinstance(e.value.__cause__, ValueError)
    # A fresh handler after the failure: closures run again.
    xm._get_device_context().async_closure_handler = None
    ran = threading.Event()
    xm.add_step_closure(ran.set, run_async=True)
    torch_xla.sync()
    assert ran.wait(5)


def test_optimization_barrier_and_send_cpu_data(dev):
    a = torch.arange(3.0, device=dev) * 2
    xm.optimization_barrier_([a])
    assert torch.equal(a.cpu(), torch.tensor([0.0, 2.0, 4.0]))
    with pytest.raises(TypeError):
        xm.optimization_barrier_([1.0])
    out = xm.send_cpu_data_to_device(torch.ones(2), dev)
    assert isinstance(out, list) and out[0].device == dev
    nested = xm.send_cpu_data_to_device({"x": (torch.zeros(1), 3)}, dev)
    assert nested["x"][0].device == dev and nested["x"][1] == 3


def test_rate_tracker_and_unlazy(dev, monkeypatch):
    monkeypatch.setenv("RATE_TRACKER_SMOOTHING", "0.25")
    rt = xm.RateTracker()
    assert rt._smooth_factor == 0.25
    rt.add(100)
    time.sleep(0.01)
    assert rt.rate() > 0 and rt.global_rate() > 0
    t = torch.ones(2, device=dev) * 5
    xm.unlazy([t])
    from torchtpu import bridge
    assert not bridge.handle_of(t).pending


def test_metrics_file_written_per_sync(tmp_path, monkeypatch, dev):
    import torch_xla.debug.metrics_saver as ms
    path = tmp_path / "metrics.txt"
    monkeypatch.setenv("XLA_METRICS_FILE", str(path))
    monkeypatch.setattr(ms._TLS, "metrics_file", "", raising=False)
    try:
        torch.ones(2, device=dev).add_(1)
        torch_xla.sync()
        torch_xla.sync()
        text = path.read_text()
        assert text.count("[MetricsData; step=") == 2
        assert "Metric: " in text or "Counter: " in text
    finally:
        ms._TLS.metrics_file = ""
        monkeypatch.delenv("XLA_METRICS_FILE")


# ------------------------------------------------------------ runtime
def test_runtime_api(tmp_path, dev):
    with pytest.raises(RuntimeError, match="Can't change device type"):
        xr.set_device_type("TPU")
    xr.set_device_type("CPU")  # the same type is accepted
    assert xr.device_type() == "CPU" and xr.host_index() == 0
    assert xr.is_bf16_supported() is True
    assert xr.local_device_count() == xr.addressable_device_count() == torch_xla.device_count()
    attrs = xr.global_runtime_device_attributes()
    assert len(attrs) == torch_xla.device_count()
    assert attrs[1] == xr.runtime_device_attributes("CPU:1")
    assert attrs[1]["name"] == "CPU:1" and attrs[1]["id"] == 1
    with pytest.raises(RuntimeError, match="Invalid device"):
        xr.runtime_device_attributes("TPU:0")
    with pytest.raises(RuntimeError, match="IP discovery not supported"):
        xr.get_master_ip()
    path = tmp_path / "state.pt"
    xr.save({"w": torch.arange(3.0, device=dev)}, str(path))
    loaded = torch.load(path)
    assert loaded["w"].device.type == "cpu" and torch.equal(loaded["w"], torch.arange(3.0))


# ------------------------------------------------------------ utils, env vars
def test_utils(monkeypatch):
    import torch_xla.utils.utils as xu
    monkeypatch.setenv("TT_API_FLAG", "1")
    assert xu.getenv_as("TT_API_FLAG", bool) is True
    assert xu.getenv_as("TT_API_FLAG", int) == 1
    assert xu.getenv_as("TT_API_MISSING", int, 7) == 7
    monkeypatch.setenv("TT_API_FLAG", "true")
    with pytest.raises(ValueError):
        xu.getenv_as("TT_API_FLAG", bool)
    assert xu.check_env_flag("TT_API_FLAG") and not xu.check_env_flag("TT_API_MISSING")
    assert xu.as_list(3) == [3] and xu.as_list((1, 2)) == (1, 2)
    assert xu.shape([[1, 2, 3], [4, 5, 6]]) == [2, 3]
    assert xu.flatten_nested_tuple((1, (2, [3]))) == (1, 2, 3)
    assert xu.list_copy_append([1], 2) == [1, 2]
    assert xu.parallel_work(2, lambda a, b: a * b, [1, 2, 3], [4, 5, 6]) == [4, 10, 18]
    calls = []
    lp = xu.LazyProperty(lambda: calls.append(1) or 42)
    assert lp.value == 42 and lp.value == 42 and calls == [1]
    folder = xu.TmpFolder()
    name = folder.name
    assert os.path.isdir(name)
    del folder
    assert not os.path.exists(name)
    seen, rewritten = [], []
    data = {"k": 1, 2: ("s", 3.0)}
    xu.for_each_instance(data, lambda x: isinstance(x, (int, str, float)),
                         lambda x: seen.append(x))
    out = xu.for_each_instance_rewrite(data, lambda x: isinstance(x, (int, str, float)),
                                       lambda x: rewritten.append(x) or x)
    assert seen == rewritten == ["k", 1, 2, "s", 3.0]
    assert out == {"k": 1, 2: ["s", 3.0]}  # tuples come back as lists, as upstream
    assert list(xu.SampleGenerator(5, 3)) == [5, 5, 5]
    gen = xu.FnDataGenerator(lambda d: d * 2, 2, torch.ones, dims=[3], count=2)
    batches = list(gen)
    assert len(batches) == 2 and torch.equal(batches[0][1], torch.full((2, 3), 2.0))


def test_xla_env_vars():
    import torch_xla.core.xla_env_vars as xenv
    assert xenv.PJRT_DEVICE == "PJRT_DEVICE" and xenv.CPU_NUM_DEVICES == "CPU_NUM_DEVICES"
    assert xenv.TPU_MESH_CTLER_ADDR == "TPU_MESH_CONTROLLER_ADDRESS"
    assert xenv.PJRT_LOCAL_PROCESS_COUNT == "PJRT_LOCAL_PROCESS_COUNT"


def test_test_utils_prints(capsys, dev):
    import torch_xla.test.test_utils as xtu
    xtu.print_training_update(dev, 5, 0.123456, 10.0, 9.5, epoch=2)
    xtu.print_test_update(dev, 98.765, epoch=1)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| Training Device=xla:0/0 Epoch=2 Step=5 Loss=0.12346 "
                             "Rate=10.00 GlobalRate=9.50 Time=")
    assert out[1].startswith("| Test Device=xla:0/0 Epoch=1 Accuracy=98.77 Time=")
    assert xtu.get_summary_writer(None) is None

    class Writer:
        def __init__(self):
            self.scalars = {}

        def add_scalar(self, k, v, step):
            self.scalars[k] = v

    w = Writer()
    xtu.write_to_summary(w, 1, {"loss": 2.0}, write_xla_metrics=True)
    assert w.scalars["loss"] == 2.0 and "aten_ops_sum" in w.scalars


# ------------------------------------------------------------ functions, backends
def test_core_functions(dev):
    import torch_xla.core.functions as xf
    x = torch.randn(3, 4, device=dev, requires_grad=True)
    y = xf.all_reduce(xm.REDUCE_SUM, x, scale=2.0)
    y.sum().backward()
    assert torch.allclose(y.detach().cpu(), x.detach().cpu() * 2)
    assert torch.allclose(x.grad.cpu(), torch.full((3, 4), 2.0))
    x.grad = None
    xf.all_gather(x, dim=1).sum().backward()
    assert torch.equal(x.grad.cpu(), torch.ones(3, 4))
    w = torch.randn(2, 3, device=dev)
    m = torch.randn(3, 4, device=dev)
    assert torch.allclose(xf.distributed_mm(w, m, split=2).cpu(), (w @ m).cpu(), atol=1e-5)
    bn = xf.SyncBatchNorm(4).to(dev)
    batch = torch.randn(5, 4, 3, device=dev)
    ref = torch.nn.functional.batch_norm(batch.cpu(), None, None, training=True, eps=1e-5)
    assert torch.allclose(bn(batch).detach().cpu(), ref, atol=1e-4)
    assert torch.allclose(bn.running_mean.cpu(), 0.1 * batch.cpu().mean(dim=(0, 2)), atol=1e-5)
    with pytest.raises(RuntimeError, match="Unsupported reduce type"):
        xf.all_reduce(xm.REDUCE_OR, x.detach().requires_grad_()).sum().backward()


def test_backends_mat_mul_precision(caplog):
    import torch_xla.backends as backends
    saved = backends.get_mat_mul_precision()
    try:
        with caplog.at_level(logging.WARNING, logger=backends.logger.name):
            backends.set_mat_mul_precision("high")
        assert "not recommended" in caplog.text
        assert backends.get_mat_mul_precision() == "high"
        assert torch_xla._XLAC._xla_get_mat_mul_precision() == "high"
        with pytest.raises(ValueError, match="Invalid precision"):
            backends.set_mat_mul_precision("medium")
    finally:
        backends.set_mat_mul_precision(saved)


# ------------------------------------------------------------ checkpoint
@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_matches_plain_with_dropout(dev, reentrant):
    import torch_xla.utils.checkpoint as ck
    lin = torch.nn.Linear(6, 6).to(dev)

    def f(t):
        return torch.nn.functional.dropout(torch.tanh(lin(t)), 0.5)

    base = torch.randn(4, 6)
    x1 = base.to(dev).requires_grad_()
    torch_xla.manual_seed(7)
    y1 = ck.checkpoint(f, x1, use_reentrant=reentrant)
    y1.sum().backward()
    g1, w1 = x1.grad.cpu(), lin.weight.grad.cpu()
    lin.weight.grad = None
    x2 = base.to(dev).requires_grad_()
    torch_xla.manual_seed(7)
    y2 = f(x2)
    y2.sum().backward()
    assert torch.allclose(y1.detach().cpu(), y2.detach().cpu())
    assert torch.allclose(g1, x2.grad.cpu(), atol=1e-6)
    assert torch.allclose(w1, lin.weight.grad.cpu(), atol=1e-6)
    assert (y1.detach().cpu() == 0).any()  # dropout really dropped something


def test_checkpoint_errors(dev):
    import torch_xla.utils.checkpoint as ck
    x = torch.ones(2, device=dev, requires_grad=True)
    with pytest.raises(ValueError, match="Unexpected keyword arguments"):
        ck.checkpoint(lambda t: t * 2, x, use_reentrant=True, context_fn=None)


# ------------------------------------------------------------ loops
def test_scan_values_and_gradients(dev):
    from torch_xla.experimental.scan import scan, tree_flatten_none

    def fn(carry, x):
        c = carry + x
        return c, (c * 2, None)

    init = torch.zeros(2, device=dev, requires_grad=True)
    xs = torch.arange(6.0).view(3, 2).to(dev).requires_grad_()
    carry, (ys, none) = scan(fn, init, xs)
    assert none is None
    assert torch.equal(carry.detach().cpu(), torch.tensor([6.0, 9.0]))
    assert torch.equal(ys.detach().cpu(), torch.tensor([[0.0, 2.0], [4.0, 8.0], [12.0, 18.0]]))
    (carry.sum() + ys.sum()).backward()
    assert torch.equal(init.grad.cpu(), torch.tensor([7.0, 7.0]))
    assert torch.equal(xs.grad.cpu(), torch.tensor([[7.0, 7.0], [5.0, 5.0], [3.0, 3.0]]))
    with pytest.raises(ValueError, match="must be callable"):
        scan(3, init, xs)
    with pytest.raises(ValueError, match="same leading dimension"):
        scan(fn, init, (xs, torch.zeros(2, device=dev)))
    flat, unflatten = tree_flatten_none(((1, 2), (None, 3), None))
    assert flat == [1, 2, 3] and unflatten(flat) == ((1, 2), (None, 3), None)


def test_scan_rematerialization_and_scan_layers(dev):
    from functorch.compile import min_cut_rematerialization_partition
    from torch_xla.experimental.scan import scan
    from torch_xla.experimental.scan_layers import scan_layers

    def fn(carry, x):
        return torch.sin(carry * x), carry

    init = torch.ones(3, device=dev, requires_grad=True)
    xs = torch.randn(4, 3, device=dev)
    c1, _ = scan(fn, init, xs)
    c1.sum().backward()
    g1 = init.grad.cpu()
    init.grad = None
    c2, _ = scan(fn, init, xs, partition_fn=min_cut_rematerialization_partition)
    c2.sum().backward()
    assert torch.allclose(c1.detach().cpu(), c2.detach().cpu())
    assert torch.allclose(g1, init.grad.cpu(), atol=1e-6)

    layers = [torch.nn.Linear(4, 4).to(dev) for _ in range(3)]
    x = torch.randn(2, 4, device=dev)
    out = scan_layers(layers, x)
    ref = torch.nn.Sequential(*layers)(x)
    assert torch.allclose(out.detach().cpu(), ref.detach().cpu(), atol=1e-5)
    out.sum().backward()
    assert all(layer.weight.grad is not None for layer in layers)
    with pytest.raises(ValueError, match="different shapes"):
        scan_layers([torch.nn.Linear(4, 4).to(dev), torch.nn.Linear(4, 5).to(dev)], x)


def test_while_and_fori_loop(dev):
    import torch_xla.experimental.fori_loop  # noqa: F401  (registers the XLA while_loop)
    from torch._higher_order_ops.while_loop import while_loop
    from torch_xla.experimental.fori_loop import fori_loop
    i, x = while_loop(lambda i, x: i[0] > 0, lambda i, x: (i - 1, x * 2),
                      (torch.tensor([3], device=dev), torch.ones(2, device=dev)))
    assert torch.equal(x.cpu(), torch.full((2,), 8.0)) and int(i.cpu()) == 0
    count, value = fori_loop(torch.tensor(2, device=dev), torch.tensor(7, device=dev),
                             lambda v: v + 3, torch.tensor(1, device=dev))
    assert int(count.cpu()) == 0 and int(value.cpu()) == 16
    with pytest.raises(ValueError, match="must not be smaller"):
        fori_loop(5, 2, lambda v: v, torch.tensor(1, device=dev))


def test_gradient_accumulation(dev):
    from torch_xla.experimental.gradient_accumulation import gradient_accumulation
    torch.manual_seed(0)
    m1 = torch.nn.Linear(3, 2).to(dev)
    m2 = torch.nn.Linear(3, 2).to(dev)
    m2.load_state_dict(m1.state_dict())
    xs = torch.randn(4, 3, device=dev)
    ys = torch.randn(4, 2, device=dev)

    def step(model):
        def train_step(x, y, c):
            return torch.nn.functional.mse_loss(model(x), y), c + 1
        return train_step

    loss, c = gradient_accumulation(step(m1), (xs, ys), m1, torch.tensor(0, device=dev))
    ref = 0
    for i in range(4):
        li = torch.nn.functional.mse_loss(m2(xs[i]), ys[i]) / 4
        li.backward()
        ref = ref + li.detach()
    assert int(c.cpu()) == 4
    assert torch.allclose(loss.cpu(), ref.cpu(), atol=1e-6)
    assert torch.allclose(m1.weight.grad.cpu(), m2.weight.grad.cpu(), atol=1e-6)
    only_loss = gradient_accumulation(lambda x, y: torch.nn.functional.mse_loss(m1(x), y),
                                      (xs, ys), m1)
    assert isinstance(only_loss, torch.Tensor) and only_loss.dim() == 0
    with pytest.raises(ValueError, match="cannot be empty"):
        gradient_accumulation(step(m1), (), m1)
    with pytest.raises(ValueError, match="inconsistent first dimension"):
        gradient_accumulation(step(m1), (xs, ys[:3]), m1, torch.tensor(0, device=dev))

    def mutating(x, y, c):
        c += 1
        return torch.nn.functional.mse_loss(m1(x), y), c

    with pytest.raises(AssertionError):
        gradient_accumulation(mutating, (xs, ys), m1, torch.tensor(0, device=dev))


# ------------------------------------------------------------ debug helpers
def test_metrics_compare_utils():
    import torch_xla.debug.metrics_compare_utils as mcu
    report = ("Metric: CompileTime\n  TotalSamples: 2\n  Accumulator: 01m02s\n"
              "  Percentiles: 1%=001ms; 5%=001ms; 10%=001ms; 20%=001ms; 50%=002ms; "
              "80%=002ms; 90%=002ms; 95%=002ms; 99%=002ms\n"
              "Metric: InboundData\n  TotalSamples: 1\n  Accumulator: 1.50GB\n"
              "  Percentiles: 1%=8.00B; 5%=8.00B; 10%=8.00B; 20%=8.00B; 50%=8.00B; "
              "80%=8.00B; 90%=8.00B; 95%=8.00B; 99%=8.00B\n"
              "Counter: aten::nonzero\n  Value: 3\n")
    p = mcu.parse_metrics_report(report)
    assert p["CompileTime__TotalSamples"] == 2.0
    assert p["CompileTime__Accumulator_sec"] == 62.0
    assert p["CompileTime__Percentile_50_sec"] == pytest.approx(0.002)
    assert p["InboundData__Accumulator_mb"] == 1500.0
    assert p["InboundData__Percentile_1_mb"] == pytest.approx(8e-6)
    assert p["aten::nonzero__Value"] == 3
    with pytest.raises(ValueError, match="Unknown metric_str format"):
        mcu._metric_str_to_number("12 parsecs")
    points = mcu.get_data_points_from_metrics_reports([report, "Counter: X\n  Value: 1\n"])
    assert points["aten::nonzero__Value"] == [3, None] and points["X__Value"] == [None, 1]
    assert mcu.compare_metrics(points, report) == ""
    worse = report.replace("Value: 3", "Value: 30")
    assert "aten::nonzero__Value failed its expression check" in mcu.compare_metrics(points,
                                                                                     worse)
    new = report + "Counter: aten::mm\n  Value: 1\n"
    assert "Found new aten counter: aten::mm__Value: 1" in mcu.compare_metrics(points, new)


def test_graph_saver_and_model_comparator(tmp_path, monkeypatch, dev):
    import torch_xla.debug.graph_saver as gs
    import torch_xla.debug.model_comparator as mc
    t = torch.ones(3, device=dev) * 2 + 1
    gs.save_tensors_graph(str(tmp_path), "g", [t])
    files = os.listdir(tmp_path)
    assert len(files) == 1 and files[0].startswith("g-") and files[0].endswith("-0.text")
    assert (tmp_path / files[0]).read_text().strip()
    monkeypatch.setenv("SAVE_GRAPH_FMT", "proto")
    with pytest.raises(RuntimeError, match="Invalid save graph format"):
        gs.save_tensors_graph(str(tmp_path), "g", [t])

    d1, d2 = tmp_path / "a", tmp_path / "b"
    d1.mkdir()
    d2.mkdir()
    mc.configure(str(d1))
    assert mc.save("x", torch.arange(4.0)) is not None
    mc.save("x", torch.ones(2), step=3)
    mc.configure(str(d2))
    mc.save("x", torch.arange(4.0).to(dev))
    mc.save("x", torch.ones(2), step=3)
    assert mc.compare(str(d1), str(d2)) == ""
    mc.configure(str(d2))
    mc.save("x", torch.tensor([0.0, 1.0, 2.5, 3.0]))
    report = mc.compare(str(d1), str(d2))
    assert 'Changes in saved tensor "x" with id=0' in report and "[2]: 2.0 vs. 2.5" in report
    mc.configure(None)


def test_trace_scope_blocks_sync(dev):
    import torch_xla.debug.profiler as xp
    with pytest.raises(RuntimeError, match=r"Expecting scope to be empty but it is step\.\d+"):
        with xp.Trace("step"):
            torch_xla.sync()
    torch_xla.sync()  # the scope is closed again


# ------------------------------------------------------------ misc modules
def test_dlpack_round_trip(dev):
    import torch_xla.utils.dlpack as xdl
    t = torch.arange(6.0, device=dev).view(2, 3)
    back = torch.utils.dlpack.from_dlpack(xdl.to_dlpack(t))
    assert back.device.type == "cpu" and torch.equal(back, torch.arange(6.0).view(2, 3))
    x = xdl.from_dlpack(torch.ones(2, 2))
    assert x.device.type == "xla" and torch.equal(x.cpu(), torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="expects an xla tensor"):
        xdl.to_dlpack(torch.ones(1))


def test_xla_builder_types_and_registry():
    import torch_xla.core.xla_builder as xb
    import torch_xla.core.xla_op_registry as xor
    for name, dtype in xb._XLA_PT_TYPE_MAP.items():
        assert xb.Op.from_torch_type(xb.Op.to_torch_type(name)) == name
    assert xb.Op.to_torch_type(None) == torch.float32
    op = xor.register("double", lambda a: a + a)  # builder ops: tests/python/test_xla_builder.py
    assert torch.equal(op(torch.ones(1, device="xla")).cpu(), torch.full((1,), 2.0))
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        op(torch.ones(1))


def test_custom_compile_options(dev):
    from torch_xla import torch_xla as txla
    f = torch_xla.compile(lambda x: x * 3, custom_compile_options={"xla_flag": True, "n": 2})
    assert torch.equal(f(torch.ones(2, device=dev)).cpu(), torch.full((2,), 3.0))
    assert txla.custom_compile_options() == {"xla_flag": "true", "n": "2"}
    torch_xla.set_custom_compile_options({})
    assert txla.custom_compile_options() == {}
    with pytest.raises(TypeError):
        torch_xla.set_custom_compile_options({"a": [1]})


def test_fsdp_helpers_and_data_parallel(dev):
    from torch_xla.distributed.fsdp import apply_xla_patch_to_nn_linear, checkpoint_module
    import torch_xla.distributed.data_parallel as dp
    lin = torch.nn.Linear(3, 2).to(dev)
    x = torch.randn(4, 3, device=dev, requires_grad=True)
    ref = lin(x)
    ref.sum().backward()
    gw = lin.weight.grad.cpu()
    lin.weight.grad = None
    apply_xla_patch_to_nn_linear(checkpoint_module(lin))
    out = lin(x)
    assert torch.allclose(out.detach().cpu(), ref.detach().cpu())
    out.sum().backward()
    assert torch.allclose(lin.weight.grad.cpu(), gw, atol=1e-6)

    n = torch_xla.device_count()
    par = dp.DataParallel(torch.nn.Linear(2, 1))  # a copy on every device
    assert par.devices == [f"xla:{i}" for i in range(n)]
    loader = [(torch.full((2, 2), float(i)), torch.zeros(2, 1)) for i in range(n)]

    def loop_fn(model, device_loader, device, context):
        assert model.weight.device == device
        return [(str(d.device), d.sum().item()) for d, _ in device_loader]

    results = par(loop_fn, loader)
    assert [r[0][0] for r in results] == par.devices  # each device got its batches
    assert sorted(v for r in results for _, v in r) == [4.0 * i for i in range(n)]
    try:
        with pytest.raises(RuntimeError, match="Cannot replicate"):
            dp.DataParallel(torch.nn.Linear(2, 1), device_ids=["xla:0"])(loop_fn, loader)
    finally:
        xm.set_replication("xla:0", [])


def test_repeat_with_fixed_output_size(clean_metrics, dev):
    from torch_xla.experimental.custom_kernel import repeat_with_fixed_output_size
    x = torch.arange(5.0)
    reps = torch.tensor([0, 2, 1, 0, 3])
    out = repeat_with_fixed_output_size(x.to(dev), reps.to(dev), 4)
    assert torch.equal(out.cpu(), torch.tensor([1.0, 1.0, 2.0, 4.0]))  # cut
    out = repeat_with_fixed_output_size(x.to(dev), reps.to(dev), 8)
    assert torch.equal(out.cpu(), torch.tensor([1.0, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]))
    assert not [n for n in clean_metrics.counter_names() if n.startswith("aten::")]
    with pytest.raises(AssertionError):
        repeat_with_fixed_output_size(torch.ones(2, 2, device=dev), reps.to(dev), 3)


def test_bucketized_collectives_world_of_one(dev):
    a = [torch.ones(2, device=dev), torch.arange(3.0, device=dev)]
    out = xm.all_gather_bucketized(a, bucket_cap_mb=0)
    assert isinstance(out, list) and [t.cpu().tolist() for t in out] == [[1.0, 1.0],
                                                                         [0.0, 1.0, 2.0]]
    single = xm.reduce_scatter_bucketized(xm.REDUCE_SUM, a[:1], 2.0, 0, 1)
    assert isinstance(single, list) and torch.equal(single[0].cpu(), torch.full((2,), 2.0))
    with pytest.raises(TypeError, match="list of Tensors"):
        xm.all_gather_bucketized(a[0])
    with pytest.raises(ValueError, match="length"):
        xm.all_gather_bucketized(a, output=a[:1])
    grads = [torch.ones(2, device=dev)]
    xm.all_reduce_bucketized_gradients(grads, 0.5, None, True, bucket_cap_mb=0)
    assert torch.equal(grads[0].cpu(), torch.full((2,), 0.5))


def test_launch_under_torchrun_and_spmd(monkeypatch):
    seen = []
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")  # what torchrun sets
    monkeypatch.setenv("LOCAL_RANK", "0")
    torch_xla.launch(lambda i, a: seen.append((i, a)), args=("x",))
    assert seen == [(0, "x")]
    monkeypatch.setattr(xr, "is_spmd", lambda: True)
    with pytest.raises(NotImplementedError, match="SPMD"):
        torch_xla.launch(lambda i: None)


def test_dynamo_package_paths():
    # PyTorch/XLA's current module path of the bridge, its config switch,
    # and the torchax backend that needs packages not installed here.
    import torch_xla._dynamo as dyn
    from torch_xla._dynamo import dynamo_backend2, dynamo_bridge
    import torch_xla.core.dynamo_bridge as core_bridge
    assert dyn.config.skip_input_data_check is False
    assert dynamo_bridge.extract_compiled_graph is core_bridge.extract_compiled_graph
    with pytest.raises(ImportError, match="torchax"):
        dynamo_backend2.dynamo_backend(None, ())
