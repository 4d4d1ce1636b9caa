"""All-reduce latency and bandwidth across processes (docs/collectives.md).

Run: python -m torch.distributed.run --nproc_per_node=2 bench/bench_collectives.py
(PYTHONPATH=python PJRT_DEVICE=CPU). Process 0 prints, per size, the median
time of one xm.all_reduce (sum, float32) including its sync, and the
algorithm bandwidth (bytes / time), under the cross-process transport
TORCHTPU_PROCESS_TRANSPORT selects (c10d or python)."""
import time

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def main():
    d = torch_xla.device()
    from torchtpu import process_transport
    if xr.global_ordinal() == 0:
        print(f"transport: {process_transport.kind()}", flush=True)
    for nbytes, reps in ((4, 200), (64 << 10, 100), (4 << 20, 20), (64 << 20, 5)):
        x = torch.ones(nbytes // 4, device=d)
        torch_xla.sync(wait=True)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            y = xm.all_reduce(xm.REDUCE_SUM, x)
            torch_xla.sync(wait=True)
            times.append(time.perf_counter() - t0)
        assert float(y[0].cpu()) == xr.world_size()
        med = sorted(times)[len(times) // 2]
        if xr.global_ordinal() == 0:
            print(f"all_reduce {nbytes:>9} B: {med * 1e6:10.1f} us  {nbytes / med / 1e9:7.3f} GB/s",
                  flush=True)


if __name__ == "__main__":
    main()
