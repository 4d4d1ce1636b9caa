"""Issues 2 and 4's benchmark: training-step time of torchtpu against eager
PyTorch CPU measured in the same run (an MLP, a ResNet-18 on 32x32 images,
a GPT-style decoder), and the per-op tracing cost.

Prints, for each model, the steady-state step time of eager PyTorch and of
torchtpu (lazy tracing + cached graph + C kernels), and their ratio
(torchtpu / eager; below 1 is faster). Then the cost of recording one tiny
op on xla next to eager PyTorch's cost for the same op. The three ways of
running (eager, waited, pipelined) are interleaved in rounds, so load from
elsewhere on the machine spreads over all of them.

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


class Runner:
    """One way of running a model's training steps: 'eager' (PyTorch CPU),
    'waited' (torchtpu, each step waits for the device: tracing +
    execution) or 'pipelined' (torchtpu, steps back to back as PyTorch/XLA
    loops run them, the next traced while one executes; a block of steps
    is timed as a whole and waits once at its end)."""

    def __init__(self, kind, mode, device, batch, nbatches):
        self.kind, self.mode = kind, mode
        self.device = "cpu" if mode == "eager" else device
        self.model = build(kind).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.data = batches(kind, nbatches, batch)
        self.i = 0

    def _step(self):
        x, y = self.data[self.i % len(self.data)]
        self.i += 1
        if self.mode == "eager":
            self.opt.zero_grad()
            loss_of(self.kind, self.model(x), y).backward()
            self.opt.step()
            return
        with torch_xla.step():
            x, y = x.to(self.device), y.to(self.device)
            self.opt.zero_grad()
            loss_of(self.kind, self.model(x), y).backward()
            self.opt.step()

    def warmup(self, n):
        """Steps each waited for (tier 1 gets built for the xla modes)."""
        for _ in range(n):
            self._step()
            if self.mode != "eager":
                xm.wait_device_ops()

    def block(self, n):
        """Seconds per step over n steps: one figure per step, or (pipelined)
        one for the block."""
        if self.mode == "pipelined":
            t0 = time.perf_counter()
            for _ in range(n):
                self._step()
            xm.wait_device_ops()
            return [(time.perf_counter() - t0) / n]
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            self._step()
            if self.mode == "waited":
                xm.wait_device_ops()
            out.append(time.perf_counter() - t0)
        return out


def time_model(kind, device, steps, warmup, batch, rounds):
    """Median step time of each mode. The modes run interleaved: `rounds`
    rounds of steps/rounds steps each, in a rotating order, so a change in
    the machine's load (this is a shared VM) lands on all of them instead
    of on whichever ran during it."""
    modes = ["eager", "waited", "pipelined"]
    runners = {m: Runner(kind, m, device, batch, 16) for m in modes}
    for r in runners.values():
        r.warmup(warmup)
    per = max(1, steps // rounds)
    times = {m: [] for m in modes}
    for k in range(rounds):
        for m in modes[k % 3:] + modes[:k % 3]:
            # PyTorch's OpenMP threads spin for a while after eager ops
            # before sleeping: start each block once they have.
            time.sleep(0.05)
            times[m] += runners[m].block(per)
    return {m: statistics.median(v) for m, v in times.items()}


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
    p.add_argument("--rounds", type=int, default=6,
                   help="interleaved rounds of steps/rounds steps per mode")
    args = p.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    dev = torch_xla.device()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {dev}")
    print("torchtpu 'waited': each step waits for the device (tracing + execution); "
          "'pipelined': steps run back to back, the next traced while one executes")
    print(f"{'model':<12}{'eager ms':>10}{'waited ms':>11}{'ratio':>7}{'pipelined ms':>14}"
          f"{'ratio':>7}")
    for kind in args.models.split(","):
        t = time_model(kind, dev, args.steps, args.warmup, args.batch, args.rounds)
        eager, ours, piped = t["eager"], t["waited"], t["pipelined"]
        print(f"{kind:<12}{eager * 1e3:>10.2f}{ours * 1e3:>11.2f}{ours / eager:>7.2f}"
              f"{piped * 1e3:>14.2f}{piped / eager:>7.2f}")
    e = tiny_op_cost("cpu")
    o = tiny_op_cost(dev)
    print(f"tiny op (x + 1.0 on 4 floats): eager {e:.1f} us/op, torchtpu tracing {o:.1f} us/op "
          f"(ratio {o / e:.1f})")


if __name__ == "__main__":
    main()
