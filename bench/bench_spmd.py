"""Issue 30's benchmark: SPMD data-parallel training of a decoder on 2
virtual devices against the single-device step and eager PyTorch CPU, and
what each device holds.

The model is bench_training.py's GPT-style decoder (tests/python/models.py
TinyTransformer: vocab 1000, d_model 128, 4 heads, 2 layers, 64 tokens),
trained with AdamW on the same global batch in every configuration:

  eager     PyTorch CPU
  single    torchtpu, no SPMD, one device
  spmd      torchtpu, xr.use_spmd(), mesh (2,) 'data', token ids and labels
            sharded ('data', None): each device runs its half of the batch
  fsdp      mesh (2,) 'fsdp' (FSDPv2-style): the batch and every parameter's
            first dim sharded over 'fsdp'
  megatron  mesh (2,4) ('data', 'model'), 8 devices: batch over 'data';
            attention in-projection, MLP up-projection, embedding and LM head
            column-parallel over 'model', the out- and down-projections
            row-parallel, norms and the other biases replicated

Each configuration runs in its own subprocess (SPMD mode and the device
count are fixed per process); the rounds interleave them, so load from
elsewhere on the machine spreads over all. A subprocess times blocks of
steps run back to back (one wait per block) and reports each block's time
per step; the medians over all blocks are printed. Every subprocess runs
its kernels on --threads threads (torch.set_num_threads, OMP_NUM_THREADS
and TORCHTPU_NUM_THREADS alike; default 1: on a machine shared with other
work, OpenMP threads that spin for a busy core make eager PyTorch many
times slower). An SPMD run still has one worker per engine device, as it
would have one chip per device.

Prints:
  - per configuration: median step time (ms), samples/s, the ratio to
    single (throughput, SPMD/single; the goal for spmd is >= 0.9) and to
    eager (throughput vs eager PyTorch), the last loss, and the engine's
    partitioned / fallback run counts;
  - per device: bytes in use (xm.get_memory_info(f'xla:{i}')['bytes_used'])
    after the model is placed (parameters), after training (parameters,
    optimizer state, whatever is live) and the peak above the start, for
    single, spmd and fsdp side by side;
  - the parameter lines: each device's parameter bytes against the total
    (unsharded) parameter bytes, for fsdp (2,) and megatron (2,4).

Usage: PJRT_DEVICE=CPU .venv/bin/python bench/bench_spmd.py [--rounds 3]
       [--blocks 3] [--steps 5] [--batch 16] [--threads 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEVICES = {"eager": 1, "single": 1, "spmd": 2, "fsdp": 2, "megatron": 8}
# The share of the parameters a device would hold if every parameter were
# sharded over the axis that splits it ('fsdp': 2 ways; 'model': 4 ways).
IDEAL_SHARE = {"fsdp": 1 / 2, "megatron": 1 / 4}


# ----------------------------------------------------------------- child
def child(config, args):
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    from models import TinyTransformer, loss_of

    device = "cpu"
    if config != "eager":
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr
        device = "xla"
        if config in ("spmd", "fsdp", "megatron"):
            xr.use_spmd()
    n = DEVICES[config]

    def in_use():
        if device == "cpu":
            return [0]
        xm.wait_device_ops()
        return [xm.get_memory_info(f"xla:{i}")["bytes_used"] for i in range(n)]

    def peak():
        return [xm.get_memory_info(f"xla:{i}")["peak_bytes_used"] for i in range(n)]

    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(4):
        ids = torch.randint(0, 1000, (args.batch, 64), generator=g)
        data.append((ids, torch.roll(ids, -1, 1)))
    base = in_use()
    torch.manual_seed(0)
    model = TinyTransformer(vocab=1000, d_model=128, heads=4, layers=2, seq=64).to(device)
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    batch_spec = None
    if config == "spmd":
        mesh = xs.Mesh(np.arange(2), (2,), ("data",))
        batch_spec = ("data", None)
    elif config == "fsdp":
        mesh = xs.Mesh(np.arange(2), (2,), ("fsdp",))
        batch_spec = ("fsdp", None)
        for p in model.parameters():
            xs.mark_sharding(p, mesh, ("fsdp",) + (None,) * (p.dim() - 1))
    elif config == "megatron":
        mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
        batch_spec = ("data", None)
        column = (None, "model")
        for name, p in model.named_parameters():
            if name.endswith(("in_proj_weight", "linear1.weight")) or name in ("tok.weight", "head.weight"):
                xs.mark_sharding(p, mesh, ("model", None))
            elif name.endswith(("in_proj_bias", "linear1.bias")) or name == "head.bias":
                xs.mark_sharding(p, mesh, ("model",))
            elif name.endswith(("out_proj.weight", "linear2.weight")):
                xs.mark_sharding(p, mesh, column)
    params = [b - a for a, b in zip(base, in_use())]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if device != "cpu":
        met.clear_all()
    state = {"i": 0, "loss": None}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        if device == "cpu":
            opt.zero_grad()
            loss = loss_of("transformer", model(x), y)
            loss.backward()
            opt.step()
            state["loss"] = loss.detach()
            return
        with torch_xla.step():
            x, y = x.to(device), y.to(device)
            if batch_spec is not None:
                xs.mark_sharding(x, mesh, batch_spec)
                xs.mark_sharding(y, mesh, batch_spec)
            opt.zero_grad()
            loss = loss_of("transformer", model(x), y)
            loss.backward()
            opt.step()
            state["loss"] = loss.detach()

    def wait():
        if device != "cpu":
            xm.wait_device_ops()

    for _ in range(args.warmup):
        step()
    wait()
    blocks = []
    for _ in range(args.blocks):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        wait()
        blocks.append((time.perf_counter() - t0) / args.steps)
    out = dict(config=config, blocks=blocks, loss=float(state["loss"].cpu()),
               total_param_bytes=total, params=params)
    if device != "cpu":
        out.update(after=[b - a for a, b in zip(base, in_use())],
                   peak=[p - a for a, p in zip(base, peak())],
                   partitioned=met.counter_value("SpmdPartitionedExecution") or 0,
                   fallback=met.counter_value("SpmdPartitionFallback") or 0)
    print("RESULT " + json.dumps(out))


# ---------------------------------------------------------------- parent
def run_child(config, args):
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(DEVICES[config]),
               PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS=str(args.threads),
               TORCHTPU_NUM_THREADS=str(args.threads))
    for name in ("XLA_USE_SPMD", "TORCHTPU_SPMD_PARTITION"):
        env.pop(name, None)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", config,
           "--threads", str(args.threads),
           "--blocks", str(args.blocks), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--batch", str(args.batch)]
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not line:
        sys.exit(f"{config} failed (rc {p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-4000:]}")
    return json.loads(line[-1][len("RESULT "):])


def kib(b):
    return f"{b / 1024:9.1f}"


def main():
    ap = argparse.ArgumentParser(description="SPMD data-parallel decoder training benchmark")
    ap.add_argument("--child", choices=sorted(DEVICES), help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--configs", default="eager,single,spmd,fsdp,megatron")
    args = ap.parse_args()
    if args.child:
        return child(args.child, args)

    configs = args.configs.split(",")
    load_before = os.getloadavg()[0]
    runs = {c: [] for c in configs}
    for _ in range(args.rounds):
        for c in configs:
            runs[c].append(run_child(c, args))
    load = os.getloadavg()
    med = {c: statistics.median(b for r in runs[c] for b in r["blocks"]) for c in configs}
    print(f"decoder (vocab 1000, d 128, 2 layers, 64 tokens), AdamW, global batch {args.batch}; "
          f"{args.rounds} rounds x {args.blocks} blocks x {args.steps} steps, medians; "
          f"{args.threads} thread(s) per process, {os.cpu_count()} CPUs, load average "
          f"{load_before:.2f} before, {load[0]:.2f} after")
    print(f"{'config':9} {'ms/step':>9} {'samples/s':>10} {'vs single':>10} {'vs eager':>9} "
          f"{'loss':>7} {'partitioned':>12} {'fallback':>9}")
    for c in configs:
        last = runs[c][-1]
        ratio_single = med["single"] / med[c] if "single" in med else float("nan")
        ratio_eager = med["eager"] / med[c] if "eager" in med else float("nan")
        print(f"{c:9} {med[c] * 1e3:9.2f} {args.batch / med[c]:10.1f} {ratio_single:10.3f} "
              f"{ratio_eager:9.3f} {last['loss']:7.3f} {last.get('partitioned', '-'):>12} "
              f"{last.get('fallback', '-'):>9}")
    if "spmd" in med and "single" in med:
        print(f"throughput SPMD/single = {med['single'] / med['spmd']:.3f} (goal >= 0.9)")

    print("\nper-device bytes in use, KiB (xm.get_memory_info), above the start:")
    print(f"{'config':9} {'device':>6} {'params':>9} {'after':>9} {'peak':>9}")
    for c in configs:
        r = runs[c][-1]
        if c in ("eager", "megatron"):
            continue
        for i in range(DEVICES[c]):
            print(f"{c:9} {i:6} {kib(r['params'][i])} {kib(r['after'][i])} {kib(r['peak'][i])}")

    print("\nparameter bytes per device vs total (unsharded):")
    for c in ("fsdp", "megatron"):
        if c not in runs:
            continue
        r = runs[c][-1]
        total = r["total_param_bytes"]
        per = ", ".join(f"{b / total:.3f}" for b in r["params"])
        print(f"{c:9} total {total} B; device share: {per} "
              f"(max {max(r['params']) / total:.3f}, ideal {IDEAL_SHARE[c]:.3f})")


if __name__ == "__main__":
    main()
