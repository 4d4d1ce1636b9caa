"""Issue 4's GEMM benchmark: f32 matrix products on xla against eager
PyTorch (torch.mm, MKL) in the same run, as GFLOP/s and as a share of the
machine's measured FMA peak.

The peak is measured here, by bench/fma_peak.c (independent FMA chains on
the widest vectors the CPU runs), once per run; "% peak" is GFLOP/s over
peak x threads. For each thread count (1, then every core: a fresh process
each, TORCHTPU_NUM_THREADS and torch.set_num_threads set alike) and shape,
three ways are timed in interleaved rounds, best of each:
  eager     torch.mm on CPU tensors (PyTorch's MKL);
  own       the engine's packed micro-kernel GEMM (TORCHTPU_BLAS=own);
  engine    what the engine runs by default (large f32 products go to the
            MKL inside libtorch_cpu.so, one single-threaded call per
            piece on the engine's pool: docs/kernels.md).
The xla figures include the engine's per-execution overhead: each timed
graph holds four products over distinct operands. TORCHTPU_HOST_CORE=0:
every kernel uses all the threads (by default a kernel that starts before
the host thread waits for it leaves one core to the host, see
docs/kernels.md). This host's speed drifts (a shared VM), so the peak is
measured before and after the products and the higher figure is used.
Each timed call starts after a pause (SETTLE_S) so that the other side's
threads have gone to sleep.

Usage: bash scripts/bootstrap.sh && PJRT_DEVICE=CPU .venv/bin/python bench/bench_gemm.py
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (name, M, K, N, B transposed, A transposed): square products, x @ W^T
# linear shapes (the GPT-style decoder's and BERT-base's at 128 tokens) and
# the decoder's weight gradients x^T g, summed over its 2048 tokens.
SHAPES = [
    ("512x512x512", 512, 512, 512, False, False),
    ("1024x1024x1024", 1024, 1024, 1024, False, False),
    ("2048x2048x2048", 2048, 2048, 2048, False, False),
    ("linear 2048x128 @ (512x128)^T", 2048, 128, 512, True, False),
    ("linear 128x768 @ (3072x768)^T", 128, 768, 3072, True, False),
    ("linear 128x3072 @ (768x3072)^T", 128, 3072, 768, True, False),
    ("wgrad (2048x128)^T @ 2048x512", 128, 2048, 512, False, True),
    ("wgrad (2048x384)^T @ 2048x128", 384, 2048, 128, False, True),
]
PER_GRAPH = 4
# PyTorch's OpenMP threads spin for a while after an eager op before they
# sleep; timing the engine inside that window measures two pools fighting
# over the cores. Each timed call starts after this pause.
SETTLE_S = 0.05


def fma_peak():
    """(GFLOP/s of one core, vector ISA) from bench/fma_peak.c."""
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "fma_peak")
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", exe,
                        os.path.join(HERE, "fma_peak.c")], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), out[1]


def child(threads, rounds):
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    from torchtpu import config

    torch.set_num_threads(threads)
    dev = torch_xla.device()
    g = torch.Generator().manual_seed(0)
    res = {}
    for name, m, k, n, bt, at in SHAPES:
        a = [torch.randn(k, m, generator=g).t() if at else torch.randn(m, k, generator=g)
             for _ in range(PER_GRAPH)]
        b = [torch.randn(n, k, generator=g).t() if bt else torch.randn(k, n, generator=g)
             for _ in range(PER_GRAPH)]
        xa = [t.t().contiguous().to(dev).t() if at else t.to(dev) for t in a]
        # A transposed weight stays a transposed view on xla, as a linear
        # layer's weight.t() is.
        xb = [t.t().contiguous().to(dev).t() if bt else t.to(dev) for t in b]
        xm.wait_device_ops()

        def eager():
            for i in range(PER_GRAPH):
                torch.mm(a[i], b[i])

        def lazy():
            outs = [torch.mm(xa[i], xb[i]) for i in range(PER_GRAPH)]
            torch_xla.sync()
            xm.wait_device_ops()
            return outs

        ways = {"eager": (eager, None), "own": (lazy, "own"), "engine": (lazy, "auto")}
        best = {w: float("inf") for w in ways}
        for w, (fn, blas) in ways.items():  # warm up: compile, tier 1, caches
            if blas:
                config.install_blas(blas)
            for _ in range(3):
                fn()
        for r in range(rounds):
            for w, (fn, blas) in ways.items():
                if blas:
                    config.install_blas(blas)
                time.sleep(SETTLE_S)
                t0 = time.perf_counter()
                fn()
                best[w] = min(best[w], (time.perf_counter() - t0) / PER_GRAPH)
        want = torch.mm(a[0], b[0])
        config.install_blas("own")
        got_own = torch.mm(xa[0], xb[0]).cpu()
        config.install_blas("auto")
        got = torch.mm(xa[0], xb[0]).cpu()
        scale = want.abs().max().item()
        err = max((got_own - want).abs().max().item(), (got - want).abs().max().item()) / scale
        res[name] = {"gflops": {w: 2.0 * m * k * n / t / 1e9 for w, t in best.items()},
                     "rel_err": err}
    print(json.dumps(res))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.rounds)
        return
    peak, isa = fma_peak()
    ncpu = os.cpu_count() or 1
    results = {}
    for threads in sorted({1, ncpu}):
        env = dict(os.environ, TORCHTPU_NUM_THREADS=str(threads), PJRT_DEVICE="CPU",
                   TORCHTPU_HOST_CORE="0")
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(threads),
                            "--rounds", str(args.rounds)],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"child ({threads} threads) failed:\n{r.stderr[-3000:]}")
        results[threads] = json.loads(r.stdout.strip().splitlines()[-1])
    peak = max(peak, fma_peak()[0])
    print(f"measured FMA peak: {peak:.1f} GFLOP/s per core ({isa}); {ncpu} cores")
    for threads, res in results.items():
        roof = peak * threads
        print(f"\n{threads} thread(s); GFLOP/s (% of {roof:.0f} GFLOP/s peak); ratio = time / eager")
        print(f"{'shape':<32}{'eager':>15}{'own':>15}{'engine':>15}{'own ratio':>11}"
              f"{'engine ratio':>14}")
        for name, v in res.items():
            gf = v["gflops"]
            cell = {w: f"{gf[w]:.1f} ({100 * gf[w] / roof:.0f}%)" for w in gf}
            print(f"{name:<32}{cell['eager']:>15}{cell['own']:>15}{cell['engine']:>15}"
                  f"{gf['eager'] / gf['own']:>11.2f}{gf['eager'] / gf['engine']:>14.2f}")
            if v["rel_err"] > 1e-4:
                sys.exit(f"{name}: results differ from torch.mm (relative error {v['rel_err']:.2e})")


if __name__ == "__main__":
    main()
