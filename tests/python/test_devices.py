"""Part 1 of issue 2: devices and the runtime module."""
import os
import subprocess
import sys

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_device_api():
    assert torch_xla.device() == torch.device("xla:0")
    assert torch_xla.device(2) == torch.device("xla:2")
    assert torch_xla.devices() == [torch.device("xla", i) for i in range(4)]
    assert torch_xla.device_count() == 4
    assert torch_xla.real_devices() == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    assert xm.xla_device() == torch.device("xla:0")
    assert xm.xla_device(1) == torch.device("xla:1")
    assert xm.xla_devices() == torch_xla.devices()
    assert xm.xla_device_hw(torch.device("xla:1")) == "CPU"
    assert xm.xla_device_hw("xla:0") == "CPU"
    assert xm.get_ordinal() == 0 and xm.get_local_ordinal() == 0
    assert xm.xrt_world_size() == 1
    assert xm.is_master_ordinal() and xm.is_master_ordinal(local=False)


def test_runtime_module():
    assert xr.device_type() == "CPU"
    assert xr.world_size() == 1
    assert xr.global_ordinal() == 0 and xr.local_ordinal() == 0
    assert xr.global_runtime_device_count() == 4
    assert xr.addressable_device_count() == 4


def test_bad_device_index():
    with pytest.raises(RuntimeError, match="Invalid device index 9"):
        torch_xla.device(9)
    with pytest.raises(RuntimeError, match="xla:7"):
        torch.zeros(2, device="xla:7")


def _run(code, env):
    full = dict(os.environ)
    full.pop("PJRT_DEVICE", None)
    full.pop("CPU_NUM_DEVICES", None)
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_default_backend_and_count():
    r = _run("import torch_xla; print(torch_xla.devices())", {})
    assert r.returncode == 0, r.stderr
    assert "PJRT_DEVICE is not set. Defaulting to using CPU." in r.stderr
    assert r.stderr.count("PJRT_DEVICE is not set") == 1
    assert "[device(type='xla', index=0)]" in r.stdout


def test_cpu_num_devices():
    r = _run("import torch_xla; print(len(torch_xla.devices()))",
             {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "8"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "8"
    assert "PJRT_DEVICE is not set" not in r.stderr


def test_unknown_pjrt_device():
    r = _run("import torch_xla; torch_xla.devices()", {"PJRT_DEVICE": "FOO"})
    assert r.returncode != 0
    assert "RuntimeError: Unknown PJRT_DEVICE 'FOO'" in r.stderr
    assert "accepted values: CPU" in r.stderr
