"""All-reduce latency and bandwidth (docs/collectives.md).

Across processes: python -m torch.distributed.run --nproc_per_node=2
bench/bench_collectives.py (PYTHONPATH=python PJRT_DEVICE=CPU). Process 0
prints, per size, the median time of one xm.all_reduce (sum, float32)
including its sync, and the algorithm bandwidth (bytes / time), under the
cross-process transport TORCHTPU_PROCESS_TRANSPORT selects (c10d or
python).

In one process: CPU_NUM_DEVICES=2 python bench/bench_collectives.py
--in-process runs the same timing in the replicas of torch_xla.launch,
alternating it with a host memcpy of the same bytes (torch's copy_, one
thread, in replica 0 while its peers wait) in each round, and prints the medians, the ratio memcpy time /
all-reduce time (from the same run) and the load average. The layer's own
bandwidth without the Python and sync overhead: bench/bench_collectives.c."""
import os
import sys
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


def _in_process_replica(index):
    d = torch_xla.device()
    rounds = 7
    for nbytes, reps in ((4, 200), (64 << 10, 100), (4 << 20, 20), (64 << 20, 5)):
        x = torch.ones(nbytes // 4, device=d)
        src, dst = torch.ones(nbytes // 4), torch.empty(nbytes // 4)
        y = xm.all_reduce(xm.REDUCE_SUM, x)
        torch_xla.sync(wait=True)
        ts, ms, ratios = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(reps):
                y = xm.all_reduce(xm.REDUCE_SUM, x)
                torch_xla.sync(wait=True)
            t = (time.perf_counter() - t0) / reps
            # Replica 0 alone copies (its peers wait in the next
            # all-reduce), so the copy has the memory to itself.
            m = t
            if xr.global_ordinal() == 0:
                t0 = time.perf_counter()
                for _ in range(reps):
                    dst.copy_(src)
                m = (time.perf_counter() - t0) / reps
            ts.append(t)
            ms.append(m)
            ratios.append(m / t)
        assert float(y[0].cpu()) == xr.world_size()
        if xr.global_ordinal() == 0:
            t, m = sorted(ts)[rounds // 2], sorted(ms)[rounds // 2]
            print(f"all_reduce {nbytes:>9} B: {t * 1e6:10.1f} us {nbytes / t / 1e9:7.3f} GB/s  "
                  f"memcpy {m * 1e6:9.1f} us {nbytes / m / 1e9:7.3f} GB/s  ratio "
                  f"{sorted(ratios)[rounds // 2]:.2f}  load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    if "--in-process" in sys.argv:
        torch.set_num_threads(1)
        torch_xla.launch(_in_process_replica)
    else:
        main()
