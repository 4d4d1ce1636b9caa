"""The models, data and loss of the data-parallel tests
(test_torchrun_ddp.py and its torchrun worker): both sides build them
from the same seeds, so the worker's replicas and the test's CPU
full-batch reference start from the same weights and see the same
global batch."""
import torch
import torch.nn as nn

STEPS = 3
LR = 0.1
BATCH = 8  # the global batch; each of the 2 ranks takes half


class Encoder(nn.Module):
    """A one-layer transformer encoder with a linear head on the mean over
    the sequence (dropout 0: the result is deterministic)."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
                                                dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.layer(x).mean(1))


def build(name):
    torch.manual_seed(0)
    if name == "mlp":
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    return Encoder()


def data(name):
    g = torch.Generator().manual_seed(1)
    shape = (BATCH, 8) if name == "mlp" else (BATCH, 5, 16)
    return torch.randn(*shape, generator=g), torch.randn(BATCH, 4, generator=g)


def loss(out, target):
    return ((out - target) ** 2).mean()
