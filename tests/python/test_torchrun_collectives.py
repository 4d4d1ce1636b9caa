"""xm collectives across processes under torchrun (docs/collectives.md):
the worker (torchrun_collectives_worker.py) writes what each replica got;
these tests compare it with numpy. Each torchrun run is bounded by a
subprocess timeout."""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "torchrun_collectives_worker.py")


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(mode, out, devices=1, extra=(), timeout=90, env_extra=None):
    # The job's layout comes from torchrun alone: drop what this process (or
    # an in-process launch of an earlier test) set for its own layout.
    inherited = {k: v for k, v in os.environ.items()
                 if not k.startswith(("PJRT_", "XLA_", "TORCHTPU_", "TORCHELASTIC_"))
                 and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                               "MASTER_ADDR", "MASTER_PORT", "CPU_NUM_DEVICES")}
    env = dict(inherited, PYTHONPATH=os.path.join(ROOT, "python"), PJRT_DEVICE="CPU",
               CPU_NUM_DEVICES=str(devices), WORKER_MODE=mode, G31_OUT=str(out),
               TORCHTPU_COLLECTIVE_TIMEOUT_S="20")
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_port()}", *extra, WORKER]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def _inputs(r):
    return np.arange(8, dtype=np.float32).reshape(2, 4) + 100 * r


def _check(out, n, procs, hosts=1):
    L = n // procs
    per_host = procs // hosts
    xs = [_inputs(r) for r in range(n)]
    small = [np.array([1.0, 2.0, 0.5, -1.0], np.float32) + r for r in range(n)]
    bits = [np.array([1 << r, 0xff, 3 + r, 0x10], np.int32) for r in range(n)]
    for r in range(n):
        got = json.load(open(os.path.join(out, f"{r}.json")))
        p = r // L
        local = (p % per_host) * L + r % L
        assert got["facts"] == [n, r, local, p, procs, L, n, p % per_host, per_host]
        np.testing.assert_allclose(got["sum"], sum(xs))
        np.testing.assert_allclose(got["sum_scaled"], sum(xs) * 0.5)
        np.testing.assert_allclose(got["mul"], np.prod(small, axis=0))
        np.testing.assert_allclose(got["min"], np.min(small, axis=0))
        np.testing.assert_allclose(got["max"], np.max(small, axis=0))
        assert got["and"] == list(np.bitwise_and.reduce(bits))
        assert got["or"] == list(np.bitwise_or.reduce(bits))
        i16 = sum(np.array([30000, -5, k], np.int64) for k in range(n))
        assert got["sum_i16"] == list(i16.astype(np.int16))
        np.testing.assert_allclose(got["sum_bf16"], [1.5 * n, sum(2.0 * k for k in range(n))])
        np.testing.assert_allclose(got["gather0"], np.concatenate(xs, 0))
        np.testing.assert_allclose(got["gather1"], np.concatenate(xs, 1))
        full = sum(np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2) + k for k in range(n))
        np.testing.assert_allclose(got["scatter"], full[2 * r:2 * r + 2])
        a2a = np.concatenate([(np.arange(2 * n) + 10 * q)[2 * r:2 * r + 2] for q in range(n)])
        np.testing.assert_allclose(got["a2a"], a2a)
        np.testing.assert_allclose(got["permute"], xs[(r - 1) % n])
        np.testing.assert_allclose(got["broadcast"], xs[n - 1])
        if n == 4:
            np.testing.assert_allclose(got["groups_cross"], xs[r % 2] + xs[r % 2 + 2])
            np.testing.assert_allclose(got["groups_local"], xs[r // 2 * 2] + xs[r // 2 * 2 + 1])
        assert got["rendezvous"] == [f"r{k}" for k in range(n)]
        assert got["mesh"] == float(sum(range(1, n + 1)))
        # The step: SGD on the gradient averaged over the replicas.
        import torch
        model = torch.nn.Linear(4, 1)
        with torch.no_grad():
            model.weight.copy_(torch.arange(4.0).reshape(1, 4) * 0.1)
            model.bias.fill_(0.5)
        grads = []
        for k in range(n):
            model.zero_grad()
            data = torch.arange(8, dtype=torch.float32).reshape(2, 4) * (k + 1)
            model(data).pow(2).mean().backward()
            grads.append((model.weight.grad.clone(), model.bias.grad.clone()))
        w = model.weight.detach() - 0.1 * sum(g[0] for g in grads) / n
        b = model.bias.detach() - 0.1 * sum(g[1] for g in grads) / n
        np.testing.assert_allclose(got["weight"], w.numpy(), rtol=1e-5)
        np.testing.assert_allclose(got["bias"], b.numpy(), rtol=1e-5)


def test_two_processes(tmp_path):
    res = _torchrun("all", tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    _check(tmp_path, 2, 2)


def test_two_processes_two_devices(tmp_path):
    res = _torchrun("all", tmp_path, devices=2)
    assert res.returncode == 0, res.stderr[-3000:]
    _check(tmp_path, 4, 2)


def test_peer_raises(tmp_path):
    res = _torchrun("raise", tmp_path, timeout=60)
    assert res.returncode != 0
    assert "ValueError: worker 1 gives up" in res.stderr
    assert "process 1 failed: ValueError: worker 1 gives up" in res.stderr \
        or "rank      : 1" in res.stderr


def test_mismatched_shape(tmp_path):
    res = _torchrun("mismatch", tmp_path, timeout=60)
    assert res.returncode != 0
    assert "collective mismatch across processes" in res.stderr, res.stderr[-3000:]
    assert "all_reduce(float32, 8, sum)" in res.stderr
    assert "all_reduce(float32, 16, sum)" in res.stderr


def test_two_nodes(tmp_path):
    """Two torchrun agents (--nnodes=2) on this machine, one process each."""
    port = _port()
    # The job's layout comes from torchrun alone: drop what this process (or
    # an in-process launch of an earlier test) set for its own layout.
    inherited = {k: v for k, v in os.environ.items()
                 if not k.startswith(("PJRT_", "XLA_", "TORCHTPU_", "TORCHELASTIC_"))
                 and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                               "MASTER_ADDR", "MASTER_PORT", "CPU_NUM_DEVICES")}
    env = dict(inherited, PYTHONPATH=os.path.join(ROOT, "python"), PJRT_DEVICE="CPU",
               CPU_NUM_DEVICES="1", WORKER_MODE="all", G31_OUT=str(tmp_path),
               TORCHTPU_COLLECTIVE_TIMEOUT_S="20")
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={k}",
         "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={port}", WORKER],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in (0, 1)]
    try:
        outs = [a.communicate(timeout=90) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
    assert [a.returncode for a in agents] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    _check(tmp_path, 2, 2, hosts=2)
