"""Demo: train a small MLP on scikit-learn's digits dataset on an xla device.

The loop is PyTorch/XLA's modern single-host loop, unchanged: the model and
batches live on torch_xla.device(), each step runs inside torch_xla.step(),
and MpDeviceLoader moves batches to the device in the background.
"""
import argparse
import time

import torch
import torch.nn as nn
from sklearn.datasets import load_digits

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.distributed.parallel_loader import MpDeviceLoader


class MLP(nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.GELU(), nn.Dropout(0.1),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x):
        return self.net(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(x), generator=g)
    split = int(0.8 * len(x))
    train = torch.utils.data.TensorDataset(x[perm[:split]], y[perm[:split]])
    test_x, test_y = x[perm[split:]], y[perm[split:]]
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True,
                                         drop_last=True, generator=g)

    torch.manual_seed(0)
    torch_xla.manual_seed(0)
    device = torch_xla.device()
    print("devices:", torch_xla.devices())
    model = MLP().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    train_loader = MpDeviceLoader(loader, device)

    for epoch in range(args.epochs):
        model.train()
        t0 = time.time()
        losses = []
        for inputs, labels in train_loader:
            with torch_xla.step():
                optimizer.zero_grad()
                loss = loss_fn(model(inputs), labels)
                loss.backward()
                optimizer.step()
            losses.append(loss)
        mean_loss = torch.stack([l.detach() for l in losses]).mean().item()
        model.eval()
        with torch.no_grad():
            logits = model(test_x.to(device))
            acc = (logits.argmax(dim=1).cpu() == test_y).float().mean().item()
        print(f"epoch {epoch + 1}: loss {mean_loss:.4f}  test accuracy {acc:.3f}  "
              f"({time.time() - t0:.2f}s)")
    xm.wait_device_ops()
    print()
    print(met.short_metrics_report())


if __name__ == "__main__":
    main()
