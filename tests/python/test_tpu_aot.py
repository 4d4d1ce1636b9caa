"""Issue 7, part 3: training-step graphs compiled ahead of time for a real TPU
topology with libtpu (PJRT_TopologyDescription_Create + PJRT_Compile, no
client, no TPU), as PyTorch/XLA's AOT mode does. src/backends/pjrt/topology.c,
torchtpu.pjrt.Topology / compile_for_topology, docs/pjrt.md.

The error-path tests run everywhere. The libtpu tests are opt-in, because
libtpu is a 205 MB download (575 MB unpacked):

    pip download --no-deps -d /tmp/libtpu libtpu==0.0.51
    unzip -o -d /tmp/libtpu /tmp/libtpu/libtpu-0.0.51-*.whl 'libtpu/libtpu.so'
    TPU_LIBRARY_PATH=/tmp/libtpu/libtpu/libtpu.so pytest -m tpu_aot tests/python/test_tpu_aot.py

(or `pip install libtpu==0.0.51`, which find_plugin("TPU") also finds)."""
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
from torchtpu import _C, pjrt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

TPU_AOT = pytest.mark.tpu_aot
CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler to build the fake plugin")
CPU_PLUGIN = pjrt.find_cpu_plugin()
needs_cpu_plugin = pytest.mark.skipif(CPU_PLUGIN is None, reason="no XLA CPU PJRT plugin installed")
FETCH = ("pip download --no-deps -d /tmp/libtpu libtpu==0.0.51 && unzip -o -d /tmp/libtpu "
         "/tmp/libtpu/libtpu-0.0.51-*.whl libtpu/libtpu.so && export "
         "TPU_LIBRARY_PATH=/tmp/libtpu/libtpu/libtpu.so")


def _aot_requested(config):
    return "tpu_aot" in (config.getoption("-m") or "")


@pytest.fixture(scope="module")
def libtpu(request):
    """Path of libtpu.so for the tpu_aot tests (every one of them asks for
    it): skipped unless -m tpu_aot is given; then its absence fails."""
    if not _aot_requested(request.config):
        pytest.skip("libtpu ahead-of-time compile: run with -m tpu_aot and TPU_LIBRARY_PATH set")
    try:
        return pjrt.find_plugin("TPU")
    except RuntimeError as e:
        pytest.fail(f"-m tpu_aot needs libtpu: {e}. Fetch it with: {FETCH}")


# ---- everywhere: errors -----------------------------------------------------

def test_no_libtpu_anywhere_names_what_was_searched(monkeypatch):
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.setattr(pjrt, "_package_dir", lambda name: None)
    with pytest.raises(RuntimeError) as e:
        pjrt.compile_for_topology("func.func @main() { return }")
    assert str(e.value) == ("PJRT_DEVICE=TPU: no PJRT plugin found; searched: $TPU_LIBRARY_PATH "
                            "(unset); Python package 'libtpu' (not installed)")


def test_tpu_library_path_naming_no_file(monkeypatch, tmp_path):
    missing = tmp_path / "libtpu.so"
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(missing))
    with pytest.raises(RuntimeError, match=f"TPU_LIBRARY_PATH={missing}: no such file"):
        pjrt.Topology("v5e:2x2")


def test_explicit_missing_library():
    with pytest.raises(RuntimeError, match=r"PJRT plugin /nonexistent/libtpu.so: No such file or "
                                           r"directory"):
        pjrt.compile_for_topology("func.func @main() { return }",
                                  library_path="/nonexistent/libtpu.so")


@needs_cpu_plugin
def test_plugin_without_topologies_refuses_with_its_message():
    # XLA's CPU plugin implements the entry points but compiles only with a
    # client: its own refusal comes through, naming the topology.
    with pytest.raises(RuntimeError) as e:
        pjrt.Topology("v5e:2x2", library_path=CPU_PLUGIN)
    assert str(e.value) == (f"PJRT plugin {CPU_PLUGIN} refused topology 'v5e:2x2': "
                            "PJRT_TopologyDescription_Create: Topology not supported for CPU "
                            "compilation.")


# A plugin whose table is complete except PJRT_TopologyDescription_Create
# (slot 82): every other slot is a function that succeeds.
FAKE_PLUGIN = """
#include <stddef.h>
struct version { size_t struct_size; void *ext; int major, minor; };
struct table { size_t struct_size; void *ext; struct version v; void *slots[120]; };
static struct table t = {sizeof(struct table), 0, {sizeof(struct version), 0, 0, 116}, {0}};
static void *ok(void *args) { (void)args; return 0; }
const struct table *GetPjrtApi(void) {
  for (int i = 0; i < 120; i++) t.slots[i] = i == 82 ? 0 : (void *)ok;
  return &t;
}
"""


@needs_cc
def test_plugin_without_topology_entry_is_unimplemented(tmp_path):
    src = tmp_path / "libnotopo.c"
    src.write_text(textwrap.dedent(FAKE_PLUGIN))
    so = tmp_path / "libnotopo.so"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(so), str(src)], check=True,
                   capture_output=True)
    with pytest.raises(NotImplementedError,
                       match=rf"PJRT plugin {so} \(API 0\.116\) does not implement "
                             r"PJRT_TopologyDescription_Create: it cannot compile ahead of time"):
        pjrt.Topology("v5e:2x2", library_path=so)


def test_binding_argument_errors():
    with pytest.raises(TypeError, match="expected a PJRT topology"):
        _C.pjrt_topology_compile(object(), "x")
    with pytest.raises(TypeError, match="expected a PJRT topology"):
        _C.pjrt_topology_info(object())
    with pytest.raises(TypeError, match="options must be a dict"):
        _C.pjrt_topology_open("/x.so", "v5e:2x2", [1])


# ---- opt-in: libtpu ---------------------------------------------------------

# name -> (device count, device kind), as libtpu 0.0.51 describes them.
TOPOLOGIES = {
    "v5e:2x2": (4, "TPU v5 lite"),
    "v4:2x2x1": (8, "TPU v4"),
}


@TPU_AOT
@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_topology_description(libtpu, name):
    topo = pjrt.Topology(name, libtpu)
    count, kind = TOPOLOGIES[name]
    assert topo.platform_name == "tpu"
    assert topo.device_kinds == [kind] * count
    assert topo.platform_version.startswith(f"TFRT {kind}")
    assert topo.api_version[0] == 0 and topo.api_version[1] >= 81


@TPU_AOT
def test_unknown_topology_names_carry_libtpu_message(libtpu):
    with pytest.raises(RuntimeError, match=r"refused topology 'v9:2x2': "
                                           r"PJRT_TopologyDescription_Create: Invalid TPU external "
                                           r"name: TPU v9"):
        pjrt.Topology("v9:2x2", libtpu)
    with pytest.raises(RuntimeError, match=r"Your TPU topology name v5litepod-4 is invalid"):
        pjrt.Topology("v5litepod-4", libtpu)


@TPU_AOT
def test_compile_error_carries_libtpu_message_and_line(libtpu):
    bad = ("func.func @main(%a: tensor<2xf32>) -> tensor<3xf32> {\n"
           "  return %a : tensor<2xf32>\n}\n")
    with pytest.raises(RuntimeError) as e:
        pjrt.compile_for_topology(bad, "v5e:2x2", libtpu)
    msg = str(e.value)
    assert msg.startswith("compile for topology 'v5e:2x2' (4 x TPU v5 lite): PJRT_Compile: ")
    assert "-:2:3: error: type of return operand 0 ('tensor<2xf32>') doesn't match function " \
           "result type ('tensor<3xf32>')" in msg


def _training_step_stablehlo(kind, optimizer):
    """StableHLO of one whole training step (forward, backward, optimizer
    update) of models.py's `kind`: results are the loss, the updated
    parameters and buffers, and the optimizer state."""
    dev = torch_xla.device()
    model = models.make_model(kind).to(dev)
    opt = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=1e-3))
    x, y = models.make_batch(kind, 0)
    opt.zero_grad()
    loss = models.loss_of(kind, model(x.to(dev)), y.to(dev))
    loss.backward()
    opt.step()
    state = [v for s in opt.state.values() for v in s.values()
             if isinstance(v, torch.Tensor) and v.device.type == "xla"]
    outs = [loss] + list(model.parameters()) + list(model.buffers()) + state
    text = xm.get_stablehlo(outs)
    torch_xla.sync()
    return text, len(outs)


# (model, optimizer) -> ops the step's module must contain (so the graph
# really is forward + backward + update, not a fragment).
STEPS = {
    ("mlp", "sgd"): {"stablehlo.dot_general", "chlo.erf"},
    ("mlp", "adamw"): {"stablehlo.dot_general", "stablehlo.sqrt"},
    ("cnn", "sgd"): {"stablehlo.convolution", "stablehlo.reduce_window"},
    ("cnn", "adamw"): {"stablehlo.convolution", "stablehlo.sqrt"},
}


@TPU_AOT
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@pytest.mark.parametrize("kind,optimizer", sorted(STEPS))
def test_training_step_compiles_for_tpu(libtpu, topology, kind, optimizer):
    text, num_results = _training_step_stablehlo(kind, optimizer)
    for op in STEPS[kind, optimizer]:
        assert op in text, op
    assert text.count("func.func") == 1
    topo = pjrt.Topology(topology, libtpu)
    start = time.perf_counter()
    exe = topo.compile(text)
    seconds = time.perf_counter() - start
    # A TPU executable: the plugin's own proto, with TPU fusions inside.
    assert isinstance(exe, bytes)
    assert len(exe) > 100_000
    assert b"xla.TpuExecutableProto" in exe
    assert b"fusion" in exe
    print(f"\n{kind}/{optimizer} on {topology}: {num_results} results, StableHLO "
          f"{len(text)} chars -> executable {len(exe)} bytes, compile {seconds:.2f} s")


def _sharded_training_step_stablehlo(shard):
    """StableHLO of one SGD step of a 2-layer MLP whose batch is split over
    a mesh axis 'data' and whose weights are split Megatron-style over
    'model' (a 2x4 mesh: 8 partitions); shard=False: the same step without
    annotations."""
    import numpy as np
    import torch.nn as nn
    import torch.nn.functional as F
    import torch_xla.distributed.spmd as xs
    dev = torch_xla.device()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 16)).to(dev)
    x = torch.randn(32, 64).to(dev)
    target = torch.randint(0, 16, (32,)).to(dev)
    if shard:
        mesh = xs.Mesh(np.arange(8), (2, 4), ("data", "model"))
        w1, _, w2, _ = model.parameters()
        xs.mark_sharding(w1, mesh, ("model", None))
        xs.mark_sharding(w2, mesh, (None, "model"))
        xs.mark_sharding(x, mesh, ("data", None))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    opt.step()
    return xm.get_stablehlo([loss] + list(model.parameters()))


@TPU_AOT
def test_sharded_training_step_partitions_for_tpu_v4(libtpu):
    """XLA's SPMD partitioner, inside libtpu, cuts the annotated step into 8
    per-chip programs for v4:2x2x1: the collectives it inserts (the module
    has none) are in the executable; the unannotated step has none."""
    sharded = _sharded_training_step_stablehlo(True)
    assert "mhlo.num_partitions = 8" in sharded and '"stablehlo.all_reduce"' not in sharded
    topo = pjrt.Topology("v4:2x2x1", libtpu)
    exe = topo.compile(sharded, num_partitions=8, use_spmd_partitioning=True)
    assert b"xla.TpuExecutableProto" in exe
    assert exe.count(b"all-reduce") > 0
    plain = topo.compile(_sharded_training_step_stablehlo(False))
    assert b"all-reduce" not in plain
