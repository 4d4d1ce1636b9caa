"""One process of tests/python/test_spmd_multiprocess.py, run by torchrun
(2 processes x CPU_NUM_DEVICES=2): SPMD mode with one mesh of the job's 4
global devices. Trains the test's MLP for STEPS SGD steps data-parallel
(mesh (4,), the batch sharded) and Megatron-style (mesh (2, 2): batch over
'data', fc1 column- and fc2 row-parallel over 'model'), every process
feeding the same global batch and weights (same seed) and keeping its own
devices' shards. Writes <G31_OUT>/<rank>.json: the device counts, each
step's loss, the final weights (read with .cpu(), which gathers shards
across processes), the SPMD counters, and which of fc1.weight's shards
this process holds (their values) and which it cannot read.
WORKER_MODE=small_mesh instead shards over a mesh of 2 of the 4 devices,
which must fail with a clear error; WORKER_MODE=manual runs manual regions
whose collectives cross the processes. The last argument (a tag) is only for
the test to find the job's processes."""
import json
import os

import numpy as np
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torchtpu import _C, bridge

STEPS = 3
IN, HIDDEN, OUT, BATCH = 8, 16, 4, 8


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, OUT))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, IN, generator=g), torch.randn(BATCH, OUT, generator=g))
            for _ in range(STEPS)]


def held_shards(t):
    """The shards of t this process holds ({global device: values}) and
    the devices whose shard it cannot read."""
    h = bridge.handle_of(t)
    layout = _C.tensor_storage_layout(h)
    shape = [-(-s // k) for s, k in zip(t.shape, layout[1])]
    held, missing = {}, []
    for p in range(layout[-1]):
        piece = torch.empty(shape, dtype=t.dtype)
        try:
            _C.tensor_shard_to_host(h, p, piece.data_ptr(), piece.numel() * piece.element_size())
            held[p] = piece.tolist()
        except RuntimeError as e:
            missing.append([p, str(e)])
    return held, missing


def train(mesh, specs, data_spec):
    dev = torch_xla.device()
    model = make_model().to(dev)
    for name, p in model.named_parameters():
        if name in specs:
            xs.mark_sharding(p, mesh, specs[name])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in batches():
        x, y = x.to(dev), y.to(dev)
        xs.mark_sharding(x, mesh, data_spec)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch_xla.sync()
        losses.append(loss.item())
    out = {"losses": losses}
    if "0.weight" in specs:
        out["fc1_held"], out["fc1_missing"] = held_shards(model[0].weight)
        shards = xs.wrap_as_sharded_tensor(model[0].weight).local_shards
        out["fc1_local_shards"] = [[s.shard_device, s.indices[0].start, s.data.tolist()]
                                   for s in shards]
    out["weights"] = {n: p.cpu().tolist() for n, p in model.named_parameters()}
    return out


def small_mesh():
    mesh = xs.Mesh(np.arange(2), (2,), ("data",))
    x = torch.arange(8.0).reshape(4, 2).to(torch_xla.device())
    xs.mark_sharding(x, mesh, ("data", None))
    (x * 2).sum().item()


def manual_regions():
    """Manual regions over the job's 4 devices (docs/spmd.md "Partitioner",
    manual regions): their collectives cross the processes."""
    n = xr.global_runtime_device_count()
    dp = xs.Mesh(np.arange(n), (n,), ("data",))
    x = torch.arange(24.0).reshape(8, 3).to(torch_xla.device())
    loc = xs.enable_manual_sharding(x, ("data", None), mesh=dp)
    r = xm.all_reduce(xm.REDUCE_SUM, loc * 0.5 + 1, groups=[list(range(n))])
    summed = xs.disable_manual_sharding(r, ("data", None), (8, 3), mesh=dp)
    mt = xs.Mesh(np.arange(n), (2, n // 2), ("data", "model"))
    x = torch.arange(32.0).reshape(8, 4).to(torch_xla.device())
    loc = xs.enable_manual_sharding(x, ("data", "model"), mesh=mt)
    g = xm.all_gather(loc * 2, dim=1, groups=[[0, 1], [2, 3]])
    gathered = xs.disable_manual_sharding(g, ("data", None), (8, 4), mesh=mt)
    torch_xla.sync()
    out = {"summed": summed.cpu().tolist(), "gathered": gathered.cpu().tolist(),
           "partitioned": met.counter_value("SpmdPartitionedExecution") or 0,
           "fallback": met.counter_value("SpmdPartitionFallback") or 0}
    with open(os.path.join(os.environ["G31_OUT"], f"{xr.process_index()}.json"), "w") as f:
        json.dump(out, f)


def main():
    xr.use_spmd()
    if os.environ.get("WORKER_MODE") == "small_mesh":
        return small_mesh()
    if os.environ.get("WORKER_MODE") == "manual":
        return manual_regions()
    rank = xr.process_index()
    result = {"global": xr.global_runtime_device_count(),
              "addressable": xr.addressable_runtime_device_count(),
              "process_count": xr.process_count()}
    n = xr.global_runtime_device_count()
    met.clear_all()
    dp = xs.Mesh(np.arange(n), (n,), ("data",))
    result["dp"] = train(dp, {}, ("data", None))
    mt = xs.Mesh(np.arange(n), (2, n // 2), ("data", "model"))
    result["megatron"] = train(mt, {"0.weight": ("model", None), "0.bias": ("model",),
                                    "2.weight": (None, "model")}, ("data", None))
    # Uneven shards: 10 x 3 on the (2, 2) mesh, 5 x 2 tiles (the last
    # column tile 1 wide, padded).
    x = torch.arange(30.0).reshape(10, 3).to(torch_xla.device())
    xs.mark_sharding(x, mt, ("data", "model"))
    y = x * 2 + 1
    torch_xla.sync()
    result["uneven"] = [y.cpu().tolist(), y.sum(0).cpu().tolist()]
    # Layout changes of a value whose tiles are spread over the processes:
    # ('data', 'model') -> cleared -> ('model', None), then cleared again.
    x0 = torch.arange(48.0).reshape(8, 6)
    x = x0.to(torch_xla.device())
    xs.mark_sharding(x, mt, ("data", "model"))
    torch_xla.sync()
    xs.clear_sharding(x)
    xs.mark_sharding(x, mt, ("model", None))
    y = x * 3
    torch_xla.sync()
    result["relaid"] = [y.cpu().tolist(), _C.tensor_storage_layout(bridge.handle_of(x))]
    xs.clear_sharding(x)
    result["cleared"] = x.cpu().tolist()
    # load_local_shards_: each process writes its own devices' shards.
    z = torch.arange(8.0).reshape(4, 2).to(torch_xla.device())
    st = xs.mark_sharding(z, dp, ("data", None))
    st.load_local_shards_([xs.XLAShard(s.data * 10, s.indices, s.shard_device, s.replica_id)
                           for s in st.local_shards])
    result["loaded"] = z.cpu().tolist()
    result["partitioned"] = met.counter_value("SpmdPartitionedExecution") or 0
    result["fallback"] = met.counter_value("SpmdPartitionFallback") or 0
    with open(os.path.join(os.environ["G31_OUT"], f"{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
