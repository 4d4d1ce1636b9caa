"""The cross-process transport's selection (TORCHTPU_PROCESS_TRANSPORT,
docs/collectives.md "Several processes"): the C++ extension over c10d by
default (it must be built here, so a broken build shows up as a failure
rather than a silent fallback), the Python transport on request, and both
give the same values and the same mismatch message under torchrun."""
import json
import os
import sys

import pytest

from torchtpu import process_transport

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_torchrun_collectives import _torchrun  # noqa: E402

WORKER = os.path.join(HERE, "torchrun_transport_kind_worker.py")


def test_choice(monkeypatch):
    from torchtpu import _c10d_transport
    monkeypatch.delenv("TORCHTPU_PROCESS_TRANSPORT", raising=False)
    assert process_transport._shim() is _c10d_transport
    monkeypatch.setenv("TORCHTPU_PROCESS_TRANSPORT", "c10d")
    assert process_transport._shim() is _c10d_transport
    monkeypatch.setenv("TORCHTPU_PROCESS_TRANSPORT", "python")
    assert process_transport._shim() is None
    monkeypatch.setenv("TORCHTPU_PROCESS_TRANSPORT", "mpi")
    with pytest.raises(ValueError, match="must be c10d or python, got 'mpi'"):
        process_transport._shim()


@pytest.mark.parametrize("choice", ["", "python"])
def test_torchrun(tmp_path, monkeypatch, choice):
    import test_torchrun_collectives as t
    monkeypatch.setattr(t, "WORKER", WORKER)
    env = {"KIND_OUT": str(tmp_path)}
    if choice:
        env["TORCHTPU_PROCESS_TRANSPORT"] = choice
    res = _torchrun("kind", tmp_path, timeout=90, env_extra=env)
    assert res.returncode == 0, res.stderr[-3000:]
    for r in range(2):
        with open(tmp_path / f"{r}.json") as f:
            got = json.load(f)
        assert got["kind"] == (choice or "c10d")
        assert got["sum"] == [3.0, 6.0, 9.0]
        assert got["requests"].get("all_reduce") == 1
        # Only the C++ transport counts in the extension.
        assert got["shim_requests"] == ({} if choice == "python" else {"all_reduce": 1})
        assert "collective mismatch across processes on group [0, 1]: " in got["mismatch"]
        assert "issued all_reduce(float32, 8, sum) #1 but device 0 (process 0) issued " \
               "all_reduce(float32, 4, sum) #1" in got["mismatch"]
