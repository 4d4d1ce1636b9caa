"""The worker test_torchrun_ddp.py runs under torchrun (2 processes, one
xla device each): torch.distributed on the xla backend (xla:// init),
DistributedDataParallel over an MLP and a small transformer encoder, and
plain xm.optimizer_step(opt, barrier=True) gradient averaging; each rank
trains on its half of a fixed global batch and writes its per-step losses
and final weights to $DDP_OUT/<rank>.json. The models, data and steps
come from torchrun_ddp_models.py, which the test uses for the full-batch
reference on CPU."""
import json
import os
import sys

import torch
import torch.distributed as dist

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers "xla")
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchrun_ddp_models as models  # noqa: E402


def train(name, rank, world, device, wrap):
    model = models.build(name)
    if rank == 1 and wrap:
        # DDP must start every rank from rank 0's weights (its broadcast).
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    model = model.to(device)
    net = DDP(model) if wrap else model
    opt = torch.optim.SGD(net.parameters(), lr=models.LR)
    x, y = models.data(name)
    rows = x.shape[0] // world
    xb, yb = x[rank * rows:(rank + 1) * rows].to(device), y[rank * rows:(rank + 1) * rows].to(device)
    losses = []
    for _ in range(models.STEPS):
        opt.zero_grad()
        loss = models.loss(net(xb), yb)
        loss.backward()
        if wrap:
            opt.step()
        else:
            xm.optimizer_step(opt, barrier=True)
        torch_xla.sync()
        losses.append(float(loss.detach().cpu()))
    return {"losses": losses,
            "weights": {k: v.detach().cpu().tolist() for k, v in model.state_dict().items()}}


def main():
    dist.init_process_group("xla", init_method="xla://")
    rank, world = dist.get_rank(), dist.get_world_size()
    d = torch_xla.device()
    res = {"backend": dist.get_backend(), "world": world,
           "ddp_mlp": train("mlp", rank, world, d, True),
           "ddp_transformer": train("transformer", rank, world, d, True),
           "xm_step_mlp": train("mlp", rank, world, d, False)}
    with open(os.path.join(os.environ["DDP_OUT"], f"{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
