"""Collectives in the IR (issue 7): xm.all_reduce / all_gather /
reduce_scatter / all_to_all / collective_permute recorded as IR ops; values
on the engine's own backend (one participant per group: identities),
refusals for groups it cannot run, StableHLO text (mlir-opt parses it), and
8 replicas through XLA's CPU plugin (torchtpu.spmd.run_replicated) compared
with numpy."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
from torchtpu import _C, pjrt, spmd
from torchtpu.lowering import core

MLIR_OPT = xm._mlir_opt()
needs_plugin = pytest.mark.skipif(pjrt.find_cpu_plugin() is None,
                                  reason="XLA's CPU PJRT plugin (pip install xla-cpu-pjrt) is "
                                         "not installed")
needs_mlir = pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-19 is not installed")
ALL8 = [list(range(8))]


@pytest.fixture
def dev():
    return torch_xla.device()


def test_python_opcodes_match_the_engine():
    # Every tt_op_t has a constant of its name in core.py with its number:
    # a merge that adds ops in C but not in Python (or renumbers) fails here.
    names = _C.op_names()
    for index, name in enumerate(names):
        assert getattr(core, name.upper(), None) == index, name
    assert len(names) == core.OPT_BARRIER + 1


# ------------------------------------------------ one participant: own backend
def test_single_participant_values(dev):
    a = torch.randn(4, 6)
    x = a.to(dev)
    torch.testing.assert_close(xm.all_reduce(xm.REDUCE_SUM, x, scale=0.25).cpu(), a * 0.25)
    torch.testing.assert_close(xm.all_reduce(xm.REDUCE_MAX, x, groups=[[0]]).cpu(), a)
    torch.testing.assert_close(xm.all_gather(x, dim=1).cpu(), a)
    torch.testing.assert_close(
        xm.reduce_scatter(xm.REDUCE_SUM, x, 2.0, scatter_dim=0, shard_count=1).cpu(), a * 2)
    torch.testing.assert_close(xm.all_to_all(x, 0, 1, 1).cpu(), a)
    torch.testing.assert_close(xm.collective_permute(x, [(0, 0)]).cpu(), a)
    assert torch.all(xm.collective_permute(x, []).cpu() == 0)
    ys = [a.to(dev), (a + 1).to(dev)]
    out = xm.all_reduce(xm.REDUCE_SUM, ys, scale=3.0)
    assert out is ys
    torch.testing.assert_close(ys[1].cpu(), (a + 1) * 3)


def test_refusals(dev):
    x = torch.randn(4, 6).to(dev)
    with pytest.raises(ValueError, match="Invalid reduce type 'avg'"):
        xm.all_reduce("avg", x)
    with pytest.raises(ValueError, match="same, nonzero size"):
        xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0, 1], [2]])
    with pytest.raises(RuntimeError, match="replica id 1 appears twice"):
        xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0, 1], [1, 2]])
    with pytest.raises(RuntimeError, match="dim 0 of size 4 does not divide by shard_count 3"):
        xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, 0, 3, groups=[[0, 1, 2]])
    with pytest.raises(RuntimeError, match="shard_count 2 does not match the replica group size "
                                           "4"):
        xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, 0, 2, groups=[[0, 1, 2, 3]])
    # Outside torch_xla.launch there is one replica: a group naming others
    # can never meet (tests/python/test_collectives_devices.py runs them
    # inside a launch).
    y = xm.all_reduce(xm.REDUCE_SUM, x, groups=ALL8)
    with pytest.raises(RuntimeError, match="all_reduce over a replica group of 8 outside a "
                                           "launch"):
        y.cpu()
    p = xm.collective_permute(x, [(0, 1), (1, 0)])
    with pytest.raises(RuntimeError, match="collective_permute from replica 0 to 1 outside a "
                                           "launch"):
        p.cpu()
    del y, p


ENGINE_CHILD = textwrap.dedent("""
    import torch, torch_xla, torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    a = torch.randn(4, 6)
    x = a.to(torch_xla.device())
    outs = [xm.all_reduce(xm.REDUCE_SUM, x, scale=0.5), xm.all_gather(x, dim=1),
            xm.collective_permute(x, []), xm.reduce_scatter(xm.REDUCE_MAX, x, 1.0, 0, 1),
            xm.all_to_all(x, 0, 1, 1), xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0]])]
    want = [a * 0.5, a, torch.zeros_like(a), a, a, a]
    print("ERR", max(float((o.cpu() - w).abs().max()) for o, w in zip(outs, want, strict=True)))
    print("EXEC", met.counter_value("PjrtExecute"))
""")


@needs_plugin
def test_single_participant_through_the_pjrt_engine():
    """The engine's graphs routed through XLA's CPU plugin (one replica):
    every collective is XLA's own, with the same values. (all_to_all with
    no groups once crashed the plugin with a division by zero.)"""
    import torchtpu
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(torchtpu.__file__)))
    env = dict(os.environ, PJRT_DEVICE="CPU", TORCHTPU_CPU_BACKEND="pjrt", CPU_NUM_DEVICES="1",
               PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", ENGINE_CHILD], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert float(lines["ERR"]) == 0.0
    assert int(lines["EXEC"]) >= 1


def test_all_to_all_without_groups_names_everyone(dev):
    x = torch.randn(4, 6).to(dev)
    text = xm.get_stablehlo([xm.all_to_all(x, 0, 1, 4)])
    assert ("split_count = 4 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : "
            "tensor<1x4xi64>}") in text


# -------------------------------------------------------------- StableHLO text
GOLDEN_ALL_REDUCE = """\
module @"torchtpu" attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {
  func.func @main(%arg0: tensor<3xf32>) -> tensor<3xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) ({
    ^bb0(%1: tensor<f32>, %2: tensor<f32>):
      %3 = "stablehlo.add"(%1, %2) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%3) : (tensor<f32>) -> ()
    }) {replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>} : (tensor<3xf32>) -> tensor<3xf32>
    return %0 : tensor<3xf32>
  }
}
"""


def test_golden_all_reduce(dev):
    x = torch.randn(3).to(dev)
    torch_xla.sync()
    y = xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0, 2], [1, 3]])
    assert xm.get_stablehlo([y]) == GOLDEN_ALL_REDUCE
    del y


@needs_mlir
def test_collectives_text_parses(dev):
    x = torch.randn(8, 4).to(dev)
    b = torch.ones(8, 4, dtype=torch.bool).to(dev)
    outs = [
        xm.all_reduce(xm.REDUCE_MIN, x, groups=ALL8),
        xm.all_reduce(xm.REDUCE_AND, b, groups=ALL8),
        xm.all_gather(x, dim=1, groups=[[0, 1], [2, 3]]),
        xm.reduce_scatter(xm.REDUCE_MUL, x, 1.0, 0, 4, groups=[[0, 1, 2, 3]]),
        xm.all_to_all(x, 0, 1, 2, groups=[[0, 1]]),
        xm.collective_permute(x, [(i, (i + 1) % 8) for i in range(8)]),
        xm.all_reduce(xm.REDUCE_SUM, x),
    ]
    text = xm.get_stablehlo(outs)
    for needle in ['"stablehlo.minimum"', '"stablehlo.and"', "all_gather_dim = 1 : i64",
                   "replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>",
                   '"stablehlo.multiply"', "scatter_dimension = 0 : i64",
                   "split_dimension = 0 : i64, concat_dimension = 1 : i64, split_count = 2 : i64",
                   "source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], "
                   "[5, 6], [6, 7], [7, 0]]> : tensor<8x2xi64>",
                   "replica_groups = dense<> : tensor<0x0xi64>", "mhlo.num_replicas = 8"]:
        assert needle in text, needle
    r = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect"], input=text,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    del outs


# ------------------------------------------------ 8 replicas, XLA's CPU plugin
def _replica_values(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(8)]


@needs_plugin
def test_replicated_all_reduce_8(dev):
    x = torch.zeros(4, 3).to(dev)
    torch_xla.sync()
    vals = _replica_values((4, 3))
    outs = [xm.all_reduce(xm.REDUCE_SUM, x, groups=ALL8),
            xm.all_reduce(xm.REDUCE_MAX, x, scale=2.0, groups=ALL8),
            xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0, 1, 2, 3], [4, 5, 6, 7]])]
    got = spmd.run_replicated(outs, 8, {x: vals})
    v = np.stack([t.numpy() for t in vals])
    for r in range(8):
        np.testing.assert_allclose(got[r][0].numpy(), v.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[r][1].numpy(), 2 * v.max(0), rtol=1e-6)
        half = v[:4] if r < 4 else v[4:]
        np.testing.assert_allclose(got[r][2].numpy(), half.sum(0), rtol=1e-5, atol=1e-5)
    del outs


@needs_plugin
def test_replicated_gather_scatter_permute_8(dev):
    x = torch.zeros(8, 2).to(dev)
    torch_xla.sync()
    vals = _replica_values((8, 2), seed=1)
    outs = [xm.all_gather(x, dim=0, groups=ALL8),
            xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, 0, 8, groups=ALL8),
            xm.all_to_all(x, 0, 1, 8, groups=ALL8),
            xm.collective_permute(x, [(i, (i + 1) % 8) for i in range(8)])]
    got = spmd.run_replicated(outs, 8, {x: vals})
    v = np.stack([t.numpy() for t in vals])  # [replica, 8, 2]
    for r in range(8):
        np.testing.assert_allclose(got[r][0].numpy(), v.reshape(64, 2))
        np.testing.assert_allclose(got[r][1].numpy(), v.sum(0)[r:r + 1], rtol=1e-5, atol=1e-5)
        # all_to_all: row block r of every replica, concatenated along dim 1.
        np.testing.assert_allclose(got[r][2].numpy(), np.concatenate(
            [v[s, r:r + 1] for s in range(8)], axis=1))
        np.testing.assert_allclose(got[r][3].numpy(), v[(r - 1) % 8])
    del outs
