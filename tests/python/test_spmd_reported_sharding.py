"""Shardings a synced value reports in SPMD mode (issue 30): as PyTorch/XLA
gives a synced tensor its compiled program's output sharding,
get_sharding_spec / _get_xla_sharding_spec / get_sharding_type report a
result held as shards by its shards' layout and a result a graph cut wrote
as one buffer as replicated; pending values and uploaded data with no
annotation report "" (4 virtual devices in process, conftest.py)."""
import numpy as np
import pytest
import torch
import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torchtpu import _C, bridge

ALL4 = "0,1,2,3"


def spec(t):
    return torch_xla._XLAC._get_xla_sharding_spec(t)


def held(t):
    return _C.tensor_storage_layout(bridge.handle_of(t)) is not None


@pytest.mark.usefixtures("in_spmd_mode")
def test_unpartitioned_result_reports_replicated():
    t1 = torch.randn(4, 4).to("xla")
    t2 = torch.randn(4, 4).to("xla")
    t3 = t1 @ t2
    assert spec(t3) == ""  # pending: no program yet
    torch_xla.sync()
    assert spec(t3) == "{replicated}"
    assert xs.get_sharding_type(t3) == xs.ShardingType.REPLICATED
    assert torch_xla._XLAC._get_xla_sharding_type(t3) == int(xs.ShardingType.REPLICATED)
    # Uploaded data read by the program keeps no sharding.
    assert spec(t1) == "" and xs.get_sharding_type(t1) is None
    # A new pending value of the same Python tensor reports nothing again.
    t3.add_(1)
    assert spec(t3) == ""


@pytest.mark.usefixtures("in_spmd_mode")
def test_partitioned_results_report_propagated_layouts():
    mesh = xs.Mesh(np.arange(4), (4, 1), ("data", "model"))
    a0, w0 = torch.randn(8, 16), torch.randn(16, 4)
    a, w = a0.to("xla"), w0.to("xla")
    xs.mark_sharding(a, mesh, ("data", None))
    y = torch.relu(a @ w)
    s = y.sum()
    met.clear_all()
    torch_xla.sync()
    assert met.counter_value("SpmdPartitionedExecution") == 1
    # y follows a's rows (propagated, never annotated) and is held so.
    assert held(y)
    assert spec(y) == "{devices=[4,1]" + ALL4 + "}"
    assert xs.get_sharding_type(y) == xs.ShardingType.TILED
    assert _C.sharding_get(bridge.handle_of(y)) is None  # reported, not annotated
    # The full sum is one buffer: replicated.
    assert not held(s) and spec(s) == "{replicated}"
    torch.testing.assert_close(y.cpu(), torch.relu(a0 @ w0))


@pytest.mark.usefixtures("in_spmd_mode")
def test_values_held_as_shards_never_report_empty():
    mesh = xs.Mesh(np.arange(4), (2, 2), ("data", "model"))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to("xla")
    xs.mark_sharding(model[0].weight, mesh, ("model", None))
    xs.mark_sharding(model[2].weight, mesh, (None, "model"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        x = torch.randn(8, 8).to("xla")
        xs.mark_sharding(x, mesh, ("data", None))
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch_xla.sync()
    values = list(model.parameters()) + [p.grad for p in model.parameters()]
    values += [st["momentum_buffer"] for st in opt.state.values()]
    sharded = [v for v in values if held(v)]
    assert len(sharded) >= 4  # weights, their gradients and momenta
    for v in sharded:
        layout = _C.tensor_storage_layout(bridge.handle_of(v))
        assert spec(v) == _C.sharding_text(layout, v.dim()) != ""
    for v in values:
        assert spec(v) != ""  # every synced value reports a layout


def test_outside_spmd_mode_reports_nothing():
    assert not xr.is_spmd()
    t = torch.randn(4, 4).to("xla") * 2
    torch_xla.sync()
    assert spec(t) == "" and xs.get_sharding_type(t) is None


@pytest.mark.usefixtures("in_spmd_mode")
def test_local_shards_of_synced_values():
    mesh = xs.Mesh(np.arange(4), (4,), ("data",))
    a0 = torch.randn(10, 3)
    a = a0.to("xla")
    xs.mark_sharding(a, mesh, ("data", None))
    y = a * 2  # propagated rows, never annotated
    s = y.sum()
    torch_xla.sync()
    shards = torch_xla._XLAC._get_local_shards([y])[0]
    assert [d for _, d in shards] == [f"CPU:{i}" for i in range(4)]
    want = torch.nn.functional.pad(a0 * 2, (0, 0, 0, 2))  # 10 rows -> 4 tiles of 3
    for i, (data, _) in enumerate(shards):
        torch.testing.assert_close(data, want[3 * i:3 * i + 3])
    reps = torch_xla._XLAC._get_local_shards([s])[0]
    assert len(reps) == 4
    for data, _ in reps:
        torch.testing.assert_close(data, (a0 * 2).sum())
    uploaded = torch.randn(2).to("xla")
    with pytest.raises(RuntimeError, match="Tensor is not sharded"):
        torch_xla._XLAC._get_local_shards([uploaded])


@pytest.mark.usefixtures("in_spmd_mode")
def test_cleared_result_reports_nothing_until_synced_again():
    mesh = xs.Mesh(np.arange(4), (4,), ("data",))
    a = torch.randn(8, 4).to("xla")
    xs.mark_sharding(a, mesh, ("data", None))
    y = a + 1
    torch_xla.sync()
    assert spec(y) == "{devices=[4,1]" + ALL4 + "}"
    xs.clear_sharding(y)  # clears the reported layout too, as PyTorch/XLA
    assert spec(y) == "" and not held(y)
    z = y * 2
    torch_xla.sync()
    assert spec(z) == "{replicated}"


def test_host_reads_count_replicate_sharded_data_in_spmd_mode(request):
    # PyTorch/XLA counts ReplicateShardedData for each value it reads to the
    # host in SPMD mode (every value there is sharded data, replicated ones
    # too); outside SPMD mode nothing is counted.
    met.clear_counters()
    torch.ones(4).to("xla").add(1).cpu()
    assert not met.counter_value("ReplicateShardedData")
    request.getfixturevalue("in_spmd_mode")
    mesh = xs.Mesh(np.arange(4), (4,), ("data",))
    a = torch.arange(8.0).to("xla")
    xs.mark_sharding(a, mesh, ("data",))
    b = a * 2
    r = torch.ones(3).to("xla") + 1
    torch_xla.sync()
    met.clear_counters()
    assert b.cpu().tolist() == [2.0 * i for i in range(8)]
    assert r.cpu().tolist() == [2.0] * 3
    assert met.counter_value("ReplicateShardedData") == 2
