"""The collectives partitioned programs really run (issue 30, docs/spmd.md
"Collective counters"): each partitioned execution adds partition 0's
collective counts to the counters SpmdAllReduce, SpmdAllGather,
SpmdReduceScatter, SpmdAllToAll and SpmdCollectivePermute (every partition
issues the same ones).

One fresh interpreter with 8 devices (the device count is fixed at start)
runs a data-parallel MLP training step, a Megatron MLP forward on a (2, 4)
mesh and an FSDPv2 training step over an 8-device 'fsdp' mesh, each counted
from cleared metrics, and prints one JSON line."""
import os

import pytest

from spmd_script import run_result_script  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import json, numpy as np, torch, torch.nn as nn
import torch_xla, torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs, torch_xla.debug.metrics as met
from torch_xla.distributed.spmd import Mesh, mark_sharding
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
    SpmdFullyShardedDataParallel as FSDPv2)
xr.use_spmd()
NAMES = ["SpmdAllReduce", "SpmdAllGather", "SpmdReduceScatter", "SpmdAllToAll",
         "SpmdCollectivePermute", "SpmdPartitionedExecution", "SpmdPartitionFallback"]

def counts():
    return {k: met.counter_value(k) or 0 for k in NAMES}

class MLP(nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.fc1 = nn.Linear(16, 32, bias=bias)
        self.fc2 = nn.Linear(32, 8, bias=bias)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

def step(model, opt, mesh, spec):
    x = torch.randn(16, 16).to("xla")
    mark_sharding(x, mesh, spec)
    loss = model(x).square().mean()
    opt.zero_grad(); loss.backward(); opt.step()
    torch_xla.sync()

out = {}
torch.manual_seed(0)

# Data parallel: batch on 'data', parameters replicated.
mesh = Mesh(np.arange(8), (8,), ("data",))
m = MLP().to("xla")
opt = torch.optim.SGD(m.parameters(), lr=0.1)
torch_xla.sync(); met.clear_all()
step(m, opt, mesh, ("data", None))
out["dp"] = counts()
step(m, opt, mesh, ("data", None))
out["dp2"] = counts()
out["dp_grads"] = sum(1 for _ in m.parameters())

# Megatron forward on (2, 4): fc1 column-parallel, fc2 row-parallel.
mesh = Mesh(np.arange(8), (2, 4), ("data", "model"))
m = MLP().to("xla")
mark_sharding(m.fc1.weight, mesh, ("model", None))
mark_sharding(m.fc1.bias, mesh, ("model",))
mark_sharding(m.fc2.weight, mesh, (None, "model"))
torch_xla.sync(); met.clear_all()
x = torch.randn(16, 16).to("xla")
mark_sharding(x, mesh, ("data", None))
y = m(x)
torch_xla.sync()
out["megatron"] = counts()

# FSDPv2 over an 8-device 'fsdp' mesh: every weight's largest dim sharded,
# the batch sharded, the output marked ('fsdp', None).
mesh = Mesh(np.arange(8), (8, 1), ("fsdp", "model"))
xs.set_global_mesh(mesh)
m = FSDPv2(MLP(bias=False).to("xla"))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
torch_xla.sync(); met.clear_all()
step(m, opt, mesh, ("fsdp", None))
out["fsdp"] = counts()
out["fsdp_weights"] = sum(1 for _ in m.parameters())
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    return run_result_script(tmp_path_factory.mktemp("spmd_cc"), "counts", SCRIPT)


def test_data_parallel_step_all_reduces_each_gradient(counted):
    dp = counted["dp"]
    assert dp["SpmdPartitionedExecution"] == 1 and dp["SpmdPartitionFallback"] == 0
    # One all-reduce per gradient (4: two weights, two biases) and one for
    # the loss's mean over the sharded batch; nothing gathered or moved.
    assert counted["dp_grads"] == 4
    assert dp["SpmdAllReduce"] == counted["dp_grads"] + 1
    assert dp["SpmdAllGather"] == 0
    assert dp["SpmdReduceScatter"] == dp["SpmdAllToAll"] == dp["SpmdCollectivePermute"] == 0


def test_counts_add_up_per_execution(counted):
    # A second step (a cached program) adds the same collectives again.
    for k in ("SpmdAllReduce", "SpmdAllGather", "SpmdPartitionedExecution"):
        assert counted["dp2"][k] == 2 * counted["dp"][k], k


def test_megatron_forward_one_all_reduce(counted):
    mg = counted["megatron"]
    assert mg["SpmdPartitionedExecution"] == 1 and mg["SpmdPartitionFallback"] == 0
    assert mg["SpmdAllReduce"] == 1
    assert mg["SpmdAllGather"] == mg["SpmdReduceScatter"] == mg["SpmdAllToAll"] == 0
    assert mg["SpmdCollectivePermute"] == 0


def test_fsdp_v2_step_what_the_partitioner_runs(counted):
    """The step as the partitioner lowers it (forward, backward and the
    update in one program): each forward dot gathers its weight (fc2's
    weight is sharded on its input dim, 32, against the batch-sharded
    activation; the partitioner's cost rule, docs/spmd.md "Partitioner",
    gathers the weight, 8x32, rather than moving the activation, 16x32,
    and combining a partial output); the backward gathers fc2's weight
    again for the input gradient of fc1's output (fc1's own input needs no
    gradient, so its weight is not read in backward). Each weight gradient
    is one reduce_scatter; the loss's mean is one all_reduce."""
    f = counted["fsdp"]
    assert counted["fsdp_weights"] == 2
    assert f["SpmdPartitionedExecution"] == 1 and f["SpmdPartitionFallback"] == 0
    assert f == dict(f, SpmdAllGather=3, SpmdReduceScatter=2, SpmdAllToAll=0, SpmdAllReduce=1,
                     SpmdCollectivePermute=0)


def test_fsdp_v2_step_gathers_each_weight_in_forward_and_backward(counted):
    """PyTorch/XLA's FSDPv2 pattern: one all_gather per weight in forward,
    one per weight the backward reads (here fc2's only: the batch input
    needs no gradient), one reduce_scatter per gradient, no activation
    moved."""
    f = counted["fsdp"]
    weights_read_in_backward = 1
    assert f["SpmdAllGather"] == counted["fsdp_weights"] + weights_read_in_backward
    assert f["SpmdReduceScatter"] == counted["fsdp_weights"]
    assert f["SpmdAllToAll"] == 0
