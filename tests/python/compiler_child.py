"""Child process for the compiler tests: runs a few fused elementwise graphs
several times, waits for tier-1 compiles, and prints a JSON summary (max
error against PyTorch CPU, counters)."""
import json
import sys

import torch

import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr
from torchtpu import _C


def graphs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(257, 129, generator=g)
    b = torch.randn(129, generator=g)
    c = torch.randn(257, 1, generator=g)
    yield "gelu_bias", (lambda x, b, c: torch.nn.functional.gelu(x + b) * 0.5), (x, b, c)
    yield "silu_where", (lambda x, b, c: torch.where(x > c, torch.nn.functional.silu(x), -x.abs())), (x, b, c)
    yield "tanh_sigmoid", (lambda x, b, c: (x * 2 + 1).tanh() - (x - b).sigmoid() / (c.exp() + 1)), (x, b, c)
    yield "bf16_chain", (lambda x, b, c: ((x.bfloat16() * 3 + b.bfloat16()).relu() - 1).float()), (x, b, c)
    yield "adam_like", (lambda x, b, c: x - 0.01 * (x * 0.9 + b * 0.1) / ((x * x) * 0.999 + 1e-8).sqrt()), (x, b, c)


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "-" else None
    readonly = len(sys.argv) > 2 and sys.argv[2] == "ro"
    if cache:
        xr.initialize_cache(cache, readonly=readonly)
    out = {"errors": {}}
    for name, fn, args in graphs():
        ref = fn(*args)
        dev_args = [a.to("xla") for a in args]
        for _ in range(3):
            y = fn(*dev_args)
            torch_xla.sync(wait=True)
            _C.tier1_wait()
        got = y.cpu()
        out["errors"][name] = (got.float() - ref.float()).abs().max().item()
    for name in ("Tier1Compile", "PersistentCacheHit", "PersistentCacheMiss",
                 "PersistentCacheDeserializeFailure", "UncachedCompile"):
        out[name] = met.counter_value(name) or 0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
