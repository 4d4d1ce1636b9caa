"""SPMD over several processes (docs/spmd.md "Several processes"): torchrun
starts 2 processes x 2 CPU devices (spmd_multiprocess_worker.py) that
form one mesh of the 4 global device ids and train a small MLP
data-parallel and Megatron-style; their losses and final weights must
equal the same training on the CPU in this process. Each job is bounded
by a subprocess timeout, and no process of it may be left afterwards."""
import json
import os
import subprocess
import sys
import time
import uuid

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from torchrun_jobs import free_port, job_env, job_processes  # noqa: E402
WORKER = os.path.join(HERE, "spmd_multiprocess_worker.py")
sys.path.insert(0, HERE)
import spmd_multiprocess_worker as worker  # noqa: E402  (the model and data only)


def _torchrun(out, mode="train", timeout=150):
    env = job_env(
               CPU_NUM_DEVICES="2", WORKER_MODE=mode, G31_OUT=str(out),
               TORCHTPU_COLLECTIVE_TIMEOUT_S="30")
    tag = f"job-{uuid.uuid4().hex}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={free_port()}", WORKER, tag]
    try:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        time.sleep(0.5)  # let the kernel reap what torchrun stopped
        assert job_processes(tag) == [], "processes left behind"
    return res


def _cpu_training(specs):
    """(losses, final weights) of the worker's training on the CPU."""
    model = worker.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in worker.batches():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {n: p.detach().numpy() for n, p in model.named_parameters()}


def test_two_processes_one_mesh_train(tmp_path):
    res = _torchrun(tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    want_losses, want_weights = _cpu_training(None)
    for rank in (0, 1):
        got = json.load(open(os.path.join(tmp_path, f"{rank}.json")))
        assert (got["global"], got["addressable"], got["process_count"]) == (4, 2, 2)
        for run in ("dp", "megatron"):
            np.testing.assert_allclose(got[run]["losses"], want_losses, rtol=1e-5, err_msg=run)
            for name, w in want_weights.items():
                np.testing.assert_allclose(got[run]["weights"][name], w, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{run} {name}")
        x = np.arange(30.0).reshape(10, 3) * 2 + 1
        np.testing.assert_allclose(got["uneven"][0], x)
        np.testing.assert_allclose(got["uneven"][1], x.sum(0))
        x0 = np.arange(48.0).reshape(8, 6)
        np.testing.assert_allclose(got["relaid"][0], x0 * 3)
        # held in the new layout: rows over 'model' (devices 0, 2 | 1, 3)
        assert got["relaid"][1] == ["tiled", [2, 1, 2], [0, 2, 1, 3], True, 4], got["relaid"][1]
        np.testing.assert_allclose(got["cleared"], x0)
        np.testing.assert_allclose(got["loaded"], np.arange(8.0).reshape(4, 2) * 10)
        # Every graph ran partitioned: 3 steps + the weight reads, per run.
        assert got["partitioned"] >= 6 and got["fallback"] == 0, got
        # fc1.weight (16 x 8) over 'model' of the (2, 2) mesh: rows 0:8 on
        # devices 0 and 2, rows 8:16 on 1 and 3; this process holds the
        # shards of its own devices and no other.
        held = {int(p): np.array(v) for p, v in got["megatron"]["fc1_held"].items()}
        assert sorted(held) == [2 * rank, 2 * rank + 1]
        w1 = want_weights["0.weight"]
        for p, v in held.items():
            np.testing.assert_allclose(v, w1[8 * (p % 2):8 * (p % 2) + 8], rtol=1e-5, atol=1e-6)
        missing = got["megatron"]["fc1_missing"]
        assert [p for p, _ in missing] == [2 * (1 - rank), 2 * (1 - rank) + 1]
        assert "is held by another process" in missing[0][1]
        # XLAShardedTensor.local_shards: this process's devices' shards.
        local = got["megatron"]["fc1_local_shards"]
        assert [(d, start) for d, start, _ in local] == \
            [(f"CPU:{2 * rank}", 0), (f"CPU:{2 * rank + 1}", 8)]
        for _, start, v in local:
            np.testing.assert_allclose(v, w1[start:start + 8], rtol=1e-5, atol=1e-6)


def test_mesh_smaller_than_job_refused(tmp_path):
    """A mesh over 2 of the job's 4 devices cannot run: every process runs
    its own devices' partitions. The error names what to do."""
    res = _torchrun(tmp_path, mode="small_mesh", timeout=90)
    assert res.returncode != 0
    assert "SPMD over several processes: a mesh of 2 devices, but the job has 4" in res.stderr, \
        res.stderr[-4000:]
    assert "SIGSEGV" not in res.stderr and "SIGABRT" not in res.stderr, res.stderr[-4000:]


def test_manual_regions_across_processes(tmp_path):
    """Manual regions over 2 processes x 2 devices: an all_reduce of every
    partition's row tile and an all_gather among each mesh row's
    partitions, both crossing the processes, equal the CPU values in both
    processes, partitioned, with no fallback."""
    res = _torchrun(tmp_path, mode="manual", timeout=90)
    assert res.returncode == 0, res.stderr[-4000:]
    x = torch.arange(24.0).reshape(8, 3)
    s = sum(x[2 * p:2 * p + 2] * 0.5 + 1 for p in range(4))
    for rank in (0, 1):
        got = json.load(open(os.path.join(tmp_path, f"{rank}.json")))
        np.testing.assert_allclose(got["summed"], torch.cat([s] * 4).numpy(), rtol=1e-6)
        np.testing.assert_allclose(got["gathered"],
                                   (torch.arange(32.0).reshape(8, 4) * 2).numpy(), rtol=1e-6)
        assert got["partitioned"] >= 1 and got["fallback"] == 0, got
