"""Installing torchtpu (the torch_xla distribution) must not break programs
that do not use it, and clients must find PyTorch/XLA where they look: the
distribution's metadata (importlib.metadata, lightning's RequirementCache),
torch_xla.version, the probe modules, and the client libraries' imports and
device choice with PJRT_DEVICE unset and set. Client imports run in child
processes with a clean environment (what a program starting fresh sees)."""
import importlib.metadata
import os
import pathlib
import re
import sys
import tomllib

import pytest
import torch
from packaging.version import Version

import torch_xla
import torch_xla.version

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _clean_env(**env):
    """os.environ without the variables that select or size xla devices."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "USE_TORCH_XLA", "XLA_USE_BF16")}
    e.update(env)
    return e


def _run_clean(code, **env):
    import json
    import subprocess
    r = subprocess.run([sys.executable, "-c", code], env=_clean_env(**env), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------ metadata
def test_distribution_version_is_the_api_level():
    v = importlib.metadata.version("torch_xla")
    assert v == torch_xla.__version__ == torch_xla.version.__version__ == "2.9.0+torchtpu0.1.0"
    assert Version(v).release == (2, 9, 0) and Version(v).local == "torchtpu0.1.0"
    # What the clients compare: transformers' XLA_FSDPV2_MIN_VERSION (2.2.0),
    # lightning's >= 1.13 / 2.1 / 2.5; a local label sorts after the release.
    assert Version(v) >= Version("2.9.0") and Version(v) < Version("2.10")


def test_requirement_checks_lightning_makes():
    from lightning_utilities.core.imports import RequirementCache, package_available
    assert package_available("torch_xla")
    assert bool(RequirementCache("torch_xla>=1.13", "torch_xla"))
    assert bool(RequirementCache("torch_xla>=2.1")) and bool(RequirementCache("torch_xla>=2.5"))
    assert not bool(RequirementCache("torch_xla>=2.10"))
    assert bool(RequirementCache("torch_xla==2.9.0"))


def test_pyproject_and_source_tree_metadata_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["name"] == "torch_xla"
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "torch_xla.version.__version__"}
    assert "torch==2.13.*" in project["project"]["dependencies"]
    dist_infos = sorted(p.name for p in (ROOT / "python").glob("*.dist-info"))
    assert dist_infos == [f"torch_xla-{torch_xla.__version__}.dist-info"]
    meta = (ROOT / "python" / dist_infos[0] / "METADATA").read_text()
    assert re.search(r"^Version: (.*)$", meta, re.M).group(1) == torch_xla.__version__
    reqs = importlib.metadata.requires("torch_xla")
    extras = [f'{r}; extra == "{name}"'
              for name, rs in project["project"]["optional-dependencies"].items() for r in rs]
    assert sorted(reqs) == sorted(project["project"]["dependencies"] + extras)
    assert importlib.metadata.packages_distributions()["torch_xla"] == ["torch_xla"]


def test_dynamo_backend_entry_point():
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    ours = [e for e in eps if e.name == "torchtpu"]
    assert len(ours) == 1 and ours[0].value == "torchtpu.dynamo:torchtpu_backend"
    assert ours[0].dist.name == "torch_xla"


def test_version_module_attributes():
    v = torch_xla.version
    assert v.__torch_gitrev__ == torch.version.git_version and len(v.__torch_gitrev__) == 40
    assert v.__xla_gitrev__ == "torchtpu-0.1.0" and v.__torchtpu_version__ == "0.1.0"


# ------------------------------------------------------------ probes
def test_tpu_probes_in_this_process():
    from torch_xla._internal import tpu
    import torch_xla.experimental.tpu as old_tpu
    assert tpu.num_available_chips() == 0 and old_tpu.num_available_chips() == 0
    assert tpu.num_logical_cores_per_chip() == 1
    assert old_tpu.num_available_devices is tpu.num_available_devices
    assert tpu.get_worker_ips() == ["localhost"] and tpu.num_tpu_workers() == 1
    assert tpu.MeshShape.from_string("2,2,1").size == 4
    with pytest.raises(ValueError, match="should be length 3"):
        tpu.MeshShape.from_string("2,2")


def test_tpu_metadata_only_from_variables(monkeypatch):
    from torch_xla._internal import tpu
    monkeypatch.delenv("TPU_SKIP_MDS_QUERY", raising=False)
    with pytest.raises(EnvironmentError, match="Failed to get TPU metadata"):
        tpu.get_tpu_env()
    with pytest.raises(EnvironmentError):
        tpu.version()
    monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    monkeypatch.setenv("TPU_WORKER_ID", "0")
    assert tpu.get_tpu_env()["ACCELERATOR_TYPE"] == "v5litepod-8"
    assert tpu.version() == 5 and tpu.get_tpu_type() == "v5litepod" and tpu.worker_id() == 0
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "weird")
    with pytest.raises(EnvironmentError, match="parse TPU version"):
        tpu.version()


def test_pjrt_probes_in_this_process():
    import torch_xla.experimental.pjrt as old_pjrt
    import torch_xla.distributed.xla_multiprocessing as xmp
    from torch_xla._internal import pjrt
    assert old_pjrt.using_pjrt() is True and old_pjrt.device_type() == "CPU"
    assert old_pjrt.world_size() == 1 and old_pjrt.global_ordinal() == 0
    assert old_pjrt.broadcast_master_param(torch.nn.Linear(2, 2)) is None
    seen = []
    assert xmp.spawn(lambda i, a: seen.append((i, a)), args=("x",), nprocs=1) is None
    assert seen == [(0, "x")]
    # This process has 4 xla devices (conftest): nprocs must be 1, None or 4.
    with pytest.raises(ValueError, match="Unsupported nprocs"):
        pjrt.spawn(print, nprocs=2)
    # A launch runs one thread per device in a new process, which opens the
    # devices itself: this process must not have used them.
    torch_xla.device()
    with pytest.raises(RuntimeError, match="Runtime is already initialized"):
        pjrt.run_multiprocess(print)
    with pytest.raises(RuntimeError, match="Runtime is already initialized"):
        xmp.spawn(print)
    with pytest.raises(RuntimeError, match="Runtime is already initialized"):
        xmp.spawn(print, nprocs=4)


def test_launch_refuses_after_the_runtime_started(monkeypatch):
    from torch_xla._internal import pjrt, tpu
    torch_xla.device()
    monkeypatch.setattr(tpu, "num_available_devices", lambda: 1)
    with pytest.raises(RuntimeError, match="Runtime is already initialized"):
        pjrt.run_multiprocess(print)


# ----------------------------------------------- clients, fresh processes
CLIENTS_UNSET = r"""
import json, os
from torchtpu import config
from accelerate import Accelerator
from accelerate.utils import is_torch_xla_available as acc_xla
from transformers import Trainer
from transformers.utils import is_torch_xla_available as tf_xla
import lightning
import torch, torch.distributed as dist, torch.distributed.tensor as dt
from torch.distributed.device_mesh import init_device_mesh
t = lightning.Trainer(accelerator="auto", devices="auto", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False)
from torch_xla._internal import tpu
out = {"lightning": type(t.accelerator).__name__, "root": str(t.strategy.root_device),
       "acc_xla": acc_xla(), "tf_xla": tf_xla(), "tf_tpu": tf_xla(check_is_tpu=True),
       "runtime_started": config.runtime_initialized()}
counts = {}
for value in ("", "CPU", "cpu", "TPU", "CUDA", "bogus"):
    os.environ["PJRT_DEVICE"] = value
    counts[value] = tpu.num_available_devices()
os.environ["PJRT_DEVICE"] = "CPU"; os.environ["CPU_NUM_DEVICES"] = "3"
counts["CPU*3"] = tpu.num_available_devices()
os.environ["CPU_NUM_DEVICES"] = "zero"
counts["CPU*bad"] = tpu.num_available_devices()
out["counts"] = counts
dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
x = dt.distribute_tensor(torch.arange(6.).reshape(3, 2), init_device_mesh("cpu", (1,)), [dt.Shard(0)])
out["dtensor"] = (x * 2).full_tensor().tolist()
dist.destroy_process_group()
print(json.dumps(out))
"""


def test_clients_with_pjrt_device_unset():
    out = _run_clean(CLIENTS_UNSET)
    # No TPU and no PJRT_DEVICE: lightning picks the CPU, as on a host where
    # PyTorch/XLA is installed without TPUs; probing starts no runtime.
    assert out["lightning"] == "CPUAccelerator" and out["root"] == "cpu"
    assert out["acc_xla"] is True and out["tf_xla"] is True and out["tf_tpu"] is False
    assert out["runtime_started"] is False
    assert out["counts"] == {"": 0, "CPU": 1, "cpu": 1, "TPU": 0, "CUDA": 0, "bogus": 0,
                             "CPU*3": 3, "CPU*bad": 0}
    assert out["dtensor"] == [[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]]


CLIENTS_SET = r"""
import json
import torch.distributed.tensor  # before torch_xla this time
import lightning
from accelerate import Accelerator
from transformers import Trainer
t = lightning.Trainer(accelerator="auto", devices="auto", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False)
from lightning.fabric.accelerators.xla import XLAAccelerator
print(json.dumps({"lightning": type(t.accelerator).__name__, "root": str(t.strategy.root_device),
                  "strategy": type(t.strategy).__name__,
                  "auto_count": XLAAccelerator.auto_device_count()}))
"""


def test_clients_with_pjrt_device_cpu():
    out = _run_clean(CLIENTS_SET, PJRT_DEVICE="CPU")
    # PJRT_DEVICE asks for xla devices: lightning's "auto" takes them.
    assert out == {"lightning": "XLAAccelerator", "root": "xla:0",
                   "strategy": "SingleDeviceXLAStrategy", "auto_count": 1}

