"""Issue 4's compiler benchmark, every figure next to an eager-PyTorch or
memcpy baseline measured in the same run:

1. fused elementwise throughput (GB/s of inputs+outputs) for a 6-op chain,
   tier 0 (interpreter) and tier 1 (generated C), against a memcpy
   (torch.clone) of the same bytes and against eager PyTorch's chain;
2. compile time of a 1,000-node graph on tier 0 (CompileTime metric), and
   tier-1 load time from a warm persistent cache;
3. time to first training step, torchtpu vs eager (fresh processes);
4. peak RSS of a training run, torchtpu vs eager (fresh processes);
5. memory of the training steps of bench_training.py's MLP and transformer:
   the engine's peak device bytes (tt memory stats) next to the bytes in use
   between steps (parameters, optimizer state), the peak RSS of torchtpu and
   of eager PyTorch for the same model, and the step time (fresh processes);
6. reductions with fused producers/epilogues: layer_norm forward on
   [2048, 1024] (as IR primitives, TORCHTPU_FUSED_LAYER_NORM=0) and an MSE
   (mean((a - b)^2) over 4M floats), with reduction fusion on and off
   (TORCHTPU_REDUCE_FUSION), tier 0 and tier 1, against eager PyTorch; and
   the layer norm as the engine's op.

Usage: bash scripts/bootstrap.sh && PJRT_DEVICE=CPU .venv/bin/python bench/bench_compiler.py
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
N = 1 << 22  # 4M floats = 16 MB per tensor


def best(fn, reps=5):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def chain(x, y):
    return ((x * 1.5 + y).tanh() * y - x).sigmoid()


def child_fused(tier):
    import torch_xla
    from torchtpu import _C
    x, y = torch.randn(N), torch.randn(N)
    xd, yd = x.to("xla"), y.to("xla")

    keep = []

    def run():
        keep[:] = [chain(xd, yd)]  # a live result, so the sync computes it
        torch_xla.sync(wait=True)

    for _ in range(3):
        run()
        _C.tier1_wait()
    t = best(run)
    print(json.dumps({"seconds": t}))


def child_compile(cache):
    import torch_xla
    import torch_xla.debug.metrics as met
    import torch_xla.runtime as xr
    from torchtpu import _C
    if cache and cache != "-":
        xr.initialize_cache(cache)
    x = torch.randn(64).to("xla")
    met.clear_all()
    y = x
    for i in range(333):  # ~1,000 IR nodes: mul, add (+ scalar inputs)
        y = y * 0.999 + 0.001
    t0 = time.perf_counter()
    torch_xla.sync(wait=True)
    first = time.perf_counter() - t0
    compile_ns = met.metric_data("CompileTime")[1]
    # First run of a fused chain with TORCHTPU_TIER=1 (set by the parent):
    # includes the tier-1 build (cold cache) or library load (warm cache).
    a = torch.randn(1 << 16).to("xla")
    t0 = time.perf_counter()
    chain(a, a).cpu()
    tier1 = time.perf_counter() - t0
    _C.tier1_wait()
    print(json.dumps({"compile_ms": compile_ns / 1e6 if compile_ns else 0.0,
                      "first_sync_ms": first * 1e3,
                      "tier1_wait_ms": tier1 * 1e3,
                      "hits": met.counter_value("PersistentCacheHit") or 0,
                      "builds": met.counter_value("Tier1Compile") or 0}))


def peak_rss():
    """This process's peak RSS: VmHWM (ru_maxrss keeps the forking parent's
    peak across exec, which hides a child smaller than this benchmark)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_train(mode):
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
    from models import MLP
    t_start = time.perf_counter()
    torch.manual_seed(0)
    model = MLP(d_in=512, hidden=2048, classes=10)
    if mode == "xla":
        import torch_xla
        model = model.to("xla")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    first = None
    for step in range(6):
        if mode == "xla":
            with torch_xla.step():
                xx, yy = x.to("xla"), y.to("xla")
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(xx), yy).backward()
                opt.step()
            torch_xla.sync(wait=True)
        else:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        if first is None:
            first = time.perf_counter() - t_start
    print(json.dumps({"first_step_s": first, "peak_rss": peak_rss()}))


def child_mem(kind, mode):
    """Five training steps of bench_training.py's model `kind` (batch 32)."""
    sys.path.insert(0, HERE)
    from bench_training import batches, build
    from models import loss_of
    torch.manual_seed(0)
    model = build(kind)
    if mode == "xla":
        import torch_xla
        import torch_xla.core.xla_model as xm
        from torchtpu import _C
        model = model.to("xla")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for x, y in batches(kind, 6, 32):
        t0 = time.perf_counter()
        if mode == "xla":
            with torch_xla.step():
                x, y = x.to("xla"), y.to("xla")
                opt.zero_grad()
                loss_of(kind, model(x), y).backward()
                opt.step()
            xm.wait_device_ops()
        else:
            opt.zero_grad()
            loss_of(kind, model(x), y).backward()
            opt.step()
        times.append(time.perf_counter() - t0)
    res = {"peak_rss": peak_rss(),
           "step_ms": sorted(times[2:])[len(times[2:]) // 2] * 1e3}
    if mode == "xla":
        in_use, peak = _C.memory_stats(0)
        res.update({"device_in_use": in_use, "device_peak": peak})
    print(json.dumps(res))


def reduce_cases(dev):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 1024, generator=g).to(dev)
    w, b = torch.randn(1024, generator=g).to(dev), torch.randn(1024, generator=g).to(dev)
    a, c = torch.randn(N, generator=g).to(dev), torch.randn(N, generator=g).to(dev)
    return {"layer_norm": lambda: torch.nn.functional.layer_norm(x, (1024,), w, b),
            "mse": lambda: torch.nn.functional.mse_loss(a, c)}


def child_reduce():
    import torch_xla
    from torchtpu import _C
    res = {}
    for name, fn in reduce_cases("xla").items():
        keep = []

        def run():
            keep[:] = [fn()]
            torch_xla.sync(wait=True)

        for _ in range(3):
            run()
            _C.tier1_wait()
        res[name] = best(run)
    print(json.dumps(res))


def run_child(*args, env=None):
    e = dict(os.environ, PJRT_DEVICE="CPU")
    e.update(env or {})
    r = subprocess.run([sys.executable, __file__, *args], env=e, capture_output=True, text=True,
                       timeout=900)
    if r.returncode:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    torch.set_num_threads(os.cpu_count() or 1)
    x, y = torch.randn(N), torch.randn(N)
    gbytes = 3 * N * 4 / 1e9  # two inputs read, one output written
    t_copy = best(lambda: x.clone())
    t_eager = best(lambda: chain(x, y))
    copy_gbs = 2 * N * 4 / 1e9 / t_copy
    print(f"memcpy (clone of 16 MB): {copy_gbs:.1f} GB/s")
    print(f"eager chain:  {gbytes / t_eager:6.1f} GB/s  ({t_eager * 1e3:.2f} ms)")
    for tier in ("0", "1"):
        t = run_child("fused", env={"TORCHTPU_TIER": tier})["seconds"]
        print(f"tier {tier} fused: {gbytes / t:6.1f} GB/s  ({t * 1e3:.2f} ms)  "
              f"{(gbytes / t) / copy_gbs:.2f}x memcpy, {t_eager / t:.2f}x eager speed")
    node = run_child("compile", "-")  # tier auto: the big graph runs once, on tier 0
    with tempfile.TemporaryDirectory() as cache:
        cold = run_child("compile", cache, env={"TORCHTPU_TIER": "1"})
        warm = run_child("compile", cache, env={"TORCHTPU_TIER": "1"})
    print(f"1,000-node graph: tier-0 compile {node['compile_ms']:.2f} ms "
          f"(first sync incl. run {node['first_sync_ms']:.2f} ms)")
    print(f"tier-1 fused chain, first run: cold (build) {cold['tier1_wait_ms']:.1f} ms, warm "
          f"cache (load) {warm['tier1_wait_ms']:.1f} ms (hits {warm['hits']}, builds "
          f"{warm['builds']})")
    e = run_child("train", "cpu")
    o = run_child("train", "xla")
    print(f"time to first step: eager {e['first_step_s']:.2f} s, torchtpu {o['first_step_s']:.2f} s "
          f"(ratio {o['first_step_s'] / e['first_step_s']:.2f})")
    print(f"peak RSS: eager {e['peak_rss'] / 2**20:.0f} MB, torchtpu {o['peak_rss'] / 2**20:.0f} MB "
          f"(ratio {o['peak_rss'] / e['peak_rss']:.2f})")
    eager = {k: best(fn) for k, fn in reduce_cases("cpu").items()}
    # The layer norm as IR primitives (TORCHTPU_FUSED_LAYER_NORM=0), where
    # reduction fusion applies, and as the engine's layer-norm op.
    prims = {"TORCHTPU_FUSED_LAYER_NORM": "0"}
    for tier in ("0", "1"):
        off = run_child("reduce", env={"TORCHTPU_TIER": tier, "TORCHTPU_REDUCE_FUSION": "0",
                                       **prims})
        on = run_child("reduce", env={"TORCHTPU_TIER": tier, **prims})
        op = run_child("reduce", env={"TORCHTPU_TIER": tier})
        for k in eager:
            extra = f", layer-norm op {op[k] * 1e3:.2f} ms" if k == "layer_norm" else ""
            print(f"{k} tier {tier}: unfused reductions {off[k] * 1e3:.2f} ms, fused "
                  f"{on[k] * 1e3:.2f} ms ({off[k] / on[k]:.2f}x){extra}, eager "
                  f"{eager[k] * 1e3:.2f} ms")
    for kind in ("mlp", "transformer"):
        e = run_child("mem", kind, "cpu")
        o = run_child("mem", kind, "xla")
        print(f"{kind} training step (batch 32): device peak {o['device_peak'] / 2**20:.1f} MB, "
              f"in use between steps {o['device_in_use'] / 2**20:.1f} MB (transient "
              f"{(o['device_peak'] - o['device_in_use']) / 2**20:.1f} MB); peak RSS eager "
              f"{e['peak_rss'] / 2**20:.0f} MB, torchtpu {o['peak_rss'] / 2**20:.0f} MB; step "
              f"eager {e['step_ms']:.1f} ms, torchtpu {o['step_ms']:.1f} ms")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fused":
        child_fused(os.environ.get("TORCHTPU_TIER"))
    elif len(sys.argv) > 1 and sys.argv[1] == "compile":
        child_compile(sys.argv[2] if len(sys.argv) > 2 else None)
    elif len(sys.argv) > 1 and sys.argv[1] == "reduce":
        child_reduce()
    elif len(sys.argv) > 1 and sys.argv[1] == "mem":
        child_mem(sys.argv[2], sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "train":
        child_train(sys.argv[2])
    else:
        main()
