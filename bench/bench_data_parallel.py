"""Data-parallel training step of the GPT-style decoder of
bench/bench_training.py (tests/python/models.py TinyTransformer) on 2
replicas, two ways, with the same global batch:

- 2 processes x 1 device: torchrun --nproc_per_node=2, the replicas'
  gradients averaged across processes (the Gloo transport,
  docs/collectives.md "Several processes");
- 1 process x 2 devices: torch_xla.launch with CPU_NUM_DEVICES=2, the
  replicas are threads of one process (the within-process transport);

and eager PyTorch on the whole global batch in this process, measured in
the same run. Each replica trains on global_batch / 2 rows with SGD and
xm.optimizer_step (gradient all-reduce, mean). Prints samples/s of each
and the ratio (2 processes) / (1 process x 2 devices): the cost of going
across processes; the goal is >= 0.9. Also prints the gradient bytes
all-reduced per step (the input of the scaling estimate in
docs/collectives.md).

Usage: PYTHONPATH=python PJRT_DEVICE=CPU .venv/bin/python bench/bench_data_parallel.py
(the two replica runs are started as child processes of this one)."""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from models import TinyTransformer  # noqa: E402

VOCAB, SEQ = 1000, 64


def build():
    torch.manual_seed(0)
    return TinyTransformer(vocab=VOCAB, d_model=128, heads=4, layers=2, seq=SEQ)


def batch(rows, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, SEQ), generator=g)
    return ids, torch.roll(ids, -1, 1)


def loss_fn(out, labels):
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))


def replica(index, args):
    """One replica's loop; replica 0 writes the timing to args.out."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    d = torch_xla.device()
    n, r = xr.world_size(), xr.global_ordinal()
    model = build().to(d)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids, labels = batch(args.global_batch, 0)
    rows = args.global_batch // n
    x, y = ids[r * rows:(r + 1) * rows].to(d), labels[r * rows:(r + 1) * rows].to(d)

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        xm.optimizer_step(opt)
        torch_xla.sync()

    # torch_xla.sync(wait=True) waits for this replica's own device:
    # xm.wait_device_ops would wait for every device of the process, and
    # with replica threads a peer's device may sit in the next rendezvous.
    for _ in range(args.warmup):
        step()
        torch_xla.sync(wait=True)
    blocks = []
    for _ in range(args.blocks):
        xm.rendezvous("block")  # the replicas start each block together
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch_xla.sync(wait=True)
        blocks.append((time.perf_counter() - t0) / args.steps)
    if r == 0:
        blocks.sort()
        with open(args.out, "w") as f:
            json.dump({"step_s": blocks[len(blocks) // 2], "world": n}, f)


def eager(args):
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids, labels = batch(args.global_batch, 0)

    def step():
        opt.zero_grad()
        loss_fn(model(ids), labels).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    blocks = []
    for _ in range(args.blocks):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        blocks.append((time.perf_counter() - t0) / args.steps)
    blocks.sort()
    return blocks[len(blocks) // 2]


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_child(kind, args, out):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TORCHELASTIC_",)) and k not in (
               "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT")}
    env["PJRT_DEVICE"] = "CPU"
    env.setdefault("TORCHTPU_COLLECTIVE_TIMEOUT_S", "120")
    common = [__file__, "--role", "replica", "--out", out, "--global-batch",
              str(args.global_batch), "--steps", str(args.steps), "--blocks", str(args.blocks),
              "--warmup", str(args.warmup)]
    if kind == "processes":
        env["CPU_NUM_DEVICES"] = "1"
        # The host's cores split between the processes, as the one process
        # x 2 devices shares its kernel pool between its devices: without
        # this each process's pool takes every core and the pools' polling
        # threads fight over them.
        env.setdefault("TORCHTPU_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 2)))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               f"--master_port={_port()}", *common]
    else:
        env["CPU_NUM_DEVICES"] = "2"
        cmd = [sys.executable, *common, "--launch"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise RuntimeError(f"{kind} run failed:\n{res.stderr[-3000:]}")
    with open(out) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--role", default="driver", choices=["driver", "replica"])
    p.add_argument("--out")
    p.add_argument("--launch", action="store_true")
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2,
                   help="interleaved rounds (eager, 1x2, 2x1); the best of each is kept")
    args = p.parse_args()
    if args.role == "replica":
        if args.launch:
            import torch_xla
            torch_xla.launch(replica, args=(args,))
        else:
            replica(0, args)
        return
    grad_bytes = sum(p.numel() * p.element_size() for p in build().parameters())
    print(f"decoder: TinyTransformer(vocab {VOCAB}, d_model 128, 4 heads, 2 layers, seq {SEQ}), "
          f"{grad_bytes / 2**20:.2f} MiB of float32 gradients all-reduced per step; "
          f"global batch {args.global_batch}, SGD")
    with tempfile.TemporaryDirectory() as tmp:
        # Interleaved: eager, 1x2, 2x1, in rounds, the best of each kept, so
        # load from elsewhere on the machine lands on all of them.
        results = {"eager": [], "threads": [], "processes": []}
        for k in range(args.rounds):
            results["eager"].append(eager(args))
            results["threads"].append(run_child("threads", args, os.path.join(tmp, f"t{k}.json"))["step_s"])
            results["processes"].append(run_child("processes", args, os.path.join(tmp, f"p{k}.json"))["step_s"])
    best = {k: min(v) for k, v in results.items()}
    sps = {k: args.global_batch / v for k, v in best.items()}
    print(f"{'run':<34}{'step ms':>10}{'samples/s':>12}")
    names = {"eager": "eager PyTorch, 1 process", "threads": "torchtpu 1 process x 2 devices",
             "processes": "torchtpu 2 processes x 1 device"}
    for k in ("eager", "threads", "processes"):
        print(f"{names[k]:<34}{best[k] * 1e3:>10.2f}{sps[k]:>12.1f}")
    print(f"throughput ratio (2 processes x 1) / (1 process x 2): "
          f"{sps['processes'] / sps['threads']:.3f} (goal >= 0.9)")
    print(f"2 processes x 1 device / eager: {sps['processes'] / sps['eager']:.3f}")


if __name__ == "__main__":
    main()
