"""Sharding annotations (issue 7): torch_xla.distributed.spmd's mesh and
partition-spec semantics (HloSharding text as PyTorch/XLA writes it), the
annotation in the graph hash and in the emitted StableHLO, values unchanged
on the engine's own backend, and 8-way SPMD-partitioned execution through
XLA's CPU plugin (torchtpu.spmd.run_spmd) compared with PyTorch CPU."""
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torchtpu import pjrt, spmd

MLIR_OPT = xm._mlir_opt()
CPU_PLUGIN = pjrt.find_cpu_plugin()
needs_plugin = pytest.mark.skipif(CPU_PLUGIN is None,
                                  reason="XLA's CPU PJRT plugin (pip install xla-cpu-pjrt) is "
                                         "not installed")
needs_mlir = pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-19 is not installed")


@pytest.fixture
def dev():
    return torch_xla.device()


@pytest.fixture
def spmd_mode():
    """xr.use_spmd() for one test (it makes collectives SPMD ones)."""
    before = xr._spmd
    xr.use_spmd()
    yield
    xr._spmd = before


# Each test runs in SPMD mode and leaves the mode as it found it (conftest.py).
pytestmark = pytest.mark.usefixtures("in_spmd_mode")


def mesh24():
    return xs.Mesh(np.arange(8), (2, 4), ("data", "model"))


# ------------------------------------------------------ mesh and partition specs
@pytest.mark.parametrize("spec, text", [
    (("data", "model"), "{devices=[2,4]0,1,2,3,4,5,6,7}"),
    (("model", "data"), "{devices=[4,2]0,4,1,5,2,6,3,7}"),
    ((0, None), "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"),
    ((None, "model"), "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"),
    ((("data", "model"), None), "{devices=[8,1]0,1,2,3,4,5,6,7}"),
    ((None, ("model", "data")), "{devices=[1,8]0,4,1,5,2,6,3,7}"),
    ((None, None), "{replicated}"),
])
def test_partition_spec_text(dev, spec, text):
    t = torch.zeros(8, 8).to(dev)
    assert xs.get_sharding_spec(t) == ""
    assert xs.mark_sharding(t, mesh24(), spec).global_tensor is t
    assert xs.get_sharding_spec(t) == text


def test_mesh_device_order_and_types(dev):
    mesh = xs.Mesh([3, 2, 1, 0], (2, 2), ("x", "y"))
    assert mesh.get_logical_mesh().tolist() == [[3, 2], [1, 0]]
    assert list(mesh.shape().items()) == [("x", 2), ("y", 2)] and mesh.size() == 4
    t = torch.zeros(4, 2).to(dev)
    xs.mark_sharding(t, mesh, ("x", "y"))
    assert xs.get_sharding_spec(t) == "{devices=[2,2]3,2,1,0}"
    assert xs.get_sharding_type(t) == xs.ShardingType.TILED
    # A different sharding over an existing one needs clear_sharding first.
    with pytest.raises(RuntimeError, match="Existing annotation must be cleared first"):
        xs.mark_sharding(t, mesh, ("x", None))
    xs.clear_sharding(t)
    xs.mark_sharding(t, mesh, ("x", None))
    assert xs.get_sharding_type(t) == xs.ShardingType.PARTIAL
    xs.clear_sharding(t)
    assert xs.get_sharding_spec(t) == "" and xs.get_sharding_type(t) is None


def test_spec_errors(dev):
    t = torch.zeros(8, 8).to(dev)
    with pytest.raises(ValueError, match=r"Partition spec length \(1\) should be equal to the "
                                         r"input rank \(2\)"):
        xs.mark_sharding(t, mesh24(), ("data",))
    with pytest.raises(AssertionError, match="does not have"):
        xs.mark_sharding(t, mesh24(), ("batch", None))
    with pytest.raises(ValueError, match="uses mesh axis 0 twice"):
        xs.mark_sharding(t, mesh24(), ("data", "data"))
    with pytest.raises(ValueError, match="outside the mesh's 2 axes"):
        xs.mark_sharding(t, mesh24(), (2, None))
    with pytest.raises(ValueError, match=r"Number of device IDs \(6\) must match mesh size"):
        xs.Mesh(np.arange(6), (2, 4))
    with pytest.raises(ValueError, match="Device IDs must be unique"):
        xs.Mesh([0, 0, 1, 2], (2, 2))
    with pytest.raises(TypeError, match="xla device"):
        xs.mark_sharding(torch.zeros(2), mesh24(), (None,))
    assert xs.get_sharding_spec(t) == ""


def test_module_paths():
    from torch_xla.distributed.spmd import xla_sharding
    assert xla_sharding.Mesh is xs.Mesh and xla_sharding.mark_sharding is xs.mark_sharding


def test_hybrid_mesh(dev):
    mesh = xs.HybridMesh(ici_mesh_shape=(2, 4), axis_names=("a", "b"))
    assert mesh.get_logical_mesh().tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="several slices"):
        xs.HybridMesh(ici_mesh_shape=(2, 2), dcn_mesh_shape=(2, 1))


def test_global_mesh_and_runtime():
    mesh = mesh24()
    xs.set_global_mesh(mesh)
    assert xs.get_global_mesh() is mesh
    one = xs.get_1d_mesh("data")
    assert one.mesh_shape == (xr.global_runtime_device_count(),) and one.axis_names == ("data",)
    before = xr._spmd
    xr.use_spmd()
    assert xr.is_spmd()
    xr._spmd = before
    with pytest.raises(NotImplementedError):
        xr.use_spmd(auto=True)


# ----------------------------------------------------------- graph and emission
def test_hash_values_and_inplace(dev):
    a = torch.randn(8, 4)
    x = a.to(dev)
    torch_xla.sync()
    (x * 2).cpu()
    before = met.counter_value("UncachedCompile") or 0
    (x * 2).cpu()
    assert (met.counter_value("UncachedCompile") or 0) == before  # cached
    xs.mark_sharding(x, mesh24(), ("data", None))
    y = (x * 2).cpu()
    # The annotation is part of the graph's hash: a new compile, same values.
    assert (met.counter_value("UncachedCompile") or 0) == before + 1
    torch.testing.assert_close(y, a * 2, rtol=0, atol=0)
    # An in-place update keeps the tensor's annotation.
    x.add_(1)
    assert xs.get_sharding_spec(x) == "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"
    torch.testing.assert_close(x.cpu(), a + 1, rtol=0, atol=0)


GOLDEN_SHARDED = """\
module @"torchtpu" attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func @main(%arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"}, %arg1: tensor<f32> {mhlo.sharding = "{replicated}"}) -> (tensor<8x4xf32> {mhlo.sharding = "{devices=[2,4]0,1,2,3,4,5,6,7}"}) {
    %0 = "stablehlo.broadcast_in_dim"(%arg1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<8x4xf32>
    %1 = "stablehlo.multiply"(%arg0, %0) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %2 = "stablehlo.custom_call"(%1) {call_target_name = "Sharding", mhlo.sharding = "{devices=[2,4]0,1,2,3,4,5,6,7}"} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %2 : tensor<8x4xf32>
  }
}
"""


def test_golden_sharded_text(dev):
    x = torch.randn(8, 4).to(dev)
    xs.mark_sharding(x, mesh24(), ("data", None))
    y = x * 3.0
    xs.mark_sharding(y, mesh24(), ("data", "model"))
    assert xm.get_stablehlo([y]) == GOLDEN_SHARDED
    xs.clear_sharding(x)
    xs.clear_sharding(y)
    assert "mhlo" not in xm.get_stablehlo([y])


def test_mismatched_partition_counts(dev):
    x = torch.randn(8, 4).to(dev)
    xs.mark_sharding(x, mesh24(), ("data", None))
    y = x + 1
    xs.mark_sharding(y, xs.Mesh(np.arange(2), (2,)), (0, None))
    with pytest.raises(RuntimeError, match="sharded over 2 devices but instruction %0 over 8"):
        xm.get_stablehlo([y])


def _sharded_mlp_step(dev, batch=16):
    """A 2-layer MLP forward + backward with Megatron-style shardings: the
    batch split over 'data', the first weight by rows (output features)
    and the second by columns over 'model'. Returns (xla outputs, CPU
    reference outputs)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 4))
    x = torch.randn(batch, 12)
    target = torch.randint(0, 4, (batch,))
    ref = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    w1, b1, w2, b2 = ref
    loss_ref = F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), target)
    loss_ref.backward()
    mesh = mesh24()
    xm_model = model.to(dev)
    xw1, xb1, xw2, xb2 = xm_model.parameters()
    xs.mark_sharding(xw1, mesh, ("model", None))
    xs.mark_sharding(xb1, mesh, ("model",))
    xs.mark_sharding(xw2, mesh, (None, "model"))
    xx, xt = x.to(dev), target.to(dev)
    xs.mark_sharding(xx, mesh, ("data", None))
    loss = F.cross_entropy(xm_model(xx), xt)
    loss.backward()
    grads = [p.grad for p in xm_model.parameters()]
    xs.mark_sharding(grads[0], mesh, ("model", None))
    outs = [loss] + grads
    want = [loss_ref.detach()] + [p.grad for p in ref]
    return outs, want


@needs_mlir
def test_sharded_mlp_text_parses(dev):
    outs, _ = _sharded_mlp_step(dev)
    text = xm.get_stablehlo(outs)
    assert text.count('"stablehlo.custom_call"') >= 1
    assert 'mhlo.sharding = "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"' in text
    r = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect"], input=text,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "mhlo.num_partitions = 8" in r.stdout


# ------------------------------------------------- 8-way through XLA's CPU plugin
@needs_plugin
def test_spmd_matmul_8_way(dev):
    a, b = torch.randn(16, 12), torch.randn(12, 8)
    xa, xb = a.to(dev), b.to(dev)
    mesh = mesh24()
    xs.mark_sharding(xa, mesh, ("data", None))
    xs.mark_sharding(xb, mesh, (None, "model"))
    c = xa @ xb
    xs.mark_sharding(c, mesh, ("data", "model"))
    (value,), (shards,) = xs.run_spmd([c], with_shards=True)
    want = a @ b
    torch.testing.assert_close(value, want, rtol=1e-5, atol=1e-5)
    # Really partitioned: device p returned only its [8, 2] tile.
    for p in range(8):
        i, j = divmod(p, 4)
        assert tuple(shards[p].shape) == (8, 2)
        torch.testing.assert_close(shards[p], want[8 * i:8 * i + 8, 2 * j:2 * j + 2],
                                   rtol=1e-5, atol=1e-5)
    # The engine's own backend computes the same, unpartitioned.
    torch.testing.assert_close(c.cpu(), want, rtol=1e-5, atol=1e-5)


@needs_plugin
def test_spmd_mlp_forward_backward_8_way(dev):
    outs, want = _sharded_mlp_step(dev)
    got, shards = xs.run_spmd(outs, with_shards=True)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    # grad of w1 was annotated ("model", None): each device holds 8 of its 32 rows.
    assert tuple(shards[1][0].shape) == (8, 12)
    # Unannotated outputs (the other grads) come back whole on every device.
    assert tuple(shards[3][5].shape) == (4, 32)


@needs_plugin
def test_spmd_sgd_step_8_way(dev):
    """forward, backward and an SGD update; the updated parameters keep
    their annotations through the in-place update and come back whole."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 4))
    ref = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 4))
    ref.load_state_dict(model.state_dict())
    x, target = torch.randn(16, 12), torch.randint(0, 4, (16,))
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.5)
    F.cross_entropy(ref(x), target).backward()
    opt_ref.step()
    mesh = mesh24()
    model = model.to(dev)
    w1, _b1, w2, _b2 = model.parameters()
    xs.mark_sharding(w1, mesh, ("model", None))
    xs.mark_sharding(w2, mesh, (None, "model"))
    xx = x.to(dev)
    xs.mark_sharding(xx, mesh, ("data", None))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    F.cross_entropy(model(xx), target.to(dev)).backward()
    opt.step()
    assert xs.get_sharding_spec(w1) == "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
    params = list(model.parameters())
    got, shards = xs.run_spmd(params, with_shards=True)
    for g, w in zip(got, ref.parameters(), strict=True):
        torch.testing.assert_close(g, w.detach(), rtol=1e-4, atol=1e-5)
    assert tuple(shards[0][0].shape) == (8, 12)  # the updated w1 stays sharded
    assert tuple(shards[2][0].shape) == (4, 8)


@needs_plugin
def test_spmd_uneven_shards_are_padded(dev):
    a = torch.randn(10, 3)
    x = a.to(dev)
    mesh = xs.Mesh(np.arange(4), (4,), ("d",))
    xs.mark_sharding(x, mesh, ("d", None))
    y = x.sin()
    xs.mark_sharding(y, mesh, ("d", None))
    (value,), (shards,) = xs.run_spmd([y], with_shards=True)
    torch.testing.assert_close(value, a.sin(), rtol=1e-6, atol=1e-6)
    assert [tuple(shards[p].shape) for p in range(4)] == [(3, 3)] * 4


def test_run_spmd_needs_a_sharding(dev):
    x = torch.randn(4).to(dev)
    with pytest.raises(ValueError, match="no input or output of the graph carries a sharding"):
        xs.run_spmd([x + 1])


def test_shard_and_assemble_roundtrip():
    v = torch.arange(5 * 6, dtype=torch.float32).reshape(5, 6)
    spec = ("tiled", (2, 3, 2), tuple(range(12)), True, 12)
    shards = {p: spmd.shard_of(v, spec, p) for p in range(12)}
    assert tuple(shards[0].shape) == (3, 2)
    # Devices 2p and 2p+1 replicate one tile; the last row tile is padded.
    torch.testing.assert_close(shards[5], shards[4])
    torch.testing.assert_close(shards[11][:2], v[3:5, 4:6])
    assert torch.all(shards[11][2] == 0)
    torch.testing.assert_close(spmd.assemble(shards, spec, (5, 6)), v)


# ----------------------------------------------------------- manual regions
def _manual_all_reduce(dev, mesh, a):
    x = a.to(dev)
    xs.mark_sharding(x, mesh, ("d", None))
    shard = xs.enable_manual_sharding(x, ("d", None), mesh=mesh)
    r = xm.all_reduce(xm.REDUCE_SUM, shard, groups=[list(range(mesh.size()))])
    return shard, xs.disable_manual_sharding(r, ("d", None), tuple(a.shape), mesh=mesh)


def test_manual_region_text(dev, spmd_mode):
    mesh = xs.Mesh(np.arange(8), (8,), ("d",))
    shard, full = _manual_all_reduce(dev, mesh, torch.randn(16, 4))
    assert tuple(shard.shape) == (2, 4) and tuple(full.shape) == (16, 4)
    text = xm.get_stablehlo([full])
    assert ('{call_target_name = "SPMDFullToShardShape", mhlo.sharding = "{manual}"} : '
            '(tensor<16x4xf32>) -> tensor<2x4xf32>') in text
    assert ("channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, "
            "use_global_device_ids} : (tensor<2x4xf32>) -> tensor<2x4xf32>") in text
    assert ('{call_target_name = "SPMDShardToFullShape", mhlo.sharding = '
            '"{devices=[8,1]0,1,2,3,4,5,6,7}"} : (tensor<2x4xf32>) -> tensor<16x4xf32>') in text
    # A mesh of 8 on this session's 4 engine devices cannot be partitioned
    # onto them: run whole, the region is refused when executed.
    with pytest.raises(NotImplementedError, match="spmd_full_to_shard over 8 devices cannot run"):
        full.cpu()
    del shard, full


def test_manual_region_one_device_runs_on_the_engine(dev, spmd_mode):
    a = torch.randn(6, 3)
    shard, full = _manual_all_reduce(dev, xs.Mesh([0], (1,), ("d",)), a)
    torch.testing.assert_close(full.cpu(), a, rtol=0, atol=0)
    with pytest.raises(ValueError, match="no mesh given and no global mesh set"):
        old = xs.get_global_mesh()
        xs._global_mesh = None
        try:
            xs.enable_manual_sharding(a.to(dev), (None, None))
        finally:
            xs._global_mesh = old


@needs_plugin
def test_manual_region_all_reduce_8_way(dev, spmd_mode):
    """Inside a manual region every device all-reduces its own shard (an
    SPMD collective over global device ids): every [2, 4] block of the
    result is the sum of the 8 blocks of the input."""
    mesh = xs.Mesh(np.arange(8), (8,), ("d",))
    a = torch.randn(16, 4)
    _shard, full = _manual_all_reduce(dev, mesh, a)
    xs.mark_sharding(full, mesh, ("d", None))
    (value,), (shards,) = xs.run_spmd([full], with_shards=True)
    want = a.reshape(8, 2, 4).sum(0)
    torch.testing.assert_close(value, want.repeat(8, 1), rtol=1e-5, atol=1e-5)
    for p in range(8):
        torch.testing.assert_close(shards[p], want, rtol=1e-5, atol=1e-5)
