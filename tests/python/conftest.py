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
