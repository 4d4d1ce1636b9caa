"""Issues 2 and 4's benchmark: training-step time of torchtpu against eager
PyTorch CPU measured in the same run (an MLP, a ResNet-18 on 32x32 images,
a GPT-style decoder), and the per-op tracing cost.

Prints, for each model, the steady-state step time of eager PyTorch and of
torchtpu (lazy tracing + cached graph + C kernels), and their ratio
(torchtpu / eager; below 1 is faster). Then the cost of recording one tiny
op on xla next to eager PyTorch's cost for the same op.

Usage: bash scripts/bootstrap.sh && PJRT_DEVICE=CPU .venv/bin/python bench/bench_training.py
"""
import argparse
import os
import statistics
import sys
import time

import torch

import torch_xla
import torch_xla.core.xla_model as xm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from models import MLP, TinyTransformer, loss_of  # noqa: E402
from vision_models import resnet18  # noqa: E402


def batches(kind, n, batch):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        if kind == "mlp":
            out.append((torch.randn(batch, 512, generator=g), torch.randint(0, 10, (batch,), generator=g)))
        elif kind == "resnet18":
            out.append((torch.randn(batch, 3, 32, 32, generator=g),
                        torch.randint(0, 10, (batch,), generator=g)))
        else:
            ids = torch.randint(0, 1000, (batch, 64), generator=g)
            out.append((ids, torch.roll(ids, -1, 1)))
    return out


def build(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        return MLP(d_in=512, hidden=1024, classes=10)
    if kind == "resnet18":
        return resnet18(num_classes=10)
    return TinyTransformer(vocab=1000, d_model=128, heads=4, layers=2, seq=64)


def time_steps(kind, device, steps, warmup, batch):
    model = build(kind).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = batches(kind, steps + warmup, batch)
    times = []
    for i, (x, y) in enumerate(data):
        t0 = time.perf_counter()
        if device == "cpu":
            opt.zero_grad()
            loss_of(kind, model(x), y).backward()
            opt.step()
        else:
            with torch_xla.step():
                x, y = x.to(device), y.to(device)
                opt.zero_grad()
                loss_of(kind, model(x), y).backward()
                opt.step()
            xm.wait_device_ops()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_steps_pipelined(kind, device, steps, warmup, batch):
    """Steady-state step time of a training loop that does not wait for the
    device between steps (as PyTorch/XLA loops run: the next step is traced
    while the previous one executes): warmup steps (each waited for, so
    tier 1 is built), then `steps` steps timed as a whole, waiting once at
    the end."""
    model = build(kind).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = batches(kind, steps + warmup, batch)

    def step(x, y):
        with torch_xla.step():
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss_of(kind, model(x), y).backward()
            opt.step()

    for x, y in data[:warmup]:
        step(x, y)
        xm.wait_device_ops()
    t0 = time.perf_counter()
    for x, y in data[warmup:]:
        step(x, y)
    xm.wait_device_ops()
    return (time.perf_counter() - t0) / steps


def tiny_op_cost(device, n=2000):
    x = torch.ones(4, device=device) if device == "cpu" else torch.ones(4).to(device)
    y = x
    t0 = time.perf_counter()
    for _ in range(n):
        y = y + 1.0
    dt = (time.perf_counter() - t0) / n
    if device != "cpu":
        torch_xla.sync()
        xm.wait_device_ops()
    return dt * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--models", default="mlp,resnet18,transformer")
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    dev = torch_xla.device()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {dev}")
    print("torchtpu 'waited': each step waits for the device (tracing + execution); "
          "'pipelined': steps run back to back, the next traced while one executes")
    print(f"{'model':<12}{'eager ms':>10}{'waited ms':>11}{'ratio':>7}{'pipelined ms':>14}"
          f"{'ratio':>7}")
    for kind in args.models.split(","):
        eager = time_steps(kind, "cpu", args.steps, args.warmup, args.batch)
        ours = time_steps(kind, dev, args.steps, args.warmup, args.batch)
        piped = time_steps_pipelined(kind, dev, args.steps, args.warmup, args.batch)
        print(f"{kind:<12}{eager * 1e3:>10.2f}{ours * 1e3:>11.2f}{ours / eager:>7.2f}"
              f"{piped * 1e3:>14.2f}{piped / eager:>7.2f}")
    e = tiny_op_cost("cpu")
    o = tiny_op_cost(dev)
    print(f"tiny op (x + 1.0 on 4 floats): eager {e:.1f} us/op, torchtpu tracing {o:.1f} us/op "
          f"(ratio {o / e:.1f})")


if __name__ == "__main__":
    main()
