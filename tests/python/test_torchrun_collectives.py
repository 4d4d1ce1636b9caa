"""xm collectives across processes under torchrun (docs/collectives.md):
the worker (torchrun_collectives_worker.py) writes what each replica got;
these tests compare it with numpy. Each torchrun run is bounded by a
subprocess timeout."""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from torchrun_jobs import free_port, job_env, job_processes  # noqa: E402
WORKER = os.path.join(HERE, "torchrun_collectives_worker.py")


def _torchrun(mode, out, devices=1, extra=(), timeout=90, env_extra=None, args=()):
    # The job's layout comes from torchrun alone: drop what this process (or
    # an in-process launch of an earlier test) set for its own layout.
    env = job_env(
               CPU_NUM_DEVICES=str(devices), WORKER_MODE=mode, G31_OUT=str(out),
               TORCHTPU_COLLECTIVE_TIMEOUT_S="20")
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={free_port()}", *extra, WORKER, *args]
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
    _check_traffic(tmp_path, 2, 2)


def test_two_processes_two_devices(tmp_path):
    res = _torchrun("all", tmp_path, devices=2)
    assert res.returncode == 0, res.stderr[-3000:]
    _check(tmp_path, 4, 2)
    _check_traffic(tmp_path, 4, 2)


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
    port = free_port()
    # The job's layout comes from torchrun alone: drop what this process (or
    # an in-process launch of an earlier test) set for its own layout.
    env = job_env(
               CPU_NUM_DEVICES="1", WORKER_MODE="all", G31_OUT=str(tmp_path),
               TORCHTPU_COLLECTIVE_TIMEOUT_S="20")
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={k}",
         "--nproc_per_node=1", "--master_addr=127.0.0.1", f"--master_port={port}", WORKER],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True) for k in (0, 1)]
    try:
        # Two agents must meet in torchrun's rendezvous first: generous on a
        # loaded machine (about 5 s when idle).
        outs = [a.communicate(timeout=240) for a in agents]
    except subprocess.TimeoutExpired:
        for a in agents:  # each agent and its worker
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
        outs = [a.communicate() for a in agents]
        pytest.fail("two-node job did not finish in 240 s:\n" + "\n".join(
            o[0][-1500:] + o[1][-2500:] for o in outs))
    assert [a.returncode for a in agents] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    _check(tmp_path, 2, 2, hosts=2)
    _check_traffic(tmp_path, 2, 2)


def _check_traffic(out, n, procs):
    L = n // procs
    I = 4 << 20  # bytes of one member's input in the traffic ops
    for r in range(n):
        got = json.load(open(os.path.join(out, f"traffic{r}.json")))
        ts = [np.arange(n * 3 * n, dtype=np.float32).reshape(n, 3 * n) + 1000 * q for q in range(n)]
        np.testing.assert_allclose(got["a2a_2d"], np.concatenate([t[:, 3 * r:3 * r + 3] for t in ts]))
        ts = [np.arange(4 * n, dtype=np.float32).reshape(2, 2 * n) * (1 - 2 * (q % 2)) + q
              for q in range(n)]
        np.testing.assert_allclose(got["rs_max_dim1"], np.max(ts, 0)[:, 2 * r:2 * r + 2])
        np.testing.assert_allclose(got["rs_bf16"], [0.5 * sum(range(1, n + 1)),
                                                    1.25 * sum(range(1, n + 1))])
        assert got["rs_i32_mul"] == [int(np.prod([3 * (q + 1) for q in range(n)])),
                                     int(np.prod([-1 * (q + 1) for q in range(n)]))]
        want = {n - 1: _inputs(0), 0: _inputs(1)}.get(r, np.zeros((2, 4), np.float32))
        np.testing.assert_allclose(got["permute_partial"], want)
        assert got["rs_big_sum"] == (1 << 20) / n * sum(range(1, n + 1))
        total = sum(range(n))
        assert got["list0"] == [n + total] * 3
        assert got["list1"] == [[10.0 * total] * 2] * 2
        assert got["list2"] == [total, n]
        assert got["list3"] == [-float(n)]
        # float32 and int32: two requests on the process's transport (not 4).
        assert got["list_requests"] == 2
        if r % L:
            continue
        p = r // L
        # What each process must send: reduce_scatter the other process's
        # L blocks of the locally reduced input (I / 2), all_to_all what its
        # L members send the other process's L members (L * I / 2), the
        # one-way permute 0 -> n-1 one input from process 0, none from 1.
        # The old path (all_reduce / all_gather, then pick) sent I, L * I
        # and L * I.
        ideal = {"reduce_scatter": I // 2, "all_to_all": L * I // 2,
                 "collective_permute": I if p == 0 else 0}
        for name, want_bytes in ideal.items():
            assert got[f"counter_{name}"] == want_bytes, (name, r, got[f"counter_{name}"])
            wrote = got[f"wchar_{name}"]
            assert 0.95 * want_bytes <= wrote <= 1.15 * want_bytes + (64 << 10), \
                (name, r, wrote, want_bytes)


def _failing_run(mode, tmp_path, timeout_s, **env):
    import time
    import uuid
    tag = f"job-{uuid.uuid4().hex}"
    t0 = time.monotonic()
    res = _torchrun(mode, tmp_path, timeout=60, args=(tag,),
                    env_extra=dict(TORCHTPU_COLLECTIVE_TIMEOUT_S=str(timeout_s), **env))
    elapsed = time.monotonic() - t0
    time.sleep(0.5)  # let the kernel reap what torchrun stopped
    assert job_processes(tag) == [], "processes left behind"
    return res, elapsed


def test_stalled_peer_named(tmp_path):
    """Process 1 sleeps past the deadline: process 0's all_reduce fails
    naming it, after about the deadline, and torchrun exits non-zero
    (stopping the sleeper)."""
    res, elapsed = _failing_run("stall", tmp_path, 3, STALL_S="40")
    assert res.returncode != 0
    assert "all_reduce(float32, 4, sum) #0 on group [0, 1] across processes [0, 1] failed: " \
        "timed out after 3 s (TORCHTPU_COLLECTIVE_TIMEOUT_S) waiting for process(es) 1" \
        in res.stderr, res.stderr[-3000:]
    assert elapsed < 30  # well before the sleeper would wake (40 s)


def test_peer_exits_peers_fail_fast(tmp_path):
    """Process 1 ends (status 0, so torchrun does not stop process 0):
    process 0's next all_reduce fails on its own within seconds, far
    before the 60 s deadline, and the job exits non-zero."""
    res, elapsed = _failing_run("exit", tmp_path, 60)
    assert res.returncode != 0
    assert "all_reduce(float32, 4, sum) #1 on group [0, 1] across processes [0, 1] failed: " \
        "a peer process is gone or unreachable" in res.stderr, res.stderr[-3000:]
    import re
    took = [float(x) for x in re.findall(r"collective ended after ([0-9.]+) s", res.stderr)]
    assert took and max(took) < 10, took
    assert elapsed < 45


def test_peer_killed_job_fails(tmp_path):
    """Process 1 is killed (SIGKILL): the job exits non-zero within
    seconds, naming the signal, with the deadline at 60 s."""
    res, elapsed = _failing_run("kill", tmp_path, 60)
    assert res.returncode != 0
    assert "Signal 9 (SIGKILL) received by PID" in res.stderr or "SIGKILL" in res.stderr, \
        res.stderr[-3000:]
    assert elapsed < 45


def test_exit_before_any_collective_is_clean(tmp_path):
    # A process that starts the runtime and exits at once (PyTorch/XLA's
    # test_mp_early_exit.py on a non-TPU device) leaves while its eager Gloo
    # connect may still run: the exit must wait for it, not abort.
    for attempt in range(3):
        r = _torchrun("quit", tmp_path / f"quit{attempt}.json")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        # The two workers share torchrun's stdout: their lines may run together.
        assert sorted(re.findall(r"quit \d of \d", r.stdout)) == [
            "quit 0 of 2", "quit 1 of 2"], r.stdout
