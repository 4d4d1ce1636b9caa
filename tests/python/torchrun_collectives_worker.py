"""The worker test_torchrun_collectives.py runs under torchrun: every
replica runs the xm collectives on inputs made from its global ordinal and
writes what it got to $G31_OUT/<ordinal>.json; the test compares them with
numpy. WORKER_MODE picks a scenario:

- all: every collective (values), the runtime facts, and one
  xm.optimizer_step of a small linear model;
- raise: process 1 raises ValueError before its first collective;
- mismatch: process 1 all-reduces 8 elements where the others reduce 16;
- stall: process 1 opens its device and sleeps STALL_S seconds while the
  others all-reduce (past TORCHTPU_COLLECTIVE_TIMEOUT_S);
- exit: after one all_reduce, process 1 ends at once with status 0 (no
  exception, nothing published; torchrun does not stop the others for a
  success), while the others all-reduce again;
- kill: after one all_reduce, process 1 kills itself (SIGKILL);
- all also runs the traffic scenario (written to traffic<ordinal>.json):
  reduce_scatter, all_to_all and collective_permute in more
  layouts (values), and the bytes each process wrote to its sockets
  (/proc/self/io wchar) and the transport's bytes_sent() counter around a
  4 MiB reduce_scatter, all_to_all and one-way permute.
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


def _written():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def run_traffic(out):
    from torchtpu import process_transport
    r = xr.global_ordinal()
    n = xr.world_size()
    d = torch_xla.device()
    res = {}
    t = torch.arange(n * 3 * n, dtype=torch.float32).reshape(n, 3 * n) + 1000 * r
    res["a2a_2d"] = xm.all_to_all(t.to(d), split_dimension=1, concat_dimension=0, split_count=n)
    t = torch.arange(2 * 2 * n, dtype=torch.float32).reshape(2, 2 * n) * (1 - 2 * (r % 2)) + r
    res["rs_max_dim1"] = xm.reduce_scatter(xm.REDUCE_MAX, t.to(d), 1.0, 1, n)
    t = torch.tensor([0.5, 1.25] * n, dtype=torch.bfloat16) * (r + 1)
    res["rs_bf16"] = xm.reduce_scatter(xm.REDUCE_SUM, t.to(d), 1.0, 0, n).float()
    t = torch.tensor([3, -1] * n, dtype=torch.int32) * (r + 1)
    res["rs_i32_mul"] = xm.reduce_scatter(xm.REDUCE_MUL, t.to(d), 1.0, 0, n)
    res["permute_partial"] = xm.collective_permute(inputs(r).to(d), [(0, n - 1), (1, 0)])
    # A list is coalesced: one cross-process all_reduce per dtype.
    before = process_transport.requests().get("all_reduce", 0)
    parts = [torch.full((3,), 1.0 + r).to(d), torch.full((2, 2), 10.0 * r).to(d),
             torch.tensor([r, 1], dtype=torch.int32).to(d), torch.full((1,), -1.0).to(d)]
    xm.all_reduce(xm.REDUCE_SUM, parts, scale=1.0)
    torch_xla.sync(wait=True)
    res["list_requests"] = torch.tensor(process_transport.requests().get("all_reduce", 0)
                                        - before)
    for k, t in enumerate(parts):
        res[f"list{k}"] = t
    res = {k: v.cpu().tolist() for k, v in res.items()}
    # Traffic: 4 MiB of float32 per member input (I = 1 << 22 bytes).
    big = torch.ones(1 << 20, device=d) * (r + 1)
    ops = {
        "reduce_scatter": lambda: xm.reduce_scatter(xm.REDUCE_SUM, big, 1.0, 0, n),
        "all_to_all": lambda: xm.all_to_all(big, 0, 0, n),
        "collective_permute": lambda: xm.collective_permute(big, [(0, n - 1)]),
    }
    lead = r % xr.addressable_device_count() == 0
    for name, fn in ops.items():
        fn().cpu()  # compiled and warm
        xm.rendezvous(f"traffic-{name}")
        w0, c0 = _written(), process_transport.bytes_sent().get(name, 0)
        y = fn().cpu()
        w1, c1 = _written(), process_transport.bytes_sent().get(name, 0)
        xm.rendezvous(f"traffic-{name}-done")
        if lead:
            res[f"wchar_{name}"] = w1 - w0
            res[f"counter_{name}"] = c1 - c0
        if name == "reduce_scatter":
            res["rs_big_sum"] = float(y.sum())
    with open(os.path.join(out, f"traffic{r}.json"), "w") as f:
        json.dump(res, f)


def run_failure(mode):
    import signal
    import time
    d = torch_xla.device()
    if mode == "stall":
        if xr.process_index() == 1:
            time.sleep(float(os.environ["STALL_S"]))
            return
    else:
        print("first", xm.all_reduce(xm.REDUCE_SUM, torch.ones(4, device=d)).cpu(), flush=True)
        if xr.process_index() == 1:
            if mode == "exit":
                os._exit(0)
            os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        xm.all_reduce(xm.REDUCE_SUM, torch.ones(4, device=d)).cpu()
    finally:
        print(f"collective ended after {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)


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
    if mode == "quit":  # start the runtime, exit before any collective
        print(f"quit {xr.global_ordinal()} of {xr.world_size()}")
        return
    if mode == "all":
        run_all(os.environ["G31_OUT"])
        run_traffic(os.environ["G31_OUT"])
    elif mode in ("stall", "exit", "kill"):
        run_failure(mode)
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
