"""Counters and metrics under PyTorch/XLA's names, counted as it counts
them (per-op xla::<op>, LazyTracing, transfers, .item())."""
import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met


def test_per_op_counters_and_clear(dev, clean_metrics):
    t = torch.tensor(100, device=dev)
    t += 2
    t = t * 3
    assert met.counter_value("xla::add") == 1
    assert met.counter_value("xla::mul") == 1
    assert "Counter: xla::add\n  Value: 1\n" in met.metrics_report()
    met.clear_counters()
    assert met.counter_value("xla::add") is None
    assert "xla::add" not in met.counter_names()
    t += 2
    assert met.counter_value("xla::add") == 1


def test_decomposed_and_fallback_ops_are_not_xla_ops(dev, clean_metrics):
    x = torch.randn(5, device=dev)
    torch.nn.functional.selu(x)  # decomposes into elu
    torch.bincount(torch.tensor([1, 2], device=dev))  # CPU fallback
    assert met.counter_value("xla::elu") == 1
    assert met.counter_value("xla::selu") is None
    assert met.counter_value("aten::bincount") == 1
    assert met.counter_value("xla::bincount") is None
    assert met.executed_fallback_ops() == ["aten::bincount"]


def test_lazy_tracing_one_sample_per_op(dev, clean_metrics):
    t = torch.tensor(156, device=dev)
    before = (met.metric_data("LazyTracing") or (0,))[0]
    for _ in range(5):
        t = t + 1
    total, acc, samples = met.metric_data("LazyTracing")
    assert total - before == 5
    assert acc > 0 and all(v > 0 for _, v in samples)


def test_transfers(dev, clean_metrics):
    t = torch.arange(6, dtype=torch.float32).to(dev)
    names = met.metric_names()
    assert "TensorToData" in names and "TransferToDeviceTime" in names
    # PyTorch/XLA's direction: host to device is OutboundData, device to
    # host InboundData (pjrt_computation_client.cc's TransferToDevice /
    # TransferFromDevice)
    assert met.metric_data("OutboundData")[1] == 24.0
    assert met.metric_data("InboundData") is None
    assert met.counter_value("CreateDataHandles") == 1
    t.cpu()
    assert met.metric_data("InboundData")[1] == 24.0
    assert met.metric_data("OutboundData")[1] == 24.0
    met.clear_metrics()
    assert "TensorToData" not in met.metric_names()
    assert met.metric_data("TensorToData") is None


def test_item_counts_local_scalar_dense(dev, clean_metrics):
    t = torch.tensor(3, device=dev) * 2
    if t:
        t.item()
    assert met.counter_value("aten::_local_scalar_dense") == 2
    assert "aten::_local_scalar_dense" in met.short_metrics_report(
        counter_names=["CreateCompileHandles"], metric_names=["InboundData"])
    # listed as an executed fallback, as PyTorch/XLA lists it
    assert met.executed_fallback_ops() == ["aten::_local_scalar_dense"]
    assert torch_xla._XLAC._get_executed_fallback_ops() == ["aten::_local_scalar_dense"]
    met.clear_counters()
    assert met.executed_fallback_ops() == []


def test_fallback_counter_names_carry_the_overload(dev, clean_metrics):
    # PyTorch/XLA names a fallback by its operator and overload
    x = torch.tensor([[1.0], [2.0]], device=dev)
    r = torch.repeat_interleave(x, torch.tensor([1, 2], device=dev), dim=0)
    assert r.cpu().tolist() == [[1.0], [2.0], [2.0]]
    assert "aten::repeat_interleave.Tensor" in met.executed_fallback_ops()
    assert met.counter_value("aten::repeat_interleave.Tensor") == 1
    assert met.counter_value("aten::repeat_interleave") is None


def test_scalar_operands_and_compile_handles(dev, clean_metrics):
    # Shapes no other test uses: the compile cache is per process and scalar
    # values are not part of a graph's key.
    t = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]] * 3, device=dev)
    u = t * 2.5 + 7
    assert met.counter_value("DeviceDataCacheMiss") == 2
    torch_xla.sync()
    u.cpu()
    compiles = met.counter_value("UncachedCompile")
    assert compiles >= 1
    assert met.counter_value("CreateCompileHandles") == compiles
    met.clear_counters()
    assert met.counter_value("CreateCompileHandles") is None
    (torch.tensor([[3.0] * 3] * 5, device=dev) * 1.5 - 2).cpu()  # a new graph: one more compile
    assert met.counter_value("CreateCompileHandles") == met.counter_value("UncachedCompile")


def test_increment_counter(clean_metrics):
    torch_xla._XLAC._xla_increment_counter("FakeCounter", 2)
    torch_xla._XLAC._xla_increment_counter("FakeCounter", 3)
    assert met.counter_value("FakeCounter") == 5
    assert torch_xla._XLAC._xla_counter_value("FakeCounter") == 5
    assert "FakeCounter" in torch_xla._XLAC._xla_counter_names()


def test_graph_size_and_alias_count_metrics(dev, clean_metrics):
    w = torch.randn(64).to(dev)
    torch_xla.sync(wait=True)
    met.clear_metrics()
    w.mul_(1.5).add_(1.0)  # an in-place update (one fused kernel) takes w's buffer
    torch_xla.sync(wait=True)
    total, _, samples = met.metric_data("TensorsGraphSize")
    assert total == 1 and samples[-1][1] == 5.0  # param, 2 scalars, mul, add
    total, acc, _ = met.metric_data("InputOutputAliasCount")
    assert total == 1 and acc == 1.0
    (w * 2).cpu()  # a new output: nothing aliased
    total, acc, _ = met.metric_data("InputOutputAliasCount")
    assert total == 2 and acc == 1.0


def test_alias_count_follows_in_place_updates(dev, clean_metrics):
    """PyTorch/XLA's buffer donors at a step's sync: inputs whose data an
    output's in-place update replaces; a tensor sharing the data (a clone)
    keeps its value."""
    t1 = torch.randn(3, 7).to(dev)
    t2 = torch.randn(3, 7).to(dev)
    t3 = torch.randn(3, 7).to(dev)
    keep = t3.clone()
    torch_xla.sync(wait=True)
    expect = (t1.cpu() + t2.cpu(), t3.cpu() * 2)
    met.clear_metrics()
    s = t1 + t2
    t1 *= 2.0
    t2 += 2.0
    t3.mul_(2)
    torch_xla.sync(wait=True)
    _, acc, _ = met.metric_data("InputOutputAliasCount")
    assert acc == 3.0
    torch.testing.assert_close(s.cpu(), expect[0])
    torch.testing.assert_close(t3.cpu(), expect[1])
    torch.testing.assert_close(keep.cpu() * 2, expect[1])
    met.clear_metrics()
    (t1 + 1).cpu()  # not a step's sync: nothing donated
    assert met.metric_data("InputOutputAliasCount")[1] == 0.0


def test_user_buffer_donation_counts(dev, clean_metrics):
    xlac = torch_xla._XLAC
    t0 = torch.randn(2, 9).to(dev)
    torch_xla.sync(wait=True)
    assert xlac._set_buffer_donation(t0, True) and xlac._get_buffer_donation(t0)
    assert not xlac._set_buffer_donation(t0 + 1, True)  # a pending value holds no data
    assert met.counter_value("XlaSetBufferDonation") == 1
    for enabled, expect in ((False, 0.0), (True, 1.0)):
        xlac._xla_set_enable_alias_with_buffer_donor_config(enabled)
        try:
            met.clear_metrics()
            t1 = t0 * 3
            xlac._xla_sync_multi([t1], [str(dev)], True, False)
            assert met.metric_data("InputOutputAliasCount")[1] == expect
        finally:
            xlac._xla_set_enable_alias_with_buffer_donor_config(False)
    assert xlac._set_buffer_donation(t0, False) and not xlac._get_buffer_donation(t0)


def test_eager_op_metrics(dev, clean_metrics):
    x = torch.randn(11, 3).to(dev)  # a shape no other test compiles x * 2 for
    with torch_xla.experimental.eager_mode_context(True):
        met.clear_all()
        x * 2
        x * 2
    # two executions, the first of which compiled
    assert met.metric_data("EagerOpCompileTime")[0] == 1
    assert met.metric_data("EagerOpExecuteTime")[0] == 2
    # as PyTorch/XLA: eager ops are not sampled in CompileTime/ExecuteTime
    assert met.metric_data("CompileTime") is None
    assert met.metric_data("ExecuteTime") is None


def test_create_xla_tensor_counts_python_tensors(dev, clean_metrics):
    # PyTorch/XLA counts its tensor objects: torch.tensor makes one
    t = torch.tensor(2077, device=dev)
    assert met.counter_value("CreateXlaTensor") == 1
    u = t + 1  # and one for the wrapped number 1, freed after the add
    assert met.counter_value("CreateXlaTensor") == 3
    assert met.counter_value("DestroyXlaTensor") == 1
    del u
    assert met.counter_value("DestroyXlaTensor") == 2
    torch_xla._XLAC._xla_increment_counter("CreateXlaTensor", 3)
    assert met.counter_value("CreateXlaTensor") == 6
    assert torch._is_functional_tensor(t) and t.cpu().item() == 2077


def test_runtime_scalars_count_as_transfers(dev, clean_metrics):
    # the RNG key goes to the device with the execution, as PyTorch/XLA
    # transfers its seed
    torch.rand(3, 5, device=dev).cpu()
    assert met.counter_value("CreateDataHandles") >= 1
    assert "TransferToDeviceTime" in met.metric_names()
    assert met.metric_data("OutboundData")[1] >= 8.0


def test_alias_count_sampled_once_per_graph_and_donors(dev, clean_metrics):
    # gradient accumulation: the first step's graph has no donor, the next
    # ones donate the accumulated gradient; PyTorch/XLA compiles (and
    # samples) each (graph, donors) pair once
    w = torch.randn(13, 6).to(dev).requires_grad_()
    x = torch.randn(2, 13).to(dev)
    torch_xla.sync()
    met.clear_metrics()
    for _ in range(4):
        (x @ w).sum().backward()
        torch_xla.sync()
    total, acc, _ = met.metric_data("InputOutputAliasCount")
    assert (total, acc) == (2, 1.0)
    met.clear_metrics()  # from here each pair is sampled again on its next run
    (x @ w).sum().backward()
    torch_xla.sync()
    total, acc, _ = met.metric_data("InputOutputAliasCount")
    assert (total, acc) == (1, 1.0)


def test_donated_user_data_becomes_a_placeholder(dev, clean_metrics):
    xlac = torch_xla._XLAC
    t0 = torch.randn(4, 3, 2).to(dev)
    t1 = torch.randn(4, 3, 2).to(dev)
    t0c = t0.cpu()
    expect = t0c + t1.cpu()
    assert xlac._set_buffer_donation(t0, True)
    t2 = t0 + t1
    t1 += 2
    xlac._xla_sync_multi([t0, t1, t2], [str(dev)], True, False)  # not a step: kept
    assert not xlac._is_placecholder(t0)
    t3 = t0 * 1
    torch_xla.sync(wait=True)  # a step's sync donates it
    assert xlac._is_placecholder(t0) and not xlac._is_placecholder(t1)
    torch.testing.assert_close(t2.cpu(), expect)
    torch.testing.assert_close(t3.cpu(), t0c)
    with pytest.raises(RuntimeError, match=r"float32\[4,3,2\] on device CPU:0 is deleted"):
        t0.cpu()
    with pytest.raises(RuntimeError, match="is deleted"):
        t0 + 1


def test_scalar_values_transfer_once(dev, clean_metrics):
    # PyTorch/XLA caches scalar device data: a value already sent is not
    # transferred again
    t1, t2, t3 = (torch.randn(1, 7).to(dev) for _ in range(3))
    t1.addcdiv_(t2, t3, value=0.123)
    torch_xla.sync()
    assert met.metric_data("TransferToDeviceTime")[0] == 4
    t1.addcdiv_(t2, t3, value=0.123)
    t1.addcdiv_(t2, t3, value=0.123)
    torch_xla.sync()
    assert met.metric_data("TransferToDeviceTime")[0] == 4
    t1.addcdiv_(t2, t3, value=0.3771)  # a new value
    torch_xla.sync()
    assert met.metric_data("TransferToDeviceTime")[0] == 5
