"""AMP benchmark: one training step of a small transformer-style block
under bf16 autocast on xla, against the f32 step of the same model on xla
and against eager CPU autocast (torch.autocast('cpu', bfloat16)), all in
one run.

  PJRT_DEVICE=CPU .venv/bin/python bench/bench_amp.py [--steps 20] [--dim 256] [--batch 64]

Each variant warms up (compiles) first, then runs --steps steps; a step is
forward, loss, backward and SGD update, synced (torch_xla.sync(wait=True)
on xla). Prints ms per step and the ratios.
"""
import argparse
import time

import torch

import torch_xla


class Block(torch.nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))
        self.head = torch.nn.Linear(dim, 10)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(1))


def run(device, autocast_dtype, steps, dim, batch, seq=32):
    torch.manual_seed(0)
    model = Block(dim).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, seq, dim).to(device)
    y = torch.randint(0, 10, (batch,)).to(device)
    kind = "xla" if device != "cpu" else "cpu"

    def step():
        opt.zero_grad()
        with torch.autocast(kind, dtype=torch.bfloat16, enabled=autocast_dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if kind == "xla":
            torch_xla.sync(wait=True)
        return loss

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    dt = (time.perf_counter() - t0) / steps
    return dt * 1e3, float(loss.detach().cpu())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    dev = torch_xla.device()
    amp_ms, amp_loss = run(dev, torch.bfloat16, a.steps, a.dim, a.batch)
    f32_ms, f32_loss = run(dev, None, a.steps, a.dim, a.batch)
    cpu_ms, cpu_loss = run("cpu", torch.bfloat16, a.steps, a.dim, a.batch)
    print(f"block dim={a.dim} batch={a.batch} seq=32, {torch.get_num_threads()} threads")
    print(f"  xla bf16 autocast : {amp_ms:8.2f} ms/step  (loss {amp_loss:.4f})")
    print(f"  xla f32           : {f32_ms:8.2f} ms/step  (loss {f32_loss:.4f})")
    print(f"  cpu bf16 autocast : {cpu_ms:8.2f} ms/step  (loss {cpu_loss:.4f})")
    print(f"  xla amp / xla f32 : {amp_ms / f32_ms:6.2f}")
    print(f"  xla amp / cpu amp : {amp_ms / cpu_ms:6.2f}")


if __name__ == "__main__":
    main()
