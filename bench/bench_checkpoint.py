"""Checkpoint benchmark: time and peak host memory of xser.save / xm.save /
xser.load against torch.save / torch.load of the same state dict on the CPU,
measured in one run.

  PJRT_DEVICE=CPU .venv/bin/python bench/bench_checkpoint.py [--mb 256] [--tensors 16]

Peak memory is the growth of the process's peak RSS during the call (reset
through /proc/self/clear_refs), with glibc's mmap threshold pinned so freed
blocks leave RSS at once. xser.save should grow it by about the largest
tensor; a save that copies the whole state dict first grows it by the total.
"""
import argparse
import os
import sys
import tempfile
import time

if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:  # must be set before start-up
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402

import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.utils.serialization as xser  # noqa: E402


def kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def measure(fn):
    """(seconds, peak RSS growth in MiB) of fn()."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = kib("VmRSS")
    except OSError:
        base = None
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    peak = (kib("VmHWM") - base) / 1024 if base is not None else float("nan")
    return dt, peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256, help="total size of the state dict")
    ap.add_argument("--tensors", type=int, default=16)
    args = ap.parse_args()
    dev = torch_xla.device()
    per = args.mb * 1024 * 256 // args.tensors  # float32 elements per tensor
    sd_xla = {f"layer{i}.weight": torch.full((per,), float(i), device=dev)
              for i in range(args.tensors)}
    torch_xla.sync(wait=True)
    largest = per * 4 / 2**20
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "ckpt")
        xser.save({"warm": sd_xla["layer0.weight"]}, p)
        rows = []
        t, m = measure(lambda: xser.save(sd_xla, p))
        rows.append(("xser.save (xla)", t, m))
        t, m = measure(lambda: xm.save(sd_xla, p + ".xm"))
        rows.append(("xm.save (xla)", t, m))
        sd_cpu = {k: v.cpu() for k, v in sd_xla.items()}
        t, m = measure(lambda: torch.save(sd_cpu, p + ".torch"))
        rows.append(("torch.save (cpu dict)", t, m))
        del sd_cpu
        t, m = measure(lambda: xser.load(p))
        rows.append(("xser.load -> cpu", t, m))
        t, m = measure(lambda: xser.load(p, device=dev))
        rows.append(("xser.load -> xla", t, m))
        t, m = measure(lambda: torch.load(p + ".torch"))
        rows.append(("torch.load (cpu dict)", t, m))
    ref = rows[2][1]
    print(f"state dict: {args.tensors} x {largest:.1f} MiB = {args.mb} MiB (float32)")
    print(f"{'call':24s} {'seconds':>8s} {'vs torch.save':>14s} {'peak RSS +MiB':>14s} "
          f"{'/ largest':>10s}")
    for name, t, m in rows:
        print(f"{name:24s} {t:8.3f} {t / ref:13.2f}x {m:14.1f} {m / largest:10.2f}")


if __name__ == "__main__":
    main()
