"""Partitioned SPMD execution on the engine's own devices (issue 30,
docs/spmd.md "Partitioned execution"): torch_xla.sync() in SPMD mode runs
each annotated graph as one program per virtual CPU device, each device
holding only its shards.

Each scenario runs in a fresh interpreter with 8 devices (the device count
is fixed at start) and prints one JSON line; the tests check its numbers:
values against PyTorch on the CPU, the engine's counters and metrics, the
shard buffers and each device's bytes in use."""
import os

import pytest

from spmd_script import run_result_script  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRELUDE = """
import json, numpy as np, torch
import torch_xla, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
import torch_xla.debug.metrics as met
from torchtpu import _C, bridge
from torch_xla.distributed.spmd import Mesh, PartitionSpec, mark_sharding
xr.use_spmd()
out = {}

def bytes_in_use():
    xm.wait_device_ops()
    return [_C.memory_stats(i)[0] for i in range(8)]

def held(t):
    return _C.tensor_storage_layout(bridge.handle_of(t)) is not None

def maxdiff(a, b):
    return float((a.detach().cpu() - b.detach()).abs().max())
"""

TRAINING = PRELUDE + """
class MLP(torch.nn.Module):
    def __init__(self, d_in=12, d_hidden=16, d_out=6):
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, d_hidden)
        self.fc2 = torch.nn.Linear(d_hidden, d_out)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

def train(mesh, shard, steps, batch=8, x_spec=None, seed=0):
    torch.manual_seed(seed)
    ref = MLP()
    dev = MLP()
    dev.load_state_dict(ref.state_dict())
    dev = dev.to("xla")
    shard(dev)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(batch, 12), torch.randn(batch, 6)
        xd, yd = x.to("xla"), y.to("xla")
        if x_spec is not None:
            xs.mark_sharding(xd, mesh, x_spec)
        loss_r = ((ref(x) - y) ** 2).mean()
        opt_r.zero_grad(); loss_r.backward(); opt_r.step()
        loss_d = ((dev(xd) - yd) ** 2).mean()
        opt_d.zero_grad(); loss_d.backward(); opt_d.step()
        torch_xla.sync()
        losses.append(abs(float(loss_r) - float(loss_d.detach().cpu())))
    params = max(maxdiff(b, a) for a, b in zip(ref.parameters(), dev.parameters()))
    return max(losses), params, all(held(p) for p in (dev.fc1.weight,))

meshes = {"2": ((2,), ("data",)), "4": ((4,), ("data",)), "2x2": ((2, 2), ("data", "model")),
          "2x4": ((2, 4), ("data", "model"))}
for name, (shape, axes) in meshes.items():
    mesh = Mesh(np.arange(int(np.prod(shape))), shape, axes)
    met.clear_all()
    # A sharded matmul: rows over data (and columns over model on 2-D meshes).
    a0, b0 = torch.randn(16, 12), torch.randn(12, 8)
    a, b = a0.to("xla"), b0.to("xla")
    mark_sharding(a, mesh, ("data", None))
    if len(shape) == 2:
        mark_sharding(b, mesh, (None, "model"))
    c = a @ b
    torch_xla.sync()
    matmul = maxdiff(c, a0 @ b0)
    if len(shape) == 2:  # Megatron: fc1 column-parallel, fc2 row-parallel, data-parallel batch
        def shard(m, mesh=mesh):
            mark_sharding(m.fc1.weight, mesh, ("model", None))
            mark_sharding(m.fc1.bias, mesh, ("model",))
            mark_sharding(m.fc2.weight, mesh, (None, "model"))
    else:
        def shard(m, mesh=mesh):
            mark_sharding(m.fc1.weight, mesh, ("data", None))
    loss, params, kept = train(mesh, shard, 2, x_spec=("data", None))
    out[name] = dict(matmul=matmul, loss=loss, params=params, held=kept,
                     c_held=held(c),
                     partitioned=met.counter_value("SpmdPartitionedExecution") or 0,
                     fallback=met.counter_value("SpmdPartitionFallback") or 0)

# 20 steps with unchanged shardings compile once.
mesh = Mesh(np.arange(8), (2, 4), ("data", "model"))
def shard(m):
    mark_sharding(m.fc1.weight, mesh, ("model", None))
    mark_sharding(m.fc2.weight, mesh, (None, "model"))
met.clear_all()
loss, params, _ = train(mesh, shard, 20, x_spec=("data", None), seed=1)
out["steps20"] = dict(loss=loss, params=params,
                      compiles=met.metric_data("CompileTime")[0],
                      uncached=met.counter_value("UncachedCompile"),
                      cached=met.counter_value("CachedCompile"),
                      partitioned=met.counter_value("SpmdPartitionedExecution"),
                      reshards=met.counter_value("SpmdInputReshard") or 0)

# The seed's snippet, trained a few steps.
mesh = Mesh(np.arange(8), (8,), ("data",))
torch.manual_seed(2)
model_ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
model.load_state_dict(model_ref.state_dict())
model = model.to("xla")
mark_sharding(model, mesh, PartitionSpec("data", None))
opt_r = torch.optim.SGD(model_ref.parameters(), lr=0.05)
opt_d = torch.optim.SGD(model.parameters(), lr=0.05)
worst = 0.0
for _ in range(4):
    x = torch.randn(8, 16)
    lr_ = model_ref(x).square().mean(); opt_r.zero_grad(); lr_.backward(); opt_r.step()
    ld = model(x.to("xla")).square().mean(); opt_d.zero_grad(); ld.backward(); opt_d.step()
    torch_xla.sync()
    worst = max(worst, abs(float(lr_) - float(ld.detach().cpu())))
out["seed"] = dict(loss=worst, params=max(maxdiff(b, a) for a, b in
                                          zip(model_ref.parameters(), model.parameters())),
                   held=held(model[0].weight))
print("RESULT " + json.dumps(out))
"""

STORAGE = PRELUDE + """
# A Megatron MLP on a 2 x 4 mesh (first: its per-device bytes are deltas).
mesh = Mesh(np.arange(8), (2, 4), ("data", "model"))
base = bytes_in_use()
torch.manual_seed(3)
ref = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
model.load_state_dict(ref.state_dict())
model = model.to("xla")
mark_sharding(model[0].weight, mesh, ("model", None))   # column-parallel
mark_sharding(model[0].bias, mesh, ("model",))
mark_sharding(model[2].weight, mesh, (None, "model"))   # row-parallel
params = [b - a for a, b in zip(base, bytes_in_use())]
total = sum(p.numel() * p.element_size() for p in ref.parameters())
opt_r = torch.optim.SGD(ref.parameters(), lr=0.05)
opt_d = torch.optim.SGD(model.parameters(), lr=0.05)
worst = 0.0
for _ in range(3):
    x = torch.randn(8, 64)
    xd = x.to("xla")
    mark_sharding(xd, mesh, ("data", None))
    lr_ = ref(x).square().mean(); opt_r.zero_grad(); lr_.backward(); opt_r.step()
    ld = model(xd).square().mean(); opt_d.zero_grad(); ld.backward(); opt_d.step()
    torch_xla.sync()
    worst = max(worst, abs(float(lr_) - float(ld.detach().cpu())))
for p in model.parameters():
    p.grad = None
after = [b - a for a, b in zip(base, bytes_in_use())]
mem = xm.get_memory_info("xla:0")
out["megatron"] = dict(params=params, after=after, total=total, loss=worst,
           weights=max(maxdiff(b, a) for a, b in zip(ref.parameters(), model.parameters())),
           held=[held(p) for p in model.parameters()], memory_info=mem)
# A tensor rows over 8 devices.
mesh = Mesh(np.arange(8), (8,), ("data",))
base = bytes_in_use()
w0 = torch.randn(64, 32)
w = w0.to("xla")
xst = mark_sharding(w, mesh, ("data", None))
per_device = [b - a for a, b in zip(base, bytes_in_use())]
shards = xst.local_shards
out["tiled"] = dict(per_device=per_device, held=held(w),
                    shard_diff=max(float((s.data - w0[tuple(s.indices)]).abs().max()) for s in shards),
                    shard_shapes=[list(s.data.shape) for s in shards],
                    devices=[s.shard_device for s in shards], value=maxdiff(w, w0))
# Writing shards: each device's buffer becomes the new shard.
xst.load_local_shards_([type(s)(s.data * 10, s.indices, s.shard_device, s.replica_id)
                        for s in shards])
out["loaded"] = dict(value=maxdiff(w, 10 * w0), held=held(w),
                     shard_diff=max(float((s.data - 10 * w0[tuple(s.indices)]).abs().max())
                                    for s in xst.local_shards))
# Uneven rows: 10 over 4 devices, shards of 3 rows, the last one padded.
u0 = torch.randn(10, 3)
u = u0.to("xla")
ux = mark_sharding(u, Mesh(np.arange(4), (4,), ("d",)), ("d", None))
last = ux.local_shards[3].data
out["uneven"] = dict(value=maxdiff(u, u0), shapes=[list(s.data.shape) for s in ux.local_shards],
                     last_pad=float(last[1:].abs().max()), last_row=float((last[0] - u0[9]).abs().max()))
# A graph the partitioner refuses (a collective) runs whole, from assembled shards.
met.clear_all()
r = xm.all_reduce(xm.REDUCE_SUM, w * 2)
out["fallback"] = dict(value=maxdiff(r, 20 * w0), count=met.counter_value("SpmdPartitionFallback"))
# A convolution over image rows split 4 ways: halos move between neighbours
# (collective_permute between the partitions of one execution).
met.clear_all()
img0, k0 = torch.randn(2, 3, 8, 8), torch.randn(5, 3, 3, 3)
img, k = img0.to("xla"), k0.to("xla")
mark_sharding(img, Mesh(np.arange(4), (4,), ("rows",)), (None, None, "rows", None))
conv = torch.nn.functional.conv2d(img, k, padding=1)
torch_xla.sync()
out["conv_rows"] = dict(value=maxdiff(conv, torch.nn.functional.conv2d(img0, k0, padding=1)),
                        partitioned=met.counter_value("SpmdPartitionedExecution"),
                        fallback=met.counter_value("SpmdPartitionFallback") or 0)
# An in-place update of sharded data: a donor, counted as unpartitioned cuts count it.
met.clear_all()
v = torch.arange(16.).reshape(2, 8).to("xla")
mark_sharding(v, mesh, (None, "data"))
v += 1
torch_xla.sync()
alias = met.metric_data("InputOutputAliasCount")
out["alias"] = dict(samples=alias[0] if alias else 0, value=maxdiff(v, torch.arange(16.).reshape(2, 8) + 1),
                    held=held(v), partitioned=met.counter_value("SpmdPartitionedExecution"))
# Re-annotating moves the storage to the new layout; clearing makes it one buffer.
xs.clear_sharding(w)
cleared = dict(value=maxdiff(w, 10 * w0), held=held(w))
mark_sharding(w, Mesh(np.arange(8), (2, 4), ("a", "b")), ("b", "a"))
out["relayout"] = dict(cleared=cleared, value=maxdiff(w, 10 * w0), held=held(w),
                       layout=list(_C.tensor_storage_layout(bridge.handle_of(w))[1]))
print("RESULT " + json.dumps(out))
"""



def _run(tmp_path, name, code):
    return run_result_script(tmp_path, name, code)


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("spmd_exec"), "training", TRAINING)


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("spmd_exec"), "storage", STORAGE)


@pytest.mark.parametrize("mesh", ["2", "4", "2x2", "2x4"])
def test_sharded_matmul_and_mlp_step_match_cpu(training, mesh):
    r = training[mesh]
    assert r["matmul"] < 1e-5, r
    assert r["loss"] < 1e-5 and r["params"] < 1e-5, r
    # It really ran partitioned (the matmul and 2 steps), never whole.
    assert r["partitioned"] >= 3 and r["fallback"] == 0, r
    assert r["held"] and r["c_held"], r


def test_twenty_steps_with_unchanged_shardings_compile_once(training):
    r = training["steps20"]
    assert r["loss"] < 1e-5 and r["params"] < 1e-5, r
    assert r["compiles"] == 1 and r["uncached"] == 1, r
    assert r["cached"] == 19 and r["partitioned"] == 20, r
    # The stored layouts are the ones the next step reads: no reshards.
    assert r["reshards"] == 0, r


def test_seed_snippet_trains_like_cpu(training):
    r = training["seed"]
    assert r["loss"] < 1e-5 and r["params"] < 1e-5 and r["held"], r


def test_tiled_tensor_is_held_one_shard_per_device(storage):
    r = storage["tiled"]
    # 64 x 32 float32 rows over 8 devices: 1024 bytes each, nothing else.
    assert r["per_device"] == [1024] * 8, r
    assert r["held"] and r["value"] == 0.0 and r["shard_diff"] == 0.0, r
    assert r["shard_shapes"] == [[8, 32]] * 8, r
    assert r["devices"] == [f"CPU:{i}" for i in range(8)], r


def test_load_local_shards_writes_the_shard_buffers(storage):
    r = storage["loaded"]
    assert r["value"] == 0.0 and r["held"] and r["shard_diff"] == 0.0, r


def test_uneven_shards_are_padded_and_cropped(storage):
    r = storage["uneven"]
    assert r["shapes"] == [[3, 3]] * 4 and r["value"] == 0.0, r
    assert r["last_pad"] == 0.0 and r["last_row"] == 0.0, r


def test_unpartitionable_graph_falls_back_to_one_device(storage):
    r = storage["fallback"]
    assert r["value"] == 0.0 and r["count"] >= 1, r


def test_convolution_with_row_halos_matches_cpu(storage):
    r = storage["conv_rows"]
    assert r["value"] < 1e-4 and r["partitioned"] == 1 and r["fallback"] == 0, r


def test_in_place_update_of_shards_is_an_alias(storage):
    r = storage["alias"]
    assert r == {"samples": 1, "value": 0.0, "held": True, "partitioned": 1}, r


def test_storage_follows_a_changed_annotation(storage):
    r = storage["relayout"]
    assert r["cleared"] == {"value": 0.0, "held": False}, r
    assert r["value"] == 0.0 and r["held"] and r["layout"] == [4, 2], r


def test_megatron_mlp_each_device_holds_a_quarter_of_the_parameters(storage):
    r = storage["megatron"]
    assert r["loss"] < 1e-5 and r["weights"] < 1e-5, r
    quarter = r["total"] / 4
    # fc2's bias (64 floats) is replicated: one buffer, on device 0.
    for b in r["params"]:
        assert 0.2 * quarter < b <= 1.05 * quarter + 256, r
    # After training (gradients dropped) the devices still hold their shards only.
    for b in r["after"]:
        assert b <= 1.05 * quarter + 256 + 64 * 4, r
    assert all(r["held"][i] for i in (0, 1, 2)) and not r["held"][3], r
