"""Per-layer conv2d backward times (input gradient and weight gradient): the
engine's kernels against eager PyTorch (oneDNN / native), one thread, in
one run (issue 4's training-step speed).

Every distinct Conv2d shape of a model (tests/python/vision_models.py, found
with forward hooks, default ResNet-18) at a given input size and batch is
timed with torch.ops.aten.convolution_backward (output_mask selecting one
gradient; torch's CPU threads set to 1) and with the engine's
tt_kernel_conv2d_backward_input / _weight called through ctypes on the same
tensors' memory (TORCHTPU_NUM_THREADS=1). Backends alternate round by
round; each time is the median over rounds of process CPU time. Results are
compared with torch's (max abs diff relative to the largest magnitude).
Totals weight each shape by its use count (the stem's input gradient is
timed although autograd never asks for it; the total leaves it out).

    .venv/bin/python bench/bench_conv_backward.py                    # 32x32, batch 32 and 224, batch 1
    .venv/bin/python bench/bench_conv_backward.py --configs 32:32
    .venv/bin/python bench/bench_conv_backward.py --json /tmp/before.json
    .venv/bin/python bench/bench_conv_backward.py --compare /tmp/before.json
    .venv/bin/python bench/bench_conv_backward.py --lib build/libtt.so   # another build
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

os.environ["TORCHTPU_NUM_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_conv_layers as bcl  # noqa: E402


def model_layers(name, size):
    """[(key, uses, first)] for every Conv2d of the model on a size x size
    input, in order of first use; first marks the layer fed by the image."""
    seen = bcl.conv_calls(name, size)
    out = {}
    for i, key in enumerate(seen):
        if key not in out:
            out[key] = [0, i == 0]
        out[key][0] += 1
    return [(k, v[0], v[1]) for k, v in out.items()]


def load_lib(path):
    lib, path = bcl.load_lib(path)
    for fn in (lib.tt_kernel_conv2d_backward_input, lib.tt_kernel_conv2d_backward_weight):
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.POINTER(bcl.View), ctypes.POINTER(bcl.View),
                       ctypes.POINTER(bcl.Conv2dParams), ctypes.POINTER(bcl.View)]
    return lib, path


def bench_layer(lib, key, batch, rounds, min_s, dtype):
    C, H, W, O, kh, kw, s, p, d, g = key
    torch.manual_seed(0)
    x = torch.randn(batch, C, H, W).to(dtype)
    w = (torch.randn(O, C // g, kh, kw) / (C // g * kh * kw) ** 0.5).to(dtype)
    OH = (H + 2 * p - d * (kh - 1) - 1) // s + 1
    OW = (W + 2 * p - d * (kw - 1) - 1) // s + 1
    go = torch.randn(batch, O, OH, OW).to(dtype)
    gx = torch.empty_like(x)
    gw = torch.empty_like(w)
    params = bcl.Conv2dParams((s, s), (p, p), (d, d), g)
    vgo, vx, vw, vgx, vgw = (bcl.view_of(t) for t in (go, x, w, gx, gw))
    in_args = (ctypes.byref(vgo), ctypes.byref(vw), ctypes.byref(params), ctypes.byref(vgx))
    w_args = (ctypes.byref(vgo), ctypes.byref(vx), ctypes.byref(params), ctypes.byref(vgw))
    cb = torch.ops.aten.convolution_backward

    def run_ours(fn, args):
        def call():
            if fn(*args):
                raise RuntimeError(f"engine backward failed for {bcl.label(key)}")
        return call

    def run_torch(mask):
        def call():
            cb(go, x, w, None, [s, s], [p, p], [d, d], False, [0, 0], g, mask)
        return call

    pairs = {
        "in": (run_torch([True, False, False]),
               run_ours(lib.tt_kernel_conv2d_backward_input, in_args)),
        "w": (run_torch([False, True, False]),
              run_ours(lib.tt_kernel_conv2d_backward_weight, w_args)),
    }
    ref = cb(go.float(), x.float(), w.float(), None, [s, s], [p, p], [d, d], False,
             [0, 0], g, [True, True, False])
    res = {}
    for kind, (theirs, ours) in pairs.items():
        ours()
        got, want = (gx, ref[0]) if kind == "in" else (gw, ref[1])
        diff = ((got.float() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
        iters = {}
        for nm, fn in (("torch", theirs), ("ours", ours)):
            t = bcl.cpu_time_of(fn, 1)
            iters[nm] = max(1, min(1000, int(min_s / max(t, 1e-6))))
        times = {"torch": [], "ours": []}
        for _ in range(rounds):
            times["torch"].append(bcl.cpu_time_of(theirs, iters["torch"]))
            times["ours"].append(bcl.cpu_time_of(ours, iters["ours"]))
        res[kind] = (statistics.median(times["torch"]) * 1e3,
                     statistics.median(times["ours"]) * 1e3, diff)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--configs", default="32:32,224:1", help="size:batch pairs")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-ms", type=float, default=20.0, help="CPU time per round and backend")
    ap.add_argument("--filter", default="", help="only layers whose label contains this")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--lib", default=None)
    ap.add_argument("--json", default=None, help="write the per-layer results here")
    ap.add_argument("--compare", default=None, help="an earlier --json file: adds before columns")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    lib, path = load_lib(args.lib)
    before = {}
    if args.compare:
        with open(args.compare) as f:
            for r in json.load(f)["rows"]:
                before[(r["config"], tuple(r["key"]))] = r
    print(f"# conv2d backward ({args.model}), {args.dtype}, 1 thread, CPU-time medians of "
          f"{args.rounds} rounds; engine kernels from {os.path.relpath(path)}")
    rows = []
    for cfg in args.configs.split(","):
        size, batch = (int(v) for v in cfg.split(":"))
        print(f"\n## {size}x{size}, batch {batch}")
        hdr = (f"{'layer':44s} {'uses':>4s} | {'in: torch':>9s} {'ours':>8s} {'ratio':>6s}"
               f" | {'w: torch':>9s} {'ours':>8s} {'ratio':>6s}")
        if before:
            hdr += f" | {'in before':>9s} {'w before':>9s}"
        print(hdr + "  maxreldiff")
        tot = {"in_t": 0.0, "in_o": 0.0, "w_t": 0.0, "w_o": 0.0, "in_b": 0.0, "w_b": 0.0}
        for key, uses, first in model_layers(args.model, size):
            if args.filter and args.filter not in bcl.label(key):
                continue
            r = bench_layer(lib, key, batch, args.rounds, args.min_ms / 1e3, dtype)
            (it, io, idf), (wt, wo, wdf) = r["in"], r["w"]
            line = (f"{bcl.label(key):44s} {uses:4d} | {it:9.3f} {io:8.3f} {io / it:6.2f}"
                    f" | {wt:9.3f} {wo:8.3f} {wo / wt:6.2f}")
            b = before.get((cfg, key))
            if before:
                line += (f" | {b['in_ours_ms']:9.3f} {b['w_ours_ms']:9.3f}" if b
                         else f" | {'-':>9s} {'-':>9s}")
            print(line + f"  {max(idf, wdf):.1e}" + ("  (stem: in not in total)" if first else ""),
                  flush=True)
            if not first:
                tot["in_t"] += uses * it
                tot["in_o"] += uses * io
                tot["in_b"] += uses * (b["in_ours_ms"] if b else 0)
            tot["w_t"] += uses * wt
            tot["w_o"] += uses * wo
            tot["w_b"] += uses * (b["w_ours_ms"] if b else 0)
            rows.append({"config": cfg, "key": list(key), "label": bcl.label(key), "uses": uses,
                         "first": first, "in_torch_ms": it, "in_ours_ms": io, "w_torch_ms": wt,
                         "w_ours_ms": wo, "maxreldiff": max(idf, wdf)})
        both_t, both_o = tot["in_t"] + tot["w_t"], tot["in_o"] + tot["w_o"]
        line = (f"{'total (weighted by uses)':44s} {'':4s} | {tot['in_t']:9.2f} {tot['in_o']:8.2f} "
                f"{tot['in_o'] / tot['in_t']:6.2f} | {tot['w_t']:9.2f} {tot['w_o']:8.2f} "
                f"{tot['w_o'] / tot['w_t']:6.2f}")
        if before:
            line += f" | {tot['in_b']:9.2f} {tot['w_b']:9.2f}"
        print(line)
        print(f"backward total: torch {both_t:.2f} ms, ours {both_o:.2f} ms, "
              f"ratio {both_o / both_t:.2f}"
              + (f", before {tot['in_b'] + tot['w_b']:.2f} ms" if before else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dtype": args.dtype, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
