"""Per-layer conv2d forward times: the engine's kernel against eager PyTorch
(oneDNN), one thread, in one run (issue 4's conv kernels, issue 5's latency).

Every distinct Conv2d shape of ResNet-18, ResNet-50 and MobileNetV2
(tests/python/vision_models.py, found with forward hooks on a 224x224
input) is timed with torch.nn.functional.conv2d (no bias; torch's CPU
threads set to 1) and with the engine's tt_kernel_conv2d called through
ctypes on the same tensors' memory (TORCHTPU_NUM_THREADS=1). The two
backends alternate round by round and each time is the median over rounds
of process CPU time, so a busy, shared machine slows both alike. Outputs
are compared (max abs diff). Model totals weight each shape by how often
the model uses it; they cover the convolutions only (no batch norm, relu,
add, pooling or classifier).

    .venv/bin/python bench/bench_conv_layers.py                 # batch 1
    .venv/bin/python bench/bench_conv_layers.py --batch 8 --rounds 5
    .venv/bin/python bench/bench_conv_layers.py --models resnet18 --size 32 --batch 32
    .venv/bin/python bench/bench_conv_layers.py --lib build/libtt.so  # another build
    .venv/bin/python bench/bench_conv_layers.py --json /tmp/before.json
    .venv/bin/python bench/bench_conv_layers.py --compare /tmp/before.json

--lib takes any shared object that exports tt_kernel_conv2d (default: the
built extension, python/torchtpu/_C*.so), e.g. a quick kernels-only build:
    gcc -std=c11 -O3 -D_GNU_SOURCE -fPIC -shared -Iinclude -Isrc -pthread \
        -o build/libtt.so src/base/*.c src/kernels/*.c -lm -ldl
--compare prints a before/after column from an earlier --json file.
"""
import argparse
import ctypes
import glob
import json
import os
import statistics
import sys
import time

os.environ["TORCHTPU_NUM_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import vision_models  # noqa: E402

MODELS = ("resnet18", "resnet50", "mobilenet_v2")
TT_MAX_RANK = 8
TT_DTYPES = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 3}


class Shape(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int32), ("dims", ctypes.c_int64 * TT_MAX_RANK)]


class View(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("shape", Shape)]


class Conv2dParams(ctypes.Structure):
    _fields_ = [("stride", ctypes.c_int64 * 2), ("pad", ctypes.c_int64 * 2),
                ("dilation", ctypes.c_int64 * 2), ("groups", ctypes.c_int64)]


def view_of(t):
    assert t.is_contiguous()
    v = View()
    v.data = t.data_ptr()
    v.dtype = TT_DTYPES[t.dtype]
    v.shape.rank = t.dim()
    for i, d in enumerate(t.shape):
        v.shape.dims[i] = d
    return v


def load_lib(path):
    if path is None:
        root = os.path.join(HERE, "..", "python", "torchtpu")
        found = sorted(glob.glob(os.path.join(root, "_C*.so")))
        if not found:
            sys.exit("no built extension under python/torchtpu: run setup.py build_ext --inplace")
        path = found[0]
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.tt_kernel_conv2d.restype = ctypes.c_void_p
    lib.tt_kernel_conv2d.argtypes = [ctypes.POINTER(View), ctypes.POINTER(View),
                                     ctypes.POINTER(Conv2dParams), ctypes.POINTER(View)]
    return lib, path


def conv_calls(name, size=224):
    """The Conv2d calls of model `name` on a size x size input, in call
    order, each as key = (C, H, W, O, kh, kw, stride, pad, dilation, groups)."""
    model = getattr(vision_models, name)().eval()
    seen = []

    def hook(mod, inp, _out):
        x = inp[0]
        seen.append((x.shape[1], x.shape[2], x.shape[3], mod.out_channels,
                     mod.kernel_size[0], mod.kernel_size[1], mod.stride[0],
                     mod.padding[0], mod.dilation[0], mod.groups))

    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        model(torch.randn(1, 3, size, size))
    for h in hs:
        h.remove()
    return seen


def model_layers(names, size=224):
    """{key: {model: count}} for every Conv2d the models run on size x size
    (keys as conv_calls)."""
    layers = {}
    for name in names:
        for key in conv_calls(name, size):
            layers.setdefault(key, {}).setdefault(name, 0)
            layers[key][name] += 1
    return layers


def label(key):
    C, H, W, O, kh, kw, s, p, d, g = key
    kind = "dw" if g == C and g > 1 else ("pw" if kh == kw == 1 else f"{kh}x{kw}")
    return f"{kind:4s} C{C:<4d} {H:3d}x{W:<3d} O{O:<4d} k{kh} s{s} p{p}" + (f" g{g}" if g > 1 else "")


def cpu_time_of(fn, iters):
    t0 = time.process_time()
    for _ in range(iters):
        fn()
    return (time.process_time() - t0) / iters


def bench_layer(lib, key, batch, rounds, min_s, dtype):
    C, H, W, O, kh, kw, s, p, d, g = key
    torch.manual_seed(0)
    x = torch.randn(batch, C, H, W).to(dtype)
    w = (torch.randn(O, C // g, kh, kw) / (C // g * kh * kw) ** 0.5).to(dtype)
    ref = F.conv2d(x.float(), w.float(), None, s, p, d, g)
    out = torch.empty(ref.shape, dtype=dtype)
    vx, vw, vo = view_of(x), view_of(w), view_of(out)
    params = Conv2dParams((s, s), (p, p), (d, d), g)
    args = (ctypes.byref(vx), ctypes.byref(vw), ctypes.byref(params), ctypes.byref(vo))

    def ours():
        st = lib.tt_kernel_conv2d(*args)
        if st:
            raise RuntimeError(f"tt_kernel_conv2d failed for {label(key)}")

    def theirs():
        F.conv2d(x, w, None, s, p, d, g)

    ours()
    diff = (out.float() - ref).abs().max().item()
    theirs()
    # Calibrate: enough calls per round for min_s of CPU time.
    iters = {}
    for nm, fn in (("torch", theirs), ("ours", ours)):
        t = cpu_time_of(fn, 1)
        iters[nm] = max(1, min(1000, int(min_s / max(t, 1e-6))))
    times = {"torch": [], "ours": []}
    for _ in range(rounds):
        times["torch"].append(cpu_time_of(theirs, iters["torch"]))
        times["ours"].append(cpu_time_of(ours, iters["ours"]))
    return statistics.median(times["torch"]), statistics.median(times["ours"]), diff


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=20.0, help="CPU time per round and backend")
    ap.add_argument("--filter", default="", help="only layers whose label contains this")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--lib", default=None)
    ap.add_argument("--json", default=None, help="write the per-layer results here")
    ap.add_argument("--compare", default=None, help="an earlier --json file: adds a before column")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    lib, path = load_lib(args.lib)
    names = [m for m in args.models.split(",") if m]
    layers = model_layers(names, args.size)
    before = {}
    if args.compare:
        with open(args.compare) as f:
            before = {tuple(r["key"]): r["ours_ms"] for r in json.load(f)["layers"]}
    print(f"# conv2d forward, {args.size}x{args.size}, batch {args.batch}, {args.dtype}, 1 thread, CPU-time medians of "
          f"{args.rounds} rounds; engine kernel from {os.path.relpath(path)}")
    print(f"# torch {torch.__version__}, mkldnn {torch.backends.mkldnn.is_available()}")
    hdr = f"{'layer':44s} {'uses':>14s} {'GFLOP':>6s} {'torch ms':>9s} {'ours ms':>8s} {'ours/torch':>10s} {'GF/s':>6s}"
    if before:
        hdr += f" {'before ms':>9s} {'speedup':>7s}"
    print(hdr + "  maxdiff")
    rows = []
    for key in sorted(layers, key=lambda k: (k[9] > 1, k[4], -k[1], k[0])):
        if args.filter and args.filter not in label(key):
            continue
        C, H, W, O, kh, kw, s, p, d, g = key
        OH = (H + 2 * p - d * (kh - 1) - 1) // s + 1
        OW = (W + 2 * p - d * (kw - 1) - 1) // s + 1
        gflop = 2.0 * args.batch * O * OH * OW * (C // g) * kh * kw / 1e9
        t_torch, t_ours, diff = bench_layer(lib, key, args.batch, args.rounds,
                                            args.min_ms / 1e3, dtype)
        uses = ",".join(f"{m[:2] if m != 'mobilenet_v2' else 'mb'}{n}" for m, n in layers[key].items())
        line = (f"{label(key):44s} {uses:>14s} {gflop:6.3f} {t_torch * 1e3:9.3f} "
                f"{t_ours * 1e3:8.3f} {t_ours / t_torch:10.2f} {gflop / t_ours:6.1f}")
        if before:
            b = before.get(key)
            line += f" {b:9.3f} {b / (t_ours * 1e3):7.2f}" if b else f" {'-':>9s} {'-':>7s}"
        print(line + f"  {diff:.1e}", flush=True)
        rows.append({"key": list(key), "label": label(key), "uses": layers[key],
                     "gflop": gflop, "torch_ms": t_torch * 1e3, "ours_ms": t_ours * 1e3,
                     "maxdiff": diff})
    print()
    print(f"{'model (convs only)':20s} {'torch ms':>9s} {'ours ms':>8s} {'ours/torch':>10s}"
          + (f" {'before ms':>9s} {'speedup':>7s}" if before else ""))
    for m in names:
        tt = sum(r["torch_ms"] * r["uses"].get(m, 0) for r in rows)
        to = sum(r["ours_ms"] * r["uses"].get(m, 0) for r in rows)
        if not tt:
            continue
        line = f"{m:20s} {tt:9.2f} {to:8.2f} {to / tt:10.2f}"
        if before:
            tb = sum(before.get(tuple(r["key"]), 0) * r["uses"].get(m, 0) for r in rows)
            line += f" {tb:9.2f} {tb / to:7.2f}"
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "dtype": args.dtype, "layers": rows}, f, indent=1)


if __name__ == "__main__":
    main()
