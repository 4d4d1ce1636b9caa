"""Manual SPMD regions run partitioned on the engine's own CPU backend
(docs/spmd.md "Partitioner", manual regions): xs.enable_manual_sharding
gives each partition its tile, ops on the tiles run per device on local
shapes, collectives inside (all_reduce, all_gather, reduce_scatter,
all_to_all, collective_permute; groups of partition ids) run between the
partitions, and xs.disable_manual_sharding makes the tiles the full value.

Meshes (2,), (4,) and (2,2), each in a fresh interpreter with as many CPU
devices (the device count is fixed when the engine starts). Every case's
result must equal the same computation written per device in PyTorch on
the CPU (the collectives done by hand) and XLA's own partitioner on the
same graph (xs.run_spmd through XLA's CPU PJRT plugin; skipped without
it), and must have run partitioned (SpmdPartitionedExecution counted, no
SpmdPartitionFallback)."""
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
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.spmd as xs

xr.use_spmd()
shape, axes, with_plugin = json.loads(sys.argv[1])
n = int(np.prod(shape))
mesh = xs.Mesh(np.arange(n), tuple(shape), tuple(axes))
xs.set_global_mesh(mesh)
ids = np.arange(n).reshape(shape)
A, B = axes[0], axes[-1]

def coords(p):
    return dict(zip(axes, np.argwhere(ids == p)[0].tolist()))

def groups_along(axis):
    # partitions that differ only along `axis`, in its order
    k = axes.index(axis)
    moved = np.moveaxis(ids, k, -1).reshape(-1, shape[k])
    return [list(map(int, g)) for g in moved]

def tile(x, spec, p):
    # partition p's tile of x (zero-padded to ceil(dim / tiles))
    c = coords(p)
    for d, a in enumerate(spec):
        if a is None:
            continue
        t = shape[axes.index(a)]
        chunk = -(-x.shape[d] // t)
        pad = [0, 0] * x.dim()
        pad[2 * (x.dim() - 1 - d) + 1] = chunk * t - x.shape[d]
        x = torch.nn.functional.pad(x, pad).narrow(d, c[a] * chunk, chunk)
    return x

def untile(locals_, spec, full):
    # the full value whose tiles are locals_ (padding cropped)
    out = torch.zeros(full)
    for p, v in enumerate(locals_):
        c = coords(p)
        idx = []
        for d, a in enumerate(spec):
            if a is None:
                idx.append(slice(0, full[d]))
            else:
                chunk = v.shape[d]
                lo = min(c[a] * chunk, full[d])
                idx.append(slice(lo, min(lo + chunk, full[d])))
        out[tuple(idx)] = v[tuple(slice(0, s.stop - s.start) for s in idx)]
    return out

def group_of(groups, p):
    return next(g for g in groups if p in g)

# Each case: inputs, (spec in, spec out, full shape out), the per-device
# body on xla tensors, and the same body per device in PyTorch (loc: every
# partition's local values; the collectives by hand).
def c_elementwise_all_reduce(X, W, dev):
    return xm.all_reduce(xm.REDUCE_SUM, torch.relu(X @ W) * 2 + 1, groups=[list(range(n))])
def r_elementwise_all_reduce(loc, W):
    ys = [torch.relu(x @ W) * 2 + 1 for x in loc]
    s = sum(ys)
    return [s for _ in loc]

def c_all_gather(X, W, dev):
    return xm.all_gather(torch.tanh(X) + 1, dim=0, groups=groups_along(A))
def r_all_gather(loc, W):
    ys = [torch.tanh(x) + 1 for x in loc]
    g = groups_along(A)
    return [torch.cat([ys[q] for q in group_of(g, p)], 0) for p in range(n)]

def c_all_reduce_axis(X, W, dev):
    return xm.all_reduce(xm.REDUCE_MAX, X.exp(), groups=groups_along(B))
def r_all_reduce_axis(loc, W):
    g = groups_along(B)
    ys = [x.exp() for x in loc]
    return [torch.stack([ys[q] for q in group_of(g, p)]).amax(0) for p in range(n)]

def c_reduce_scatter(X, W, dev):
    return xm.reduce_scatter(xm.REDUCE_SUM, X * 3, 1.0, 0, n, groups=[list(range(n))])
def r_reduce_scatter(loc, W):
    s = sum(x * 3 for x in loc)
    return list(s.chunk(n, 0))

def c_all_to_all(X, W, dev):
    return xm.all_to_all(X + 1, 1, 0, n, groups=[list(range(n))])
def r_all_to_all(loc, W):
    ys = [x + 1 for x in loc]
    return [torch.cat([ys[q].chunk(n, 1)[p] for q in range(n)], 0) for p in range(n)]

def c_permute(X, W, dev):
    return xm.collective_permute(X * 2, [(p, (p + 1) % n) for p in range(n)])
def r_permute(loc, W):
    return [loc[(p - 1) % n] * 2 for p in range(n)]

def c_uneven(X, W, dev):
    return torch.sin(X) * 3 - X
def r_uneven(loc, W):
    return [torch.sin(x) * 3 - x for x in loc]

ONE_D = len(axes) == 1
ALL = (A, B) if not ONE_D else A  # one dim over every mesh axis

def c_gather_2d(X, W, dev):
    return xm.all_gather(X * 2, dim=1, groups=groups_along(B))
def r_gather_2d(loc, W):
    g = groups_along(B)
    return [torch.cat([loc[q] * 2 for q in group_of(g, p)], 1) for p in range(n)]

def c_then_more(X, W, dev):
    return xm.all_reduce(xm.REDUCE_SUM, X @ W, groups=[list(range(n))])
def r_then_more(loc, W):
    s = sum(x @ W for x in loc)
    return [s for _ in loc]

# name: (x shape, mark_sharding spec of x, region spec in, spec out, full
# shape out, body, reference, what runs after the region)
CASES = {
    "matmul_all_reduce": ((8, 6), (A, None), (A, None), (A, None), (8, 4),
                          c_elementwise_all_reduce, r_elementwise_all_reduce, None),
    "all_gather_rows": ((8, 6), (A, None), (A, None), (None, None), (8, 6),
                        c_all_gather, r_all_gather, None) if ONE_D else
                       ((8, 6), (A, B), (A, B), (None, B), (8, 6),
                        c_all_gather, r_all_gather, None),
    "all_gather_cols_2d": ((4, 6), (A, B), (A, B), (A, None), (4, 6),
                           c_gather_2d, r_gather_2d, None) if not ONE_D else None,
    "all_reduce_max": ((8, 6), (A, None), (A, None), (A, None), (8, 6),
                       c_all_reduce_axis, r_all_reduce_axis, None) if ONE_D else
                      ((8, 6), (A, B), (A, B), (A, B), (8, 6),
                       c_all_reduce_axis, r_all_reduce_axis, None),
    "reduce_scatter": ((4 * n, 6), (None, None), (None, None), (ALL, None), (4 * n, 6),
                       c_reduce_scatter, r_reduce_scatter, None),
    "all_to_all": ((2 * n, 2 * n), (ALL, None), (ALL, None), (None, ALL), (2 * n, 2 * n),
                   c_all_to_all, r_all_to_all, None),
    "collective_permute": ((4 * n, 3), (ALL, None), (ALL, None), (ALL, None), (4 * n, 3),
                           c_permute, r_permute, None),
    "uneven_elementwise": ((6, 5), (A, None), (A, None), (A, None), (6, 5),
                           c_uneven, r_uneven, None),
    # x held in another layout than the region's (resharded on entry); the
    # region's result continues partitioned (a column sum over the tiles).
    "reshard_in_then_sum": ((8, 6), (None, A), (A, None), (A, None), (8, 4),
                            c_then_more, r_then_more, lambda t: t.sum(0) * 3),
}

def tile_any(x, spec, p):
    if all(not isinstance(a, tuple) for a in spec):
        return tile(x, spec, p)
    for d, a in enumerate(spec):  # one dim over every mesh axis: tile p
        if isinstance(a, tuple):
            chunk = -(-x.shape[d] // n)
            return x.narrow(d, p * chunk, chunk)

def untile_any(locals_, spec, full):
    if all(not isinstance(a, tuple) for a in spec):
        return untile(locals_, spec, full)
    d = next(d for d, a in enumerate(spec) if isinstance(a, tuple))
    return torch.cat(locals_, d)[tuple(slice(0, s) for s in full)]

def counters():
    return {k: met.counter_value(k) or 0 for k in
            ("SpmdPartitionedExecution", "SpmdPartitionFallback", "SpmdAllReduce",
             "SpmdAllGather", "SpmdReduceScatter", "SpmdAllToAll", "SpmdCollectivePermute")}

def maxdiff(g, w):
    if tuple(g.shape) != tuple(w.shape):
        return float("inf")
    return float((g - w).abs().max() / (1 + w.abs().max()))

out = {}
for name, case in CASES.items():
    if case is None:
        continue
    xshape, smark, sin, sout, full, body, ref, after_fn = case
    g = torch.Generator().manual_seed(len(out))
    x = torch.randn(*xshape, generator=g)
    w = torch.randn(xshape[1], 4, generator=g)
    before = counters()
    xt, wt = x.to("xla"), w.to("xla")
    xs.mark_sharding(xt, mesh, smark)
    loc_x = xs.enable_manual_sharding(xt, sin)
    y = body(loc_x, wt, None)
    res = xs.disable_manual_sharding(y, sout, full)
    if after_fn is not None:
        res = after_fn(res)
    plugin = xs.run_spmd([res])[0] if with_plugin else None
    torch_xla.sync()
    got = res.cpu()
    after = counters()
    locs = [tile_any(x, sin, p) for p in range(n)]
    want = untile_any(ref(locs, w), sout, full)
    if after_fn is not None:
        want = after_fn(want)
    out[name] = dict(vs_cpu=maxdiff(got, want),
                     vs_plugin=None if plugin is None else maxdiff(got, plugin),
                     local_shape=list(loc_x.shape), want_local=list(locs[0].shape),
                     **{k: after[k] - before[k] for k in after})

# A value inside the region stays pending when a sync computes the rest;
# a later graph that leaves the region recomputes it; reading it alone is
# refused, naming the way out.
x = torch.arange(8.0 * n).reshape(4 * n, 2)
xt = x.to("xla")
loc = xs.enable_manual_sharding(xt, (A, None))
inner = loc * 2
first = xs.disable_manual_sharding(inner, (A, None), tuple(x.shape))
torch_xla.sync()
second = xs.disable_manual_sharding(inner + 1, (A, None), tuple(x.shape))
try:
    inner.cpu()
    error = None
except NotImplementedError as e:
    error = str(e)
out["_pending"] = dict(first=maxdiff(first.cpu(), x * 2), second=maxdiff(second.cpu(), x * 2 + 1),
                       error=error)
# PyTorch/XLA's internal names for the same region (as its own tests use
# them): full-to-shard as the annotation says, {manual} marked by hand.
x = torch.randn(8, 4 * n)
xt = x.to("xla")
spec = (None, ALL)
xs.mark_sharding(xt, mesh, spec)
inner = torch_xla._XLAC._spmd_full_to_shard_shape(xt) + 1
marked = xs._mark_manual_sharding(inner)
back = torch_xla._XLAC._spmd_shard_to_full_shape(marked.global_tensor, mesh.get_op_sharding(spec),
                                                 x.shape, x.dtype)
before = counters()
got = back.cpu()
after = counters()
out["_xlac"] = dict(diff=maxdiff(got, x + 1), local_shape=list(inner.shape),
                    partitioned=after["SpmdPartitionedExecution"] - before["SpmdPartitionedExecution"],
                    fallback=after["SpmdPartitionFallback"] - before["SpmdPartitionFallback"])
# Leaving through a replication that names no devices (PyTorch/XLA's
# OpSharding([], [], [], REPLICATED)) spans the region's devices.
marked = xs._mark_manual_sharding(torch.ones(8, 8).to("xla") + 1)
anywhere = torch_xla._XLAC.OpSharding([], [], [], xs.ShardingType.REPLICATED)
back = torch_xla._XLAC._spmd_shard_to_full_shape(marked.global_tensor, anywhere, (8, 8),
                                                 torch.float32)
hlo = torch_xla._XLAC._get_xla_tensors_hlo([back])
out["_xlac"]["replicated_leave_hlo"] = (
    'custom_call_target="SPMDShardToFullShape", sharding={replicated}' in hlo)
out["_xlac"]["replicated_leave"] = maxdiff(back.cpu(), torch.full((8, 8), 2.0))
# PyTorch/XLA's test_spmd_all_reduce / test_spmd_reduce_scatter bodies
# (their TPU-only tests): a replicated region, the SPMD collectives by
# their _XLAC names over every partition.
every = [list(range(n))]
before = counters()
ones = torch.ones(8, 8).to("xla")
r = xs.enable_manual_sharding(ones, (None, None))
ar = torch_xla._XLAC._xla_spmd_all_reduce(xm.REDUCE_SUM, r, 1.0, every)
ar = xs.disable_manual_sharding(ar, (None, None), ar.shape)
ars = torch_xla._XLAC._xla_spmd_all_reduce(xm.REDUCE_SUM, r, 0.25, every)
ars = xs.disable_manual_sharding(ars, (None, None), ars.shape)
rs0 = torch_xla._XLAC._xla_spmd_reduce_scatter(xm.REDUCE_SUM, r, 1.0, 0, n, every)
rs0 = xs.disable_manual_sharding(rs0, (None, None), rs0.shape)
rs1 = torch_xla._XLAC._xla_spmd_reduce_scatter(xm.REDUCE_SUM, r, 1.0, -1, n, every)
rs1 = xs.disable_manual_sharding(rs1, (None, None), rs1.shape)
torch_xla.sync()
got = [ar.cpu(), ars.cpu(), rs0.cpu(), rs1.cpu()]
after = counters()
want = [torch.ones(8, 8) * n, torch.ones(8, 8) * (n * 0.25), torch.ones(8 // n, 8) * n,
        torch.ones(8, 8 // n) * n]
out["_xlac_collectives"] = dict(diffs=[maxdiff(g, w) for g, w in zip(got, want)],
                                **{k: after[k] - before[k] for k in after})
# Groups the partitions cannot form: a RuntimeError naming the problem
# when the program runs (no fallback, no hang).
errors = []
for groups in ([[0]], [list(range(n - 1)) + [n + 1]]):
    v = xs.enable_manual_sharding(torch.ones(2 * n, 2).to("xla"), (A, None))
    v = xm.all_reduce(xm.REDUCE_SUM, v, groups=groups)
    v = xs.disable_manual_sharding(v, (A, None), (2 * n, 2))
    try:
        v.cpu()
        errors.append(None)
    except Exception as e:
        errors.append([type(e).__name__, str(e)])
    del v
out["_errors"] = errors
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


def _cases(mesh):
    return {k: v for k, v in results(mesh).items() if not k.startswith("_")}


@pytest.mark.parametrize("mesh", list(MESHES))
def test_manual_region_equals_cpu(mesh):
    res = _cases(mesh)
    assert len(res) == (9 if mesh == "2x2" else 8), sorted(res)
    bad = {k: r for k, r in res.items()
           if not (r["vs_cpu"] < 1e-5 and r["local_shape"] == r["want_local"])}
    assert not bad, bad


@pytest.mark.parametrize("mesh", list(MESHES))
def test_manual_region_ran_partitioned(mesh):
    """Every case ran as one partitioned execution, none fell back, and the
    collective the region names was counted (once)."""
    want = {"matmul_all_reduce": "SpmdAllReduce", "all_gather_rows": "SpmdAllGather",
            "all_gather_cols_2d": "SpmdAllGather", "all_reduce_max": "SpmdAllReduce",
            "reduce_scatter": "SpmdReduceScatter", "all_to_all": "SpmdAllToAll",
            "collective_permute": "SpmdCollectivePermute"}
    bad = {}
    for k, r in _cases(mesh).items():
        if r["SpmdPartitionedExecution"] != 1 or r["SpmdPartitionFallback"] != 0:
            bad[k] = r
        elif k in want and r[want[k]] != 1:
            bad[k] = r
    assert not bad, bad


@pytest.mark.skipif(CPU_PLUGIN is None,
                    reason="XLA's CPU PJRT plugin (pip install xla-cpu-pjrt) is not installed")
@pytest.mark.parametrize("mesh", list(MESHES))
def test_manual_region_equals_xla_partitioner(mesh):
    bad = {k: r for k, r in _cases(mesh).items()
           if r["vs_plugin"] is None or not r["vs_plugin"] < 1e-5}
    assert not bad, bad


@pytest.mark.parametrize("mesh", list(MESHES))
def test_region_values_stay_pending(mesh):
    r = results(mesh)["_pending"]
    assert r["first"] == 0.0 and r["second"] == 0.0, r
    assert r["error"] and "xs.disable_manual_sharding" in r["error"] and "run_spmd" in r["error"], r


@pytest.mark.parametrize("mesh", list(MESHES))
def test_xlac_region_names(mesh):
    """_spmd_full_to_shard_shape / _mark_manual_sharding /
    _spmd_shard_to_full_shape (PyTorch/XLA's internal names) run
    partitioned as well."""
    r = results(mesh)["_xlac"]
    n = 2 if mesh == "2" else 4
    assert r["diff"] == 0.0 and r["local_shape"] == [8, 4], r
    assert r["replicated_leave"] == 0.0 and r["replicated_leave_hlo"], r
    assert r["partitioned"] == 1 and r["fallback"] == 0, r


@pytest.mark.parametrize("mesh", list(MESHES))
def test_xlac_spmd_collectives(mesh):
    """_XLAC._xla_spmd_all_reduce / _xla_spmd_reduce_scatter in a
    replicated region, as PyTorch/XLA's (TPU-only) tests use them: one
    partitioned execution with 2 all_reduces and 2 reduce_scatters."""
    r = results(mesh)["_xlac_collectives"]
    assert r["diffs"] == [0.0] * 4, r
    assert r["SpmdPartitionedExecution"] == 1 and r["SpmdPartitionFallback"] == 0, r
    assert r["SpmdAllReduce"] == 2 and r["SpmdReduceScatter"] == 2, r


@pytest.mark.parametrize("mesh", list(MESHES))
def test_groups_the_partitions_cannot_form(mesh):
    n = 2 if mesh == "2" else 4
    none_of, outside = results(mesh)["_errors"]
    assert none_of and none_of[0] == "RuntimeError" and "none of its replica groups" in none_of[1]
    assert outside and outside[0] == "RuntimeError" and (
        f"replica id {n + 1}" in outside[1] or "none of its replica groups" in outside[1]), outside
