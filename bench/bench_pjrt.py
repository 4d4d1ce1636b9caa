"""Issue 7's benchmark: the same lazy graphs run by the engine's own CPU
backend and by XLA:CPU through PJRT (XLA's CPU plugin, docs/pjrt.md),
printed side by side in one run.

The backend is chosen when the runtime starts, so the parent runs this file
twice as a child (PJRT_DEVICE=CPU with TORCHTPU_CPU_BACKEND=own, then =pjrt)
and prints, per graph:
  - first step: wall time of the first step (trace + compile + execute);
  - compile, summed over the workload's distinct graphs (an optimizer's
    first step is a graph of its own): the engine's graph compile (CompileTime: build, passes, plan;
    both backends pay it) plus, for own, the tier-1 C build that follows in
    the background (time spent in tier1_wait after the warm-up steps), and
    for PJRT the plugin's compile (PjrtCompileTime: XLA's compile of the
    emitted StableHLO);
  - steady: median step time after warm-up (tier 1 installed for own; for
    PJRT, one host->device copy of every input and one device->host copy of
    every output are included, as the backend does per execution).

Graphs: an MLP training step (AdamW), the small CNN's forward+backward, a
transformer block forward.

Usage: PJRT_DEVICE=CPU .venv/bin/python bench/bench_pjrt.py [--steps 20]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

GRAPHS = ("mlp_train_step", "cnn_fwd_bwd", "transformer_block_fwd")


def _metric_total(name):
    import torch_xla.debug.metrics as met
    d = met.metric_data(name)
    return d[1] if d else 0.0


def _make(graph):
    """(model on xla, step function) for one graph."""
    import torch
    import torch_xla
    from models import SmallCNN, MLP, TinyTransformer, loss_of
    dev = torch_xla.device()
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if graph == "mlp_train_step":
        model = MLP(d_in=512, hidden=1024, classes=10).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(64, 512, generator=g).to(dev)
        y = torch.randint(0, 10, (64,), generator=g).to(dev)

        def step():
            opt.zero_grad()
            loss_of("mlp", model(x), y).backward()
            opt.step()
    elif graph == "cnn_fwd_bwd":
        model = SmallCNN().to(dev)
        x = torch.randn(32, 3, 32, 32, generator=g).to(dev)
        y = torch.randint(0, 10, (32,), generator=g).to(dev)

        def step():
            for p in model.parameters():
                p.grad = None
            loss_of("cnn", model(x), y).backward()
    else:
        model = TinyTransformer(vocab=1000, d_model=256, heads=4, layers=1, seq=128).to(dev)
        model.eval()
        ids = torch.randint(0, 1000, (8, 128), generator=g).to(dev)

        kept = []

        def step():
            with torch.no_grad():
                kept[:] = [model(ids)]  # a live result: the cut computes it
    return model, step


def child(steps, warmup):
    import torch_xla
    import torch_xla.core.xla_model as xm
    from torchtpu import _C
    torch_xla.device()
    out = {"engine": _C.pjrt_engine_info()}
    for graph in GRAPHS:
        _, step = _make(graph)
        torch_xla.sync()
        xm.wait_device_ops()
        c0, p0 = _metric_total("CompileTime"), _metric_total("PjrtCompileTime")
        t0 = time.perf_counter()
        with torch_xla.step():
            step()
        xm.wait_device_ops()
        first = time.perf_counter() - t0
        for _ in range(warmup):
            with torch_xla.step():
                step()
        xm.wait_device_ops()
        t1 = time.perf_counter()
        _C.tier1_wait()
        tier1 = time.perf_counter() - t1
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            with torch_xla.step():
                step()
            xm.wait_device_ops()
            times.append(time.perf_counter() - t)
        out[graph] = {"first_ms": first * 1e3,
                      "engine_compile_ms": (_metric_total("CompileTime") - c0) / 1e6,
                      "pjrt_compile_ms": (_metric_total("PjrtCompileTime") - p0) / 1e6,
                      "tier1_wait_ms": tier1 * 1e3,
                      "steady_ms": statistics.median(times) * 1e3}
    return out


def run_child(backend, steps, warmup):
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1", TORCHTPU_CPU_BACKEND=backend)
    env.pop("TORCHTPU_TIER", None)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--steps",
                        str(steps), "--warmup", str(warmup)], env=env, capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{backend} child failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.steps, a.warmup)))
        sys.stdout.flush()
        os._exit(0)
    own = run_child("own", a.steps, a.warmup)
    xla = run_child("pjrt", a.steps, a.warmup)
    print(f"XLA:CPU plugin: {xla['engine']['library_path']}")
    print(f"{'graph':<24}{'backend':<10}{'first step':>12}{'compile':>26}{'steady':>12}"
          f"{'steady own/xla':>16}")
    for graph in GRAPHS:
        o, x = own[graph], xla[graph]
        print(f"{graph:<24}{'own':<10}{o['first_ms']:>10.1f}ms"
              f"{o['engine_compile_ms']:>9.1f}ms + tier1 {o['tier1_wait_ms']:>6.0f}ms"
              f"{o['steady_ms']:>10.2f}ms{o['steady_ms'] / x['steady_ms']:>16.2f}")
        print(f"{'':<24}{'xla:pjrt':<10}{x['first_ms']:>10.1f}ms"
              f"{x['engine_compile_ms']:>9.1f}ms + xla   {x['pjrt_compile_ms']:>6.0f}ms"
              f"{x['steady_ms']:>10.2f}ms")


if __name__ == "__main__":
    main()
