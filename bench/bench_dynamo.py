"""Inference latency and compile time of torch.compile(backend="openxla")
against eager PyTorch CPU, torch.compile with inductor, and the lazy path
without dynamo, in one run (issue 5).

Models: ResNet-18, ResNet-50, MobileNetV2 (tests/python/vision_models.py,
torchvision's definitions), BERT-base and ViT-B/16 (defined below in plain
PyTorch with the Hugging Face configurations and random weights: the
transformers package is not installed here). fp32, batch 1 and 8.

Latency: median over --iters calls, the backends interleaved call by call so
a busy machine slows them alike; inputs already on the device; each xla
call ends with the output copied to the host (so it includes the wait).
Compile time: the first call minus the median steady call; inductor runs
with a fresh cache directory (cold). Outputs are checked against eager.

    PJRT_DEVICE=CPU .venv/bin/python bench/bench_dynamo.py            # all
    PJRT_DEVICE=CPU .venv/bin/python bench/bench_dynamo.py --models resnet18 --batches 1 --iters 5
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")
# --threads N (read before torch starts its pools): PyTorch's intra-op
# threads and the engine's kernel threads alike.
if "--threads" in sys.argv:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    os.environ["TORCHTPU_NUM_THREADS"] = _n
    os.environ["OMP_NUM_THREADS"] = _n
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_cold_"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import torch_xla  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402
from torchtpu import _C  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import vision_models  # noqa: E402


# ------------------------------------------------------------ BERT-base
class BertLayer(nn.Module):
    def __init__(self, d=768, heads=12, ff=3072, eps=1e-12):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.attn_out = nn.Linear(d, d)
        self.attn_norm = nn.LayerNorm(d, eps=eps)
        self.intermediate = nn.Linear(d, ff)
        self.output = nn.Linear(ff, d)
        self.out_norm = nn.LayerNorm(d, eps=eps)

    def forward(self, h, mask):
        b, s, d = h.shape
        hd = d // self.heads

        def split(t):
            return t.view(b, s, self.heads, hd).transpose(1, 2)

        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd) + mask
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        h = self.attn_norm(h + self.attn_out(ctx))
        return self.out_norm(h + self.output(nn.functional.gelu(self.intermediate(h))))


class BertBase(nn.Module):
    """bert-base-uncased's shape: 12 layers, hidden 768, 12 heads, FFN 3072,
    vocab 30522, post-norm, pooler; the eager attention formulation."""

    def __init__(self, vocab=30522, d=768, layers=12, max_pos=512):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_pos, d)
        self.token_type = nn.Embedding(2, d)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d) for _ in range(layers))
        self.pooler = nn.Linear(d, d)

    def forward(self, ids):
        s = ids.shape[1]
        pos = torch.arange(s, device=ids.device)
        h = self.norm(self.word(ids) + self.pos(pos) + self.token_type(torch.zeros_like(ids)))
        mask = torch.zeros(ids.shape[0], 1, 1, s, device=ids.device)
        for layer in self.layers:
            h = layer(h, mask)
        return torch.tanh(self.pooler(h[:, 0]))


# ------------------------------------------------------------ ViT-B/16
class VitLayer(nn.Module):
    def __init__(self, d=768, heads=12, ff=3072):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, h):
        b, s, d = h.shape
        hd = d // self.heads
        qkv = self.qkv(self.norm1(h)).view(b, s, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-1, -2) / math.sqrt(hd)).softmax(-1)
        h = h + self.proj((attn @ v).transpose(1, 2).reshape(b, s, d))
        return h + self.fc2(nn.functional.gelu(self.fc1(self.norm2(h))))


class VitB16(nn.Module):
    """ViT-B/16 at 224x224: 16x16 patches (196 + CLS tokens), 12 pre-norm
    layers, hidden 768, 12 heads, MLP 3072, 1000 classes."""

    def __init__(self, image=224, patch=16, d=768, layers=12, classes=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.layers = nn.ModuleList(VitLayer(d) for _ in range(layers))
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        h = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1) + self.pos
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h)[:, 0])


MODELS = {
    "resnet18": (vision_models.resnet18, "image"),
    "resnet50": (vision_models.resnet50, "image"),
    "mobilenet_v2": (vision_models.mobilenet_v2, "image"),
    "bert_base": (BertBase, "tokens"),
    "vit_b16": (VitB16, "image"),
}


def make_input(kind, batch, args):
    g = torch.Generator().manual_seed(batch)
    if kind == "image":
        return torch.randn(batch, 3, args.image_size, args.image_size, generator=g)
    return torch.randint(0, 30522, (batch, args.seq_len), generator=g)


# ------------------------------------------------------------- measuring
class Backend:
    def __init__(self, name, call, check):
        self.name, self.call, self.check = name, call, check
        self.first = None
        self.times = []
        self.error = None
        self.diff = None
        self.backend_time = None


def build_backends(name, model, x, args):
    out = {}
    want = set(args.backends)
    if "eager" in want:
        out["eager"] = Backend("eager", lambda: model(x), None)
    if "inductor" in want:
        from torch._inductor.compile_fx import compile_fx  # what backend="inductor" runs
        ind = torch.compile(model, backend=_timed_backend(compile_fx, "inductor"))
        out["inductor"] = Backend("inductor", lambda: ind(x), None)
    if want & {"lazy", "openxla"}:
        dev = torch_xla.device()
        xm_model = _copy_to(model, dev)
        xd = x.to(dev)
        torch_xla.sync(wait=True)
        if "lazy" in want:
            def lazy():
                y = xm_model(xd)
                torch_xla.sync()
                return y.cpu()
            out["lazy"] = Backend("lazy", lazy, None)
        if "openxla" in want:
            from torch._dynamo.backends.torchxla import openxla  # backend="openxla"
            cm = torch.compile(xm_model, backend=_timed_backend(openxla, "openxla"))
            out["openxla"] = Backend("openxla", lambda: cm(xd).cpu(), None)
    return out


BACKEND_TIME = {}


def _timed_backend(compiler, name):
    """compiler itself, timing its calls (the backend's share of the first
    call; dynamo's bytecode tracing before it is common to both)."""
    def backend(gm, example_inputs):
        t = time.perf_counter()
        try:
            return compiler(gm, example_inputs)
        finally:
            BACKEND_TIME[name] = BACKEND_TIME.get(name, 0.0) + time.perf_counter() - t
    return backend


def _trace_seconds():
    data = met.metric_data("DynamoTraceTime")
    return data[1] / 1e9 if data else 0.0


def _copy_to(model, dev):
    import copy
    return copy.deepcopy(model).to(dev)


def timed(fn):
    t = time.perf_counter()
    y = fn()
    return time.perf_counter() - t, y


def bench_one(name, batch, args):
    ctor, kind = MODELS[name]
    torch.manual_seed(0)
    model = ctor().eval()
    x = make_input(kind, batch, args)
    torch._dynamo.reset()
    rows = {}
    BACKEND_TIME.clear()
    with torch.no_grad():
        ref = model(x)
        backends = build_backends(name, model, x, args)
        for b in backends.values():
            try:
                trace0 = _trace_seconds()
                b.first, y = timed(b.call)
                # openxla compiles on its first real call (trace + capture)
                b.backend_time = BACKEND_TIME.get(b.name, 0.0) + _trace_seconds() - trace0
                b.diff = (y.float() - ref.float()).abs().max().item()
            except Exception as e:  # report, keep going
                b.error = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        live = [b for b in backends.values() if b.error is None]
        for _ in range(args.warmup):
            for b in live:
                b.call()
        _C.tier1_wait()  # background tier-1 compiles finished: steady state
        for _ in range(args.iters):
            for b in live:
                b.times.append(timed(b.call)[0])
        for b in backends.values():
            rows[b.name] = b
    return rows


def fmt_ms(v):
    return f"{v * 1e3:.1f}" if v is not None else "-"


def geomean(vs):
    vs = [v for v in vs if v]
    return math.exp(sum(math.log(v) for v in vs) / len(vs)) if vs else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batches", default="1,8")
    p.add_argument("--backends", default="eager,inductor,lazy,openxla")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--out", default=None, help="also write the markdown table here")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for PyTorch and for the engine's kernels (default: cores)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.backends = args.backends.split(",")
    results = []
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            t0 = time.perf_counter()
            rows = bench_one(name, batch, args)
            results.append((name, batch, rows))
            print(f"# {name} batch {batch} done in {time.perf_counter() - t0:.0f}s: " +
                  ", ".join(f"{k} {fmt_ms(statistics.median(r.times)) if r.times else r.error}"
                            for k, r in rows.items()), file=sys.stderr, flush=True)
    lines = []
    cols = [b for b in ("eager", "inductor", "lazy", "openxla") if b in args.backends]
    lines.append(f"Inference latency, ms (median of {args.iters}; fp32; image {args.image_size}, "
                 f"sequence {args.seq_len}; {torch.get_num_threads()} threads)\n")
    head = "| model | batch | " + " | ".join(f"{c} ms" for c in cols)
    extra = []
    if "openxla" in cols and "eager" in cols:
        extra.append("openxla vs eager")
    if "openxla" in cols and "inductor" in cols:
        extra.append("openxla vs inductor")
    if "openxla" in cols and "lazy" in cols:
        extra.append("openxla vs lazy")
    lines.append(head + "".join(f" | {e}" for e in extra) + " | max abs diff (openxla) |")
    lines.append("|" + " --- |" * (2 + len(cols) + len(extra) + 1))
    ratios = {e: [] for e in extra}
    med = {}
    for name, batch, rows in results:
        m = {c: (statistics.median(rows[c].times) if rows[c].times else None) for c in cols}
        med[(name, batch)] = m
        cells = [fmt_ms(m[c]) if m[c] else f"error ({rows[c].error})" for c in cols]
        rcells = []
        for e in extra:
            other = e.split(" vs ")[1]
            r = m[other] / m["openxla"] if m.get(other) and m.get("openxla") else None
            ratios[e].append(r)
            rcells.append(f"{r:.2f}x" if r else "-")
        diff = rows["openxla"].diff if "openxla" in rows else None
        dcell = f"{diff:.1e}" if diff is not None else "-"
        lines.append(f"| {name} | {batch} | " + " | ".join(cells + rcells) + f" | {dcell} |")
    if extra:
        lines.append("| geomean | | " + " | ".join("" for _ in cols) + " | " +
                     " | ".join(f"{geomean(ratios[e]):.2f}x" for e in extra) + " | |")
    lines.append("")
    lines.append("Compile time, s. first call = the first call minus a steady call (dynamo's "
                 "bytecode tracing included); backend = time inside the backend compiler "
                 "(inductor: compile_fx with a cold cache; openxla: aot_autograd + "
                 "extract_compiled_graph + the bridge's trace and capture)\n")
    have = {"inductor", "openxla"} <= set(cols)
    ccols = [c for c in ("inductor", "lazy", "openxla") if c in cols]
    hdr = ["first call: " + c for c in ccols] + \
        (["backend: inductor", "backend: openxla", "openxla / inductor (backend)",
          "openxla / inductor (first call)"] if have else [])
    lines.append("| model | batch | " + " | ".join(hdr) + " |")
    lines.append("|" + " --- |" * (2 + len(hdr)))
    for name, batch, rows in results:
        ct = {}
        for c in ccols:
            b = rows[c]
            ct[c] = (b.first - statistics.median(b.times)) if b.times else None
        cells = [f"{ct[c]:.2f}" if ct[c] is not None else "-" for c in ccols]
        if have:
            bi, bo = rows["inductor"].backend_time, rows["openxla"].backend_time
            cells += [f"{bi:.2f}" if bi else "-", f"{bo:.2f}" if bo else "-",
                      f"{bo / bi:.3f}" if bi and bo else "-",
                      f"{ct['openxla'] / ct['inductor']:.3f}"
                      if ct["inductor"] and ct["openxla"] else "-"]
        lines.append(f"| {name} | {batch} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    fb = met.executed_fallback_ops()
    print(f"\nCPU fallbacks during the run: {fb or 'none'}", file=sys.stderr)


if __name__ == "__main__":
    main()
