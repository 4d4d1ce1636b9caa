"""The worker test_torchrun_collectives.py runs under torchrun: every
replica runs the xm collectives on inputs made from its global ordinal and
writes what it got to $G31_OUT/<ordinal>.json; the test compares them with
numpy. WORKER_MODE picks a scenario:

- all: every collective (values), the runtime facts, and one
  xm.optimizer_step of a small linear model;
- raise: process 1 raises ValueError before its first collective;
- mismatch: process 1 all-reduces 8 elements where the others reduce 16.
"""
import json
import os
import sys

import numpy as np
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def inputs(r):
    return torch.arange(8, dtype=torch.float32).reshape(2, 4) + 100 * r


def run_all(out):
    r = xr.global_ordinal()
    n = xr.world_size()
    d = torch_xla.device()
    res = {
        "facts": [n, r, xr.local_ordinal(), xr.process_index(), xr.process_count(),
                  xr.addressable_device_count(), xr.global_device_count(),
                  int(os.environ.get("PJRT_LOCAL_PROCESS_RANK", -1)),
                  int(os.environ.get("PJRT_LOCAL_PROCESS_COUNT", -1))],
    }
    x = inputs(r).to(d)
    small = (torch.tensor([1.0, 2.0, 0.5, -1.0]) + r).to(d)
    bits = torch.tensor([1 << r, 0xff, 3 + r, 0x10], dtype=torch.int32).to(d)
    res["sum"] = xm.all_reduce(xm.REDUCE_SUM, x)
    res["sum_scaled"] = xm.all_reduce(xm.REDUCE_SUM, x, scale=0.5)
    res["mul"] = xm.all_reduce(xm.REDUCE_MUL, small)
    res["min"] = xm.all_reduce(xm.REDUCE_MIN, small)
    res["max"] = xm.all_reduce(xm.REDUCE_MAX, small)
    res["and"] = xm.all_reduce(xm.REDUCE_AND, bits)
    res["or"] = xm.all_reduce(xm.REDUCE_OR, bits)
    res["sum_i16"] = xm.all_reduce(
        xm.REDUCE_SUM, torch.tensor([30000, -5, r], dtype=torch.int16).to(d))
    res["sum_bf16"] = xm.all_reduce(
        xm.REDUCE_SUM, torch.tensor([1.5, 2.0 * r], dtype=torch.bfloat16).to(d)).float()
    res["gather0"] = xm.all_gather(x, dim=0)
    res["gather1"] = xm.all_gather(x, dim=1)
    res["scatter"] = xm.reduce_scatter(xm.REDUCE_SUM, torch.arange(4 * n, dtype=torch.float32)
                                       .reshape(2 * n, 2).to(d) + r, 1.0, 0, n)
    res["a2a"] = xm.all_to_all(torch.arange(2 * n, dtype=torch.float32).to(d) + 10 * r, 0, 0, n)
    res["permute"] = xm.collective_permute(x, [(i, (i + 1) % n) for i in range(n)])
    b = x.clone()
    xm.collective_broadcast([b], root_ordinal=n - 1)
    res["broadcast"] = b
    if n == 4:  # groups across processes (each holds one device of each)
        res["groups_cross"] = xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0, 2], [1, 3]])
        res["groups_local"] = xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0, 1], [2, 3]])
    res = {k: (v.cpu().tolist() if isinstance(v, torch.Tensor) else v) for k, v in res.items()}
    res["rendezvous"] = [p.decode() for p in xm.rendezvous("g31", f"r{r}".encode())]
    res["mesh"] = xm.mesh_reduce("g31mesh", float(r + 1), lambda v: float(np.sum(v)))
    # One data-parallel step: replica r's batch; the gradients are averaged.
    # Fixed initial values: replica threads of one process share the CPU
    # random generator (docs/collectives.md), so no seeded init here.
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.weight.copy_(torch.arange(4.0).reshape(1, 4) * 0.1)
        model.bias.fill_(0.5)
    model = model.to(d)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = (torch.arange(8, dtype=torch.float32).reshape(2, 4) * (r + 1)).to(d)
    loss = model(data).pow(2).mean()
    loss.backward()
    xm.optimizer_step(opt)
    torch_xla.sync()
    res["weight"] = model.weight.detach().cpu().tolist()
    res["bias"] = model.bias.detach().cpu().tolist()
    with open(os.path.join(out, f"{r}.json"), "w") as f:
        json.dump(res, f)


def run_raise():
    d = torch_xla.device()
    if xr.process_index() == 1:
        raise ValueError("worker 1 gives up")
    t = xm.all_reduce(xm.REDUCE_SUM, torch.ones(4, device=d))
    print(t.cpu())


def run_mismatch():
    d = torch_xla.device()
    size = 8 if xr.process_index() == 1 else 16
    t = xm.all_reduce(xm.REDUCE_SUM, torch.ones(size, device=d))
    print(t.cpu())


def main(index):
    mode = os.environ["WORKER_MODE"]
    if mode == "all":
        run_all(os.environ["G31_OUT"])
    elif mode == "raise":
        run_raise()
    else:
        run_mismatch()


if __name__ == "__main__":
    if int(os.environ.get("CPU_NUM_DEVICES", "1")) > 1:
        torch_xla.launch(main)
    else:
        main(0)
    sys.stdout.flush()
