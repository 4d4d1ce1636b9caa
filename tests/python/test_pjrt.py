"""Issue 7, part 2: the PJRT C API backend (src/backends/pjrt/, torchtpu.pjrt).

The error paths run everywhere. The plugin tests drive XLA's CPU PJRT plugin
(the `xla-cpu-pjrt` package pinned in requirements.txt); they are skipped,
saying so, only where no CPU plugin is installed."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from torchtpu import _C, pjrt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU_PLUGIN = pjrt.find_cpu_plugin()
needs_plugin = pytest.mark.skipif(
    CPU_PLUGIN is None,
    reason="no XLA CPU PJRT plugin installed (requirements.txt pins xla-cpu-pjrt; or set "
    "TORCHTPU_PJRT_CPU_PLUGIN to a plugin .so)")
CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler to build the fake plugins")


# ---- loader errors ----------------------------------------------------------

def test_missing_library():
    path = "/nonexistent/dir/libnothing.so"
    with pytest.raises(RuntimeError, match=r"PJRT plugin /nonexistent/dir/libnothing.so: "
                                           r"No such file or directory"):
        pjrt.Client(path)


def test_file_that_is_not_a_library(tmp_path):
    path = tmp_path / "not_a_plugin.so"
    path.write_text("this is text, not an ELF shared object\n")
    with pytest.raises(RuntimeError) as e:
        pjrt.Client(path)
    msg = str(e.value)
    assert f"PJRT plugin {path} could not be loaded" in msg
    # dlerror's own reason comes through.
    assert "not_a_plugin.so" in msg.split("could not be loaded:")[1]


def test_directory_is_not_a_plugin(tmp_path):
    with pytest.raises(RuntimeError, match="not a regular file"):
        pjrt.Client(tmp_path)


def _build_so(tmp_path, name, source):
    src = tmp_path / f"{name}.c"
    src.write_text(textwrap.dedent(source))
    out = tmp_path / f"{name}.so"
    subprocess.run([CC, "-shared", "-fPIC", "-o", str(out), str(src)], check=True,
                   capture_output=True)
    return out


@needs_cc
def test_library_without_get_pjrt_api(tmp_path):
    so = _build_so(tmp_path, "libplain", "int tt_not_pjrt(void) { return 42; }\n")
    with pytest.raises(RuntimeError, match=r"does not export GetPjrtApi: not a PJRT C API plugin"):
        pjrt.Client(so)


# A fake table: header words, then a version struct; the version, the table
# size and whether GetPjrtApi returns it at all are set per test.
FAKE_PLUGIN = """
#include <stddef.h>
#include <stdint.h>
struct version { size_t struct_size; void *ext; int major, minor; };
struct table { size_t struct_size; void *ext; struct version v; void *slots[200]; };
static struct table t = {TABLE_SIZE, 0, {sizeof(struct version), 0, MAJOR, MINOR}, {0}};
const struct table *GetPjrtApi(void) { return RETURN_NULL ? 0 : &t; }
"""


def _fake_plugin(tmp_path, name, major=0, minor=90, table_size="sizeof(struct table)",
                 return_null=0):
    src = (FAKE_PLUGIN.replace("TABLE_SIZE", table_size).replace("MAJOR", str(major))
           .replace("MINOR", str(minor)).replace("RETURN_NULL", str(return_null)))
    return _build_so(tmp_path, name, src)


@needs_cc
def test_plugin_returning_null_table(tmp_path):
    so = _fake_plugin(tmp_path, "libnull", return_null=1)
    with pytest.raises(RuntimeError, match="GetPjrtApi returned NULL"):
        pjrt.Client(so)


@needs_cc
def test_plugin_with_other_major_version(tmp_path):
    so = _fake_plugin(tmp_path, "libmajor", major=1, minor=3)
    with pytest.raises(RuntimeError, match=r"speaks PJRT C API 1\.3; this backend needs 0\.x "
                                           r"with x >= 81"):
        pjrt.Client(so)


@needs_cc
def test_plugin_with_too_old_minor_version(tmp_path):
    so = _fake_plugin(tmp_path, "libold", minor=12)
    with pytest.raises(RuntimeError, match=r"speaks PJRT C API 0\.12"):
        pjrt.Client(so)


@needs_cc
def test_plugin_with_short_table(tmp_path):
    so = _fake_plugin(tmp_path, "libshort", table_size="64")
    with pytest.raises(RuntimeError, match=r"API 0\.90\): its function table is 64 bytes, "
                                           r"shorter than the \d+ bytes"):
        pjrt.Client(so)


@needs_cc
def test_plugin_with_empty_slots(tmp_path):
    so = _fake_plugin(tmp_path, "libempty")
    with pytest.raises(RuntimeError, match=r"function table entry 0 .* is NULL"):
        pjrt.Client(so)


def test_binding_argument_errors():
    with pytest.raises(TypeError, match="expected a PJRT client"):
        _C.pjrt_devices(object())
    with pytest.raises(TypeError, match="expected a PJRT executable"):
        _C.pjrt_execute(object(), [])
    with pytest.raises(TypeError, match="options must be a dict"):
        _C.pjrt_open("/x.so", [1])
    with pytest.raises(TypeError, match="option 'a': value must be bool, int, float or str"):
        _C.pjrt_open("/x.so", {"a": [1]})


# ---- plugin discovery -------------------------------------------------------

def _clear_plugin_env(monkeypatch):
    for var in ("TPU_LIBRARY_PATH", "PJRT_LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)


def test_find_plugin_tpu_nothing_found(monkeypatch):
    if pjrt._package_dir("libtpu") is not None:
        pytest.skip("the libtpu package is installed here")
    _clear_plugin_env(monkeypatch)
    with pytest.raises(RuntimeError) as e:
        pjrt.find_plugin("TPU")
    assert str(e.value) == ("PJRT_DEVICE=TPU: no PJRT plugin found; searched: "
                            "$TPU_LIBRARY_PATH (unset); Python package 'libtpu' (not installed)")


def test_find_plugin_tpu_library_path(monkeypatch, tmp_path):
    lib = tmp_path / "libtpu.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(lib))
    assert pjrt.find_plugin("tpu") == str(lib)
    monkeypatch.setenv("TPU_LIBRARY_PATH", str(tmp_path / "missing.so"))
    with pytest.raises(RuntimeError, match=r"TPU_LIBRARY_PATH=.*missing.so: no such file"):
        pjrt.find_plugin("TPU")


def test_find_plugin_cuda_nothing_found(monkeypatch):
    if any(pjrt._package_dir(p) for p, _ in pjrt.CUDA_PLUGIN_PACKAGES):
        pytest.skip("a JAX CUDA plugin package is installed here")
    with pytest.raises(RuntimeError) as e:
        pjrt.find_plugin("CUDA")
    assert str(e.value) == (
        "PJRT_DEVICE=CUDA: no PJRT plugin found; searched: Python package "
        "'jax_plugins.xla_cuda13' (not installed); Python package 'jax_plugins.xla_cuda12' "
        "(not installed)")


def test_find_plugin_library(monkeypatch, tmp_path):
    _clear_plugin_env(monkeypatch)
    with pytest.raises(RuntimeError, match=r"PJRT_DEVICE=LIBRARY: no PJRT plugin found; "
                                           r"searched: \$PJRT_LIBRARY_PATH \(unset\)"):
        pjrt.find_plugin("LIBRARY")
    lib = tmp_path / "plugin.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("PJRT_LIBRARY_PATH", str(lib))
    assert pjrt.find_plugin("LIBRARY") == str(lib)


def _run(code, env_extra, drop=()):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_pjrt_device_tpu_without_plugin_names_searched_places():
    if pjrt._package_dir("libtpu") is not None:
        pytest.skip("the libtpu package is installed here")
    r = _run("import torch_xla; torch_xla.devices()", {"PJRT_DEVICE": "TPU"},
             drop=("TPU_LIBRARY_PATH",))
    assert r.returncode != 0
    assert ("RuntimeError: PJRT_DEVICE=TPU: no PJRT plugin found; searched: $TPU_LIBRARY_PATH "
            "(unset); Python package 'libtpu' (not installed)") in r.stderr


def test_pjrt_device_library_loads_the_plugin(tmp_path):
    # The engine runs through PJRT_LIBRARY_PATH's plugin (tests/python/
    # test_pjrt_engine.py); a file that is not one fails loading it.
    lib = tmp_path / "plugin.so"
    lib.write_bytes(b"")
    r = _run("import torch_xla; torch_xla.devices()",
             {"PJRT_DEVICE": "LIBRARY", "PJRT_LIBRARY_PATH": str(lib)})
    assert r.returncode != 0
    assert f"RuntimeError: PJRT plugin {lib} could not be loaded" in r.stderr


# ---- with XLA's CPU plugin --------------------------------------------------

@pytest.fixture(scope="module")
def client():
    return pjrt.Client(CPU_PLUGIN, {"cpu_device_count": 2})


ADD_F32 = """
func.func @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
"""

MATMUL_AND_SCALE = """
func.func @main(%a: tensor<4x5xf32>, %b: tensor<5x3xf32>) -> (tensor<4x3xf32>, tensor<4x5xf32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0]
         : (tensor<4x5xf32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  %c = stablehlo.constant dense<2.5> : tensor<4x5xf32>
  %1 = stablehlo.multiply %a, %c : tensor<4x5xf32>
  return %0, %1 : tensor<4x3xf32>, tensor<4x5xf32>
}
"""


@needs_plugin
def test_client_and_devices(client):
    assert client.platform_name == "cpu"
    major, minor = client.api_version
    assert major == 0 and minor >= 81
    assert client.devices() == [{"index": 0, "id": 0, "kind": "cpu"},
                                {"index": 1, "id": 1, "kind": "cpu"}]


@needs_plugin
def test_create_option_sets_device_count():
    c = pjrt.Client(CPU_PLUGIN, {"cpu_device_count": 3})
    assert [d["id"] for d in c.devices()] == [0, 1, 2]


@needs_plugin
def test_add_matches_numpy(client):
    exe = client.compile(ADD_F32)
    assert exe.num_outputs == 1
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    (out,) = exe.run([a, b])
    assert out.dtype == np.float32 and out.shape == (2, 3)
    np.testing.assert_array_equal(out, a + b)


@needs_plugin
def test_matmul_matches_torch(client):
    exe = client.compile(MATMUL_AND_SCALE)
    assert exe.num_outputs == 2
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 5, generator=g)
    b = torch.randn(5, 3, generator=g)
    mm, scaled = exe.run_torch([a, b])
    assert mm.dtype == torch.float32 and mm.shape == (4, 3)
    torch.testing.assert_close(mm, a @ b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scaled, a * 2.5, rtol=0, atol=0)


@needs_plugin
@pytest.mark.parametrize("np_dtype,mlir", [(np.float64, "f64"), (np.int32, "i32"),
                                           (np.int64, "i64"), (np.int8, "i8"),
                                           (np.float16, "f16")])
def test_dtypes_round_trip(client, np_dtype, mlir):
    exe = client.compile(f"""
func.func @main(%a: tensor<5x{mlir}>, %b: tensor<5x{mlir}>) -> tensor<5x{mlir}> {{
  %0 = stablehlo.multiply %a, %b : tensor<5x{mlir}>
  return %0 : tensor<5x{mlir}>
}}""")
    a = np.array([1, -2, 3, 4, 5]).astype(np_dtype)
    b = np.array([2, 3, -1, 0, 7]).astype(np_dtype)
    (out,) = exe.run([a, b])
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out, a * b)


@needs_plugin
def test_bool_and_bfloat16(client):
    exe = client.compile("""
func.func @main(%a: tensor<3xbf16>, %b: tensor<3xbf16>) -> (tensor<3xbf16>, tensor<3xi1>) {
  %0 = stablehlo.add %a, %b : tensor<3xbf16>
  %1 = stablehlo.compare GT, %a, %b : (tensor<3xbf16>, tensor<3xbf16>) -> tensor<3xi1>
  return %0, %1 : tensor<3xbf16>, tensor<3xi1>
}""")
    a = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)
    b = torch.tensor([0.5, 4.0, 1.0], dtype=torch.bfloat16)
    total, greater = exe.run_torch([a, b])
    assert total.dtype == torch.bfloat16
    torch.testing.assert_close(total, a + b, rtol=0, atol=0)
    assert greater.dtype == torch.bool and greater.tolist() == [True, False, True]
    with pytest.raises(TypeError, match="bfloat16, which numpy has no dtype for"):
        exe.run([a, b])


@needs_plugin
def test_scalar_and_empty_tensors(client):
    exe = client.compile("""
func.func @main(%a: tensor<f32>, %b: tensor<0x4xf32>) -> (tensor<f32>, tensor<0x4xf32>) {
  %0 = stablehlo.negate %a : tensor<f32>
  return %0, %b : tensor<f32>, tensor<0x4xf32>
}""")
    neg, empty = exe.run([np.float32(3.25), np.zeros((0, 4), np.float32)])
    assert neg.shape == () and neg == -3.25
    assert empty.shape == (0, 4)


@needs_plugin
def test_portable_executable_runs_on_device_1(client):
    a = np.ones((2, 3), np.float32)
    exe = client.compile(ADD_F32, portable=True)
    (out,) = exe.run([a, a], device=1)
    np.testing.assert_array_equal(out, 2 * a)
    pinned = client.compile(ADD_F32)
    with pytest.raises(RuntimeError, match="compiled for the default device assignment"):
        pinned.run([a, a], device=1)
    with pytest.raises(IndexError, match="device index 5 out of range: the cpu client has 2"):
        exe.run([a, a], device=5)


@needs_plugin
def test_plugin_errors_carry_plugin_message(client):
    with pytest.raises(RuntimeError, match=r"(?s)PJRT_Client_Compile: .*error"):
        client.compile("func.func @main( this is not stablehlo")
    exe = client.compile(ADD_F32)
    a = np.ones((2, 3), np.float32)
    with pytest.raises(RuntimeError, match=r"(?s)PJRT_LoadedExecutable_Execute: .*expected 2"):
        exe.run([a])
    with pytest.raises(RuntimeError, match=r"(?s)PJRT_LoadedExecutable_Execute: .*size"):
        exe.run([a, np.ones((3, 3), np.float32)])


@needs_plugin
def test_transfer_size_mismatch(client):
    exe = client.compile(ADD_F32)
    with pytest.raises(RuntimeError, match=r"8 bytes given for a float32 tensor of 6 elements "
                                           r"\(24 bytes\)"):
        _C.pjrt_execute(exe._handle, [(bytes(8), (2, 3), 0), (bytes(24), (2, 3), 0)])


@needs_plugin
def test_unsupported_output_dtype(client):
    exe = client.compile("""
func.func @main(%a: tensor<3xi32>) -> tensor<3xui32> {
  %0 = stablehlo.convert %a : (tensor<3xi32>) -> tensor<3xui32>
  return %0 : tensor<3xui32>
}""")
    with pytest.raises(NotImplementedError, match="element type 8 .* has no torchtpu dtype"):
        exe.run([np.arange(3, dtype=np.int32)])


@needs_plugin
def test_executable_outlives_client_object():
    c = pjrt.Client(CPU_PLUGIN, {"cpu_device_count": 1})
    exe = c.compile(ADD_F32)
    handle = exe._handle
    del c, exe  # the C executable keeps its client alive
    a = np.full((2, 3), 2, np.float32)
    (data, shape, dtype), = _C.pjrt_execute(handle, [(a, (2, 3), 0), (a, (2, 3), 0)])
    assert shape == (2, 3) and dtype == 0
    np.testing.assert_array_equal(np.frombuffer(data, np.float32).reshape(shape), 2 * a)


# ---- end to end: the engine's StableHLO through the plugin ------------------

E2E_CHILD = """
import numpy as np, torch, torch_xla
from torchtpu import _C, bridge, pjrt
dev = torch_xla.device()
g = torch.Generator().manual_seed(0)
a = torch.randn(4, 5, generator=g)
b = torch.randn(5, 3, generator=g)
xa, xb = a.to(dev), b.to(dev)
torch_xla.sync()
y = torch.relu(xa @ xb) * 2 + 1
text, inputs = _C.stablehlo_emit([bridge.inner_of(y)._h], True)
args = []
for key, kind, dtype, shape, value in inputs:
    np_dtype = pjrt._CODE_NUMPY[dtype]
    if kind == "param":
        args.append(np.frombuffer(value, dtype=np_dtype).reshape(shape))
    else:
        args.append(np.array(value, dtype=np_dtype))
exe = pjrt.Client(pjrt.find_cpu_plugin()).compile(text)
(out,) = exe.run_torch(args)
expected = torch.relu(a @ b) * 2 + 1
torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
torch.testing.assert_close(out, y.cpu(), rtol=1e-5, atol=1e-5)
print("E2E OK", tuple(out.shape))
"""


@needs_plugin
@pytest.mark.skipif(not hasattr(_C, "stablehlo_emit"), reason="no _C.stablehlo_emit in this build")
def test_engine_graph_runs_through_plugin():
    # A child process: a crash in emission or in the plugin fails this test
    # alone, with its output, instead of ending the test session.
    r = _run(E2E_CHILD, {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "E2E OK (4, 3)" in r.stdout
