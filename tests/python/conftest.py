"""Test setup: the CPU backend with 4 virtual devices, in one process."""
import os

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "4")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_xla  # noqa: E402,F401
import torch_xla.debug.metrics as met  # noqa: E402


@pytest.fixture
def dev():
    return torch_xla.device()


@pytest.fixture
def clean_metrics():
    torch_xla.sync(wait=True)
    met.clear_all()
    yield met


def pytest_configure(config):
    # Opt-in suites (deselected unless asked for with -m): the full OpInfo
    # sweep (tests/python/test_opinfo.py) and full-size models
    # (tests/python/test_models.py).
    config.addinivalue_line("markers", "opinfo_full: the full OpInfo sweep (slow)")
    config.addinivalue_line("markers", "models_full: full-size model configurations (slow)")
    config.addinivalue_line("markers", "tpu_aot: compile for a TPU topology with libtpu "
                            "(needs TPU_LIBRARY_PATH; tests/python/test_tpu_aot.py)")


@pytest.fixture
def in_spmd_mode():
    """SPMD mode for one test, switched on here rather than by the test's
    first mark_sharding (so no other test's data on xla:1.. matters; the
    switch itself is tested in fresh interpreters), and the mode and
    XLA_USE_SPMD restored afterwards (later tests' subprocesses inherit the
    environment)."""
    import torch_xla.runtime as xr
    from torchtpu import _C
    before, env = xr._spmd, os.environ.get("XLA_USE_SPMD")
    partitioning, virtual = _C.spmd_partitioning(), _C.spmd_virtual_device()
    xr.use_spmd()
    yield
    xr._spmd = before
    _C.spmd_set_partitioning(partitioning)
    _C.spmd_set_virtual_device(virtual)
    if env is None:
        os.environ.pop("XLA_USE_SPMD", None)
    else:
        os.environ["XLA_USE_SPMD"] = env
