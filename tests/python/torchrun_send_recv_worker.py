"""The worker test_send_recv.py runs under torchrun (2 processes x 1
device): xm.send / xm.recv across the processes, then the xla backend's
dist.send / dist.recv, each replica writing what it received to
$P2P_OUT/<ordinal>.json."""
import json
import os

import torch
import torch.distributed as dist

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers "xla")
import torch_xla.runtime as xr


def main():
    d = torch_xla.device()
    r, n = xr.global_ordinal(), xr.world_size()
    got = {}
    # Both send first (buffered), then receive: a ring over the processes.
    xm.send(torch.arange(4, dtype=torch.float32, device=d) + 10 * r, channel_id=r)
    got["ring"] = xm.recv(torch.zeros(4, device=d), channel_id=(r - 1) % n).cpu().tolist()
    # Two sends on one channel arrive in order.
    if r == 0:
        for k in range(2):
            xm.send(torch.full((2, 2), k + 1, dtype=torch.int32, device=d), channel_id=50)
    else:
        got["fifo"] = [xm.recv(torch.zeros(2, 2, dtype=torch.int32, device=d), 50).cpu().tolist()
                       for _ in range(2)]
    # torch.distributed's send / recv on the xla backend (PyTorch/XLA's
    # send_recv_permute test: even ranks send then receive, odd the reverse).
    dist.init_process_group("xla", init_method="xla://")
    rank = dist.get_rank()
    send_t = torch.tensor([float(rank)], device=d)
    recv_t = torch.tensor([-1.0], device=d)
    if rank % 2 == 0:
        dist.send(send_t, (rank + 1) % n)
        dist.recv(recv_t, (rank - 1) % n)
    else:
        dist.recv(recv_t, (rank - 1) % n)
        dist.send(send_t, (rank + 1) % n)
    got["dist"] = recv_t.cpu().tolist()
    with open(os.path.join(os.environ["P2P_OUT"], f"{r}.json"), "w") as f:
        json.dump(got, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
