"""SPMD mode's virtual device (PyTorch/XLA's `SPMD:0`): data copied to it
stays on the host until an op reads it or it is sharded, then moves to the
device; debug info, transfer and execution metrics as PyTorch/XLA reports
them there (docs/spmd.md, "Virtual device")."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torchtpu import bridge

pytestmark = pytest.mark.usefixtures("in_spmd_mode")

info = torch_xla._XLAC._get_xla_tensor_debug_info


@pytest.fixture
def clean():
    torch_xla.sync(wait=True)
    met.clear_all()
    yield


def mesh4():
    return xs.Mesh(np.arange(4), (1, 4), ("x", "y"))


def on_host(t):
    return bridge.handle_of(t).on_host


def test_copied_data_stays_on_the_host(dev, clean):
    cpu = torch.randn(5, 5)
    t = cpu.to(dev)
    text = info(t)
    assert "Device: SPMD:0\n" in text
    assert "IR: None\nXLAData: None\nTensor on host: with size [5, 5]\n" in text
    assert on_host(t)
    assert "TransferToDeviceTime" not in met.metric_names()
    assert "TensorToData" not in met.metric_names()
    assert met.metric_data("OutboundData") is None
    # reading it back copies from the host: no transfer, still on the host
    assert torch.equal(t.cpu(), cpu)
    assert met.metric_data("InboundData") is None and on_host(t)
    assert "TransferFromDeviceTime" not in met.metric_names()


def test_first_op_moves_it_to_the_device_once(dev, clean):
    cpu = torch.randn(8, 8)
    t = cpu.to(dev)
    u = t + t
    text = info(t)
    assert not on_host(t) and "Tensor on host: None\n" in text
    assert "IR: [] xla::device_data, xla_shape=f32[8,8]{1,0}, dynamic_dims: (), " \
           "device=SPMD:0\n" in text
    assert "XLAShardedData: \n  Data Device: SPMD:0\n  Data Shape: f32[8,8]\n" \
           "  OpSharding: {replicated}\n  NumShards: 4\n" in text
    assert "TransferToDeviceTime" in met.metric_names() and "TensorToData" in met.metric_names()
    v = t * 3  # already on the device: no second transfer
    assert met.metric_data("OutboundData")[:2] == (1, 256.0)
    assert met.counter_value("CreateDataHandles") == 1
    assert torch.allclose(u.cpu(), cpu * 2) and torch.allclose(v.cpu(), cpu * 3)


def test_mark_sharding_moves_it_as_sharded_data(dev, clean):
    cpu = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    t = cpu.to(dev)
    assert "Tensor on host: with size [8, 8]" in info(t)
    xs.mark_sharding(t, mesh4(), (0, 1))
    text = info(t)
    assert "Tensor on host: None\n" in text and "xla::device_data" in text
    assert "XLAShardedData: \n  Data Device: SPMD:0\n" in text
    assert "  OpSharding: {devices=[1,4]0,1,2,3}\n  NumShards: 4\n" in text
    assert "TransferToDeviceTime" in met.metric_names()
    # one transfer of the whole tensor, as PyTorch/XLA sends each shard once
    assert met.metric_data("OutboundData")[1] == 256.0
    assert torch.equal(t.cpu(), cpu)
    assert torch.equal((t + 1).cpu(), cpu + 1)


@pytest.mark.parametrize("shape,spec,mesh_shape", [
    ((7, 5), (0, None), (4, 1)),      # uneven: the last shard is padded
    ((6, 4), (0, None), (2, 2)),      # partially replicated
    ((3, 9, 2), (None, 1, 0), (2, 2)),
])
def test_held_value_sharded_on_the_host(dev, clean, shape, spec, mesh_shape):
    cpu = torch.randn(*shape)
    t = cpu.to(dev)
    mesh = xs.Mesh(np.arange(4), mesh_shape)
    xs.mark_sharding(t, mesh, spec)
    assert not on_host(t)
    # each device is sent its shard: no program slices a whole copy
    assert met.metric_data("ExecuteTime") is None and met.counter_value("ExecuteReplicated") is None
    assert torch.equal(t.cpu(), cpu)
    shards = t.global_tensor.local_shards if hasattr(t, "global_tensor") else \
        xs.wrap_if_sharded(t).local_shards
    assert len(shards) == 4
    assert torch.allclose((t * 2 + 1).cpu(), cpu * 2 + 1)


def test_torch_tensor_on_xla_is_held_too(dev, clean):
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=dev)
    assert on_host(t) and "Tensor on host: with size [2, 2]" in info(t)
    xs.mark_sharding(t, mesh4(), (0, None))
    assert not on_host(t)
    # PyTorch/XLA's test_outbound_data_metrics: sent once, not twice
    assert met.metric_data("OutboundData")[1] == 16.0


def test_held_value_behaves_as_device_data(dev):
    cpu = torch.randn(4, 6)
    t = cpu.to(dev)
    t.add_(1)  # in place: the new value is computed from the moved data
    assert not on_host(t)
    assert torch.allclose(t.cpu(), cpu + 1)
    w = cpu.to(dev)
    w[1] = 7.0  # a view write
    expect = cpu.clone()
    expect[1] = 7.0
    assert torch.equal(w.cpu(), expect)
    z = torch.zeros(4, 6, device=dev)
    z.copy_(cpu)  # copy into an xla tensor: held until used
    assert on_host(z) and torch.equal(z.cpu(), cpu)
    assert torch.allclose((z @ cpu.T.to(dev)).cpu(), cpu @ cpu.T, atol=1e-5)
    # views, dtype changes and syncs over held values
    h = cpu.to(dev)
    assert torch.equal(h[:, 2:4].cpu(), cpu[:, 2:4])
    assert torch.equal(h.to(torch.float64).cpu(), cpu.to(torch.float64))
    k = cpu.to(dev)
    torch_xla.sync(wait=True)  # nothing to run for held data
    assert on_host(k) and torch.equal(k.cpu(), cpu)


def test_held_value_in_graph_text_and_buffer_pointer(dev):
    cpu = torch.randn(3)
    t = cpu.to(dev)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([t])
    assert "parameter(0)" in hlo and not on_host(t)
    t2 = cpu.to(dev)
    assert torch_xla._XLAC._unsafe_buffer_pointer(t2) != 0 and not on_host(t2)
    assert torch.equal(t2.cpu(), cpu)


def test_fallback_results_are_held(dev, clean):
    x = torch.tensor([1, 2, 2, 0], device=dev)
    out = torch.bincount(x)  # CPU fallback: its result comes back held
    assert met.counter_value("aten::bincount") == 1
    assert on_host(out) and "Tensor on host: with size [3]" in info(out)
    assert out.cpu().tolist() == [1, 1, 2]


def test_execute_replicated_once_per_execution(dev, clean):
    a = torch.ones(4, 4).to(dev)
    xs.mark_sharding(a, mesh4(), (0, 1))
    a += 2
    torch_xla.sync(wait=True)
    xm.wait_device_ops()  # sampled when the last device's program ends
    assert met.counter_value("ExecuteReplicated") == 1
    assert met.metric_data("ExecuteReplicatedTime")[0] == 1
    assert met.metric_data("ExecuteTime") is None
    b = torch.ones(3).to(dev) * 5  # unannotated: still a replicated execution
    torch_xla.sync(wait=True)
    xm.wait_device_ops()
    assert met.counter_value("ExecuteReplicated") == 2
    assert met.metric_data("ExecuteReplicatedTime")[0] == 2
    assert torch.equal(a.cpu(), torch.full((4, 4), 3.0))
    assert torch.equal(b.cpu(), torch.full((3,), 5.0))


def test_reads_reassemble_sharded_data(dev, clean):
    a = torch.randn(8, 4).to(dev)
    xs.mark_sharding(a, mesh4(), (1, 0))
    b = (a * 2).cpu()
    assert met.counter_value("ReplicateShardedData") == 1
    assert met.metric_data("InboundData")[1] == 128.0
    assert torch.allclose(b, a.cpu() * 2)
    assert met.counter_value("ReplicateShardedData") == 2


def test_data_loaded_without_a_sharding_is_replicated_device_data(dev, clean):
    x = torch.randn(16, 8)
    t = xm.send_cpu_data_to_device([x], dev)[0]
    assert torch_xla._XLAC._get_xla_sharding_spec(t) == "{replicated}"
    text = info(t)
    assert "Tensor on host: None" in text and "xla::device_data" in text
    assert "TransferToDeviceTime" in met.metric_names()
    s = xm.send_cpu_data_to_device([x], dev, input_sharding=xs.ShardingSpec(mesh4(), (0, 1)))[0]
    assert torch_xla._XLAC._get_xla_sharding_spec(s) == "{devices=[1,4]0,1,2,3}"
    assert "XLAShardedData" in info(s) and "Device: SPMD:0" in info(s)
    assert torch.equal(t.cpu(), x) and torch.equal(s.cpu(), x)
    # a replicated annotation may be replaced by a sharding
    xs.mark_sharding(t, mesh4(), (1, None))
    assert torch_xla._XLAC._get_xla_sharding_spec(t) == "{devices=[4,1]0,1,2,3}"
    assert torch.equal(t.cpu(), x)


def test_xla_process_group_refused_in_spmd_mode():
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401  (registers 'xla' and xla://)
    with pytest.raises(AssertionError, match="not supported with SPMD"):
        dist.init_process_group("xla", init_method="xla://")


OUTSIDE = textwrap.dedent(r"""
    import torch, torch_xla
    import torch_xla.debug.metrics as met
    from torchtpu import bridge
    dev = torch_xla.device()
    met.clear_all()
    t = torch.randn(5, 5).to(dev)
    text = torch_xla._XLAC._get_xla_tensor_debug_info(t)
    assert not bridge.handle_of(t).on_host, text
    assert "Device: CPU:0" in text and "Tensor on host: None" in text, text
    assert "TransferToDeviceTime" in met.metric_names()
    assert met.metric_data("OutboundData")[1] == 100.0
    (t + 1).cpu()
    assert met.counter_value("ExecuteReplicated") is None
    assert met.metric_data("ExecuteTime")[0] == 1
    assert met.counter_value("ReplicateShardedData") is None
    print("OK")
""")


def test_outside_spmd_mode_data_moves_at_once():
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4")
    env.pop("XLA_USE_SPMD", None)
    r = subprocess.run([sys.executable, "-c", OUTSIDE], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]
