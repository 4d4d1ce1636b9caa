"""Differential test of partitioned SPMD execution (issue 30): small graphs
(elementwise, matmul, MLP forward + backward, softmax, reductions) on
meshes (2,), (4,) and (2,2) with a few partition specs each. For every
case three results must agree:

- the engine's partitioned run (SPMD mode, annotated inputs,
  torch_xla.sync(), then .cpu()), which must really have run partitioned
  (SpmdPartitionedExecution counted, no SpmdPartitionFallback);
- the same graph on unannotated inputs, which the engine runs whole on one
  device;
- XLA's own SPMD partitioner on the same annotated graph (xs.run_spmd
  through XLA's CPU PJRT plugin; that comparison skips when the plugin is
  not installed).

The device count is fixed when the engine starts, so each mesh runs in a
fresh interpreter with as many CPU devices as the mesh has, printing one
JSON line of per-case differences and counters."""
import json
import os
import subprocess
import sys

import pytest

from torchtpu import pjrt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU_PLUGIN = pjrt.find_cpu_plugin()

CHILD = r"""
import json, sys
import numpy as np, torch
import torch_xla, torch_xla.runtime as xr
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs

xr.use_spmd()
shape, axes, with_plugin = json.loads(sys.argv[1])
mesh = xs.Mesh(np.arange(int(np.prod(shape))), tuple(shape), tuple(axes))
A, B = (axes[0], axes[-1]) if len(axes) == 2 else (axes[0], axes[0])

def swap(spec):
    return (spec[1], spec[0])

# Each graph: input shapes, how a spec annotates its inputs, the function.
def elementwise(a, b):
    return [torch.relu(a * b + a.sin()) - b / (1 + a.abs())]

def matmul(a, b):
    return [a @ b]

def mlp(x, w1, w2, y):
    w1 = w1.detach().requires_grad_(True)
    w2 = w2.detach().requires_grad_(True)
    loss = ((torch.tanh(x @ w1.t()) @ w2.t() - y) ** 2).mean()
    g1, g2 = torch.autograd.grad(loss, [w1, w2])
    return [loss, g1, g2]

def softmax(a):
    return [torch.softmax(a, dim=-1), torch.log_softmax(a, dim=0)]

def reductions(a):
    return [a.sum(0), a.mean(1), a.amax(0), a.amin(1), a.sum(), a.mean(dim=1, keepdim=True)]

GRAPHS = {
    # rows: 6 over 4 devices leaves a padded tile, 8 divides evenly.
    "elementwise": ([(6, 10), (6, 10)], lambda s: [s, s], elementwise),
    "matmul": ([(8, 12), (12, 6)], lambda s: [s, swap(s)], matmul),
    "mlp": ([(8, 12), (16, 12), (6, 16), (8, 6)], lambda s: [s, swap(s), (None, None), s], mlp),
    "softmax": ([(6, 12)], lambda s: [s], softmax),
    "reductions": ([(10, 8)], lambda s: [s], reductions),
}
SPECS = [(A, None), (None, B)] + ([(A, B), (B, A)] if len(axes) == 2 else [])

def counters():
    return (met.counter_value("SpmdPartitionedExecution") or 0,
            met.counter_value("SpmdPartitionFallback") or 0)

def maxdiff(got, want):
    return max(float((g - w).abs().max() / (1 + w.abs().max())) for g, w in zip(got, want))

out = {}
for name, (shapes, annotate, fn) in GRAPHS.items():
    for spec in SPECS:
        g = torch.Generator().manual_seed(len(out))
        host = [torch.randn(*s, generator=g) for s in shapes]
        whole = [t.cpu() for t in fn(*[h.to("xla") for h in host])]
        before = counters()
        xla_in = [h.to("xla") for h in host]
        for t, s in zip(xla_in, annotate(spec)):
            if any(a is not None for a in s):
                xs.mark_sharding(t, mesh, s)
        outs = fn(*xla_in)
        plugin = [t.detach() for t in xs.run_spmd(outs)] if with_plugin else None
        torch_xla.sync()
        parted = [t.detach().cpu() for t in outs]
        after = counters()
        ref = [t.detach() for t in fn(*[h.clone() for h in host])]
        out[f"{name} {spec}"] = dict(
            vs_whole=maxdiff(parted, whole), whole_vs_cpu=maxdiff(whole, ref),
            vs_plugin=None if plugin is None else maxdiff(parted, plugin),
            shapes=[list(t.shape) == list(w.shape) for t, w in zip(parted, whole)],
            partitioned=after[0] - before[0], fallback=after[1] - before[1])
print("RESULT " + json.dumps(out))
"""

MESHES = {"2": ((2,), ("x",)), "4": ((4,), ("x",)), "2x2": ((2, 2), ("x", "y"))}


def _run(shape, axes):
    n = 1
    for d in shape:
        n *= d
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(n),
               PYTHONPATH=os.path.join(ROOT, "python"))
    for name in ("XLA_USE_SPMD", "TORCHTPU_SPMD_PARTITION"):
        env.pop(name, None)
    arg = json.dumps([list(shape), list(axes), CPU_PLUGIN is not None])
    p = subprocess.run([sys.executable, "-c", CHILD, arg], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, p.stdout + p.stderr
    return json.loads(line[-1][len("RESULT "):])


_cache = {}


def results(mesh):
    if mesh not in _cache:
        _cache[mesh] = _run(*MESHES[mesh])
    return _cache[mesh]


@pytest.mark.parametrize("mesh", list(MESHES))
def test_partitioned_equals_unpartitioned_engine(mesh):
    res = results(mesh)
    # 5 graphs x 2 specs on 1-D meshes, x 4 specs on the 2-D mesh.
    assert len(res) == (20 if mesh == "2x2" else 10), sorted(res)
    bad = {k: r for k, r in res.items()
           if not (r["vs_whole"] < 1e-5 and r["whole_vs_cpu"] < 1e-5 and all(r["shapes"]))}
    assert not bad, bad


@pytest.mark.parametrize("mesh", list(MESHES))
def test_every_case_ran_partitioned(mesh):
    bad = {k: r for k, r in results(mesh).items()
           if r["partitioned"] < 1 or r["fallback"] != 0}
    assert not bad, bad


@pytest.mark.skipif(CPU_PLUGIN is None,
                    reason="XLA's CPU PJRT plugin (pip install xla-cpu-pjrt) is not installed")
@pytest.mark.parametrize("mesh", list(MESHES))
def test_partitioned_equals_xla_partitioner(mesh):
    bad = {k: r for k, r in results(mesh).items()
           if r["vs_plugin"] is None or not r["vs_plugin"] < 1e-5}
    assert not bad, bad
