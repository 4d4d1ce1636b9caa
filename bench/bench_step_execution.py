"""Execution time of one training step on the engine, apart from tracing
(issue 4): bench_training.py's ResNet-18 (or another of its models), batch
32, steady state. Tier 1 is built before the first execution
(TORCHTPU_TIER=1, set here unless given), so no background compile
overlaps the timed steps; the execution time of a step is the growth of
the ExecuteTime metric across it, the wall time includes tracing and the
graph cut. --eager adds eager PyTorch's step at the same thread count.

    PYTHONPATH=python PJRT_DEVICE=CPU TORCHTPU_NUM_THREADS=1 \\
        .venv/bin/python bench/bench_step_execution.py --eager
    XLA_PERSISTENT_CACHE_PATH=/tmp/ttcache ...   # reuse tier-1 builds across runs
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TORCHTPU_TIER", "1")

import torch  # noqa: E402

import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_training import batches, build, loss_of  # noqa: E402


def execute_ns():
    d = met.metric_data("ExecuteTime")
    return d[1] if d else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--eager", action="store_true", help="also time eager PyTorch's step")
    args = ap.parse_args()
    threads = int(os.environ.get("TORCHTPU_NUM_THREADS", os.cpu_count() or 1))
    dev = torch_xla.device()
    model = build(args.model).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = batches(args.model, args.steps + args.warmup, args.batch)
    ex, wall = [], []
    for i, (x, y) in enumerate(data):
        e0, t0 = execute_ns(), time.perf_counter()
        with torch_xla.step():
            x, y = x.to(dev), y.to(dev)
            opt.zero_grad()
            loss_of(args.model, model(x), y).backward()
            opt.step()
        xm.wait_device_ops()
        if i >= args.warmup:
            wall.append(time.perf_counter() - t0)
            ex.append((execute_ns() - e0) / 1e6)
    print(f"{args.model}, batch {args.batch}, engine threads {threads}: execution "
          f"{statistics.median(ex):.1f} ms (steps {[round(e) for e in ex]}), wall "
          f"{statistics.median(wall) * 1e3:.1f} ms")
    if args.eager:
        torch.set_num_threads(threads)
        model = build(args.model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ts = []
        for i, (x, y) in enumerate(data):
            t0 = time.perf_counter()
            opt.zero_grad()
            loss_of(args.model, model(x), y).backward()
            opt.step()
            if i >= args.warmup:
                ts.append(time.perf_counter() - t0)
        print(f"eager step {statistics.median(ts) * 1e3:.1f} ms (torch threads {threads})")


if __name__ == "__main__":
    main()
