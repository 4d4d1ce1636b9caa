"""DistributedDataParallel and xm.optimizer_step across 2 torchrun
processes on xla (docs/torch-distributed.md): each rank trains on half of
the global batch; the mean of the ranks' losses at every step and the
final weights must match full-batch training of the same model on CPU in
this process (torchrun_ddp_models.py). One torchrun run, bounded by a
subprocess timeout."""
import json
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
from torchrun_jobs import free_port, job_env  # noqa: E402
sys.path.insert(0, HERE)
import torchrun_ddp_models as models  # noqa: E402


def _reference(name):
    model = models.build(name)
    opt = torch.optim.SGD(model.parameters(), lr=models.LR)
    x, y = models.data(name)
    losses = []
    for _ in range(models.STEPS):
        opt.zero_grad()
        loss = models.loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def test_ddp_and_optimizer_step_match_full_batch(tmp_path):
    env = job_env(
               CPU_NUM_DEVICES="1", DDP_OUT=str(tmp_path), TORCHTPU_COLLECTIVE_TIMEOUT_S="30")
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          f"--master_port={free_port()}", os.path.join(HERE, "torchrun_ddp_worker.py")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    got = [json.load(open(os.path.join(tmp_path, f"{r}.json"))) for r in range(2)]
    assert [g["backend"] for g in got] == ["xla", "xla"]
    assert [g["world"] for g in got] == [2, 2]
    for key, name in (("ddp_mlp", "mlp"), ("ddp_transformer", "transformer"),
                      ("xm_step_mlp", "mlp")):
        losses, weights = _reference(name)
        # Each rank's loss is the mean over its half: their mean is the
        # full batch's.
        mean = np.mean([g[key]["losses"] for g in got], axis=0)
        np.testing.assert_allclose(mean, losses, rtol=1e-4, atol=1e-6, err_msg=key)
        assert losses[-1] < losses[0]  # it trained
        for g in got:
            assert sorted(g[key]["weights"]) == sorted(weights)
            for k, w in weights.items():
                np.testing.assert_allclose(np.array(g[key]["weights"][k]), w, rtol=1e-4,
                                           atol=1e-5, err_msg=f"{key} {k}")
