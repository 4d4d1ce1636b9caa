"""xm.send / xm.recv between the replicas of a launch (torchtpu/point_to_point.py,
docs/collectives.md "Send and recv"): the k-th send on a channel reaches the
k-th recv on it, sends are buffered. The test process has 4 xla devices
(conftest); the 2-device case runs in a fresh interpreter."""
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PATTERNS = textwrap.dedent(r"""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla._internal import pjrt

    def replica():
        d = torch_xla.device()
        i, n = xr.global_ordinal(), xr.world_size()
        out = {}
        # A ring: everyone sends first, then receives (buffered sends).
        v = torch.arange(6, dtype=torch.float32, device=d).reshape(2, 3) + 10 * i
        sent = xm.send(v * 2, channel_id=100 + i)
        out["send_returns"] = sent.cpu()
        target = torch.full((2, 3), -1.0, device=d)
        out["ring"] = xm.recv(target, channel_id=100 + (i - 1) % n).cpu()
        out["target_untouched"] = target.cpu()
        # A pipeline: the first half sends to the second half, other dtypes.
        half = n // 2
        if i < half:
            xm.send(torch.tensor([i, -i], dtype=torch.int64, device=d), channel_id=7 + i)
            xm.send(torch.full((3,), i + 0.5, dtype=torch.bfloat16, device=d), channel_id=7 + i)
        else:
            a = xm.recv(torch.zeros(2, dtype=torch.int64, device=d), channel_id=7 + i - half)
            b = xm.recv(torch.zeros(3, dtype=torch.bfloat16, device=d), channel_id=7 + i - half)
            out["pipe"] = (a.cpu(), b.cpu(), a.dtype, b.dtype)
        # A collective recorded before a recv runs before the recv waits.
        s = xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=d))
        if i == 0:
            out["after_collective"] = xm.recv(torch.zeros(2, device=d), channel_id=55).cpu()
        elif i == n - 1:
            torch_xla.sync()
            xm.send(s * 3, channel_id=55)
        out["s"] = s.cpu()  # every replica runs the all_reduce
        return out

    res = pjrt.run_multiprocess(replica, start_method="fork")
    n = len(res)
    for i, o in res.items():
        torch.testing.assert_close(
            o["send_returns"], (torch.arange(6.).reshape(2, 3) + 10 * i) * 2)
        torch.testing.assert_close(
            o["ring"], (torch.arange(6.).reshape(2, 3) + 10 * ((i - 1) % n)) * 2)
        torch.testing.assert_close(o["target_untouched"], torch.full((2, 3), -1.0))
        if i >= n // 2:
            a, b, da, db = o["pipe"]
            j = i - n // 2
            assert (da, db) == (torch.int64, torch.bfloat16)
            assert a.tolist() == [j, -j]
            assert b.float().tolist() == [j + 0.5] * 3
        torch.testing.assert_close(o["s"], torch.full((2,), float(n)))
    torch.testing.assert_close(res[0]["after_collective"], torch.full((2,), 3.0 * n))
    print("CHECKED", n)
""")


@pytest.mark.parametrize("n", [2, 4])
def test_send_recv_patterns_match_expected(tmp_path, n):
    script = tmp_path / "patterns.py"
    script.write_text(PATTERNS)
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(n),
               PYTHONPATH=os.path.join(ROOT, "python"), TORCHTPU_COLLECTIVE_TIMEOUT_S="30")
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"CHECKED {n}" in p.stdout, p.stdout + p.stderr


def _spawn(fn):
    from torch_xla._internal import pjrt
    return pjrt.spawn_threads(fn)


def test_channel_is_fifo_and_receiver_learns_no_sender():
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    got = {}

    def fn(i):
        d = torch_xla.device()
        if i == 3:
            for k in range(3):
                xm.send(torch.tensor([float(k)], device=d), channel_id=9)
        elif i == 1:
            got[i] = [xm.recv(torch.zeros(1, device=d), channel_id=9).item() for _ in range(3)]

    _spawn(fn)
    assert got == {1: [0.0, 1.0, 2.0]}
    # Outside a launch one replica may send to itself.
    d = torch_xla.device()
    assert xr.world_size() == 1
    xm.send(torch.tensor([4.0, 5.0], device=d), 3)
    assert xm.recv(torch.zeros(2, device=d), 3).cpu().tolist() == [4.0, 5.0]


def test_shape_mismatch_and_bad_arguments():
    import torch_xla
    import torch_xla.core.xla_model as xm
    d = torch_xla.device()
    xm.send(torch.zeros(2, 3, device=d), 11)
    with pytest.raises(RuntimeError, match=r"recv on channel 11: the send carried "
                       r"float32\[2, 3\] but the output is float32\[6\]"):
        xm.recv(torch.zeros(6, device=d), 11)
    with pytest.raises(TypeError, match="expects a tensor on an xla device"):
        xm.send(torch.zeros(2), 1)
    with pytest.raises(TypeError, match="channel_id must be an int"):
        xm.recv(torch.zeros(2, device=d), "1")


def test_recv_without_send_times_out(monkeypatch):
    import torch_xla
    import torch_xla.core.xla_model as xm
    monkeypatch.setenv("TORCHTPU_COLLECTIVE_TIMEOUT_S", "0.5")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"recv on channel 12345 timed out after 0.5 s"):
        xm.recv(torch.zeros(1, device=torch_xla.device()), 12345)
    assert 0.4 < time.monotonic() - t0 < 10


def test_exception_in_a_replica_wakes_a_waiting_recv(monkeypatch):
    import torch_xla
    import torch_xla.core.xla_model as xm
    monkeypatch.setenv("TORCHTPU_COLLECTIVE_TIMEOUT_S", "100")

    def fn(i):
        if i == 2:
            time.sleep(0.2)
            raise ValueError("boom before the send")
        if i == 0:
            xm.recv(torch.zeros(1, device=torch_xla.device()), channel_id=77)

    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"\[ordinal 2\] boom before the send"):
        _spawn(fn)
    assert time.monotonic() - t0 < 30  # woken, not timed out


def test_send_recv_across_torchrun_processes(tmp_path):
    import json
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PJRT_", "XLA_", "TORCHTPU_", "TORCHELASTIC_"))
           and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                         "MASTER_ADDR", "MASTER_PORT", "CPU_NUM_DEVICES")}
    env.update(PYTHONPATH=os.path.join(ROOT, "python"), PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1",
               P2P_OUT=str(tmp_path), TORCHTPU_COLLECTIVE_TIMEOUT_S="30")
    worker = os.path.join(ROOT, "tests", "python", "torchrun_send_recv_worker.py")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                        f"--master_port={port}", worker], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    got = [json.load(open(tmp_path / f"{r}.json")) for r in range(2)]
    assert got[0]["ring"] == [10.0, 11.0, 12.0, 13.0]
    assert got[1]["ring"] == [0.0, 1.0, 2.0, 3.0]
    assert got[1]["fifo"] == [[[1, 1], [1, 1]], [[2, 2], [2, 2]]]
    assert [g["dist"] for g in got] == [[1.0], [0.0]]
