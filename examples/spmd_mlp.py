"""Demo: one sharded MLP training step, partitioned 8 ways by XLA's SPMD
partitioner on XLA's CPU PJRT plugin (pip install xla-cpu-pjrt).

The model code is PyTorch/XLA's SPMD style: a 2x4 mesh ('data', 'model'),
the batch split over 'data', the weights split Megatron-style over 'model'.
The engine computes the step itself unpartitioned (a sharding never changes
a value); xs.run_spmd runs the same lazy graph partitioned on 8 plugin
devices. The script prints the largest difference between the two, and
the shard each device holds of the first weight.

    PYTHONPATH=python PJRT_DEVICE=CPU python examples/spmd_mlp.py
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr


def main():
    xr.use_spmd()
    dev = torch_xla.device()
    mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
    w1, _b1, w2, _b2 = model.parameters()
    xs.mark_sharding(w1, mesh, ("model", None))
    xs.mark_sharding(w2, mesh, (None, "model"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    x = torch.randn(64, 64).to(dev)
    y = torch.randint(0, 10, (64,)).to(dev)
    xs.mark_sharding(x, mesh, ("data", None))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()

    outputs = [loss] + list(model.parameters())
    text = xm.get_stablehlo(outputs)
    print(f"StableHLO: {len(text)} chars, {text.count('mhlo.sharding')} sharding attributes")
    partitioned, shards = xs.run_spmd(outputs, with_shards=True)
    unpartitioned = [t.detach().cpu() for t in outputs]
    diff = max(float((a - b).abs().max()) for a, b in zip(partitioned, unpartitioned))
    print(f"loss {float(partitioned[0]):.6f}; largest difference partitioned vs engine: {diff:.2e}")
    print("w1 shard per device:", [tuple(shards[1][p].shape) for p in range(8)],
          "of", tuple(w1.shape))


if __name__ == "__main__":
    main()
