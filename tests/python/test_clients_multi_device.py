"""The client libraries on several xla devices (CPU_NUM_DEVICES=2, the CPU
backend's virtual devices), each launched as the library launches
multi-device XLA, in a fresh child process: accelerate through `accelerate
launch --tpu`, transformers' Trainer through xmp.spawn (as its
xla_spawn.py), Lightning through Trainer(accelerator="tpu", devices=2).

Data-parallel training over 2 replicas of per-device batch 4 must equal
single-device training with the global batch of 8: every replica's rows
are checked, the replicas' mean loss per step is the full batch's loss,
and the final weights equal the reference's (float32 rounding: the
averaged gradient sums in another order). The runs are in
client_multi_device_workloads.py and client_multi_device_lightning.py."""
import json
import os
import subprocess
import sys

import pytest
import torch

import client_multi_device_workloads as w

HERE = os.path.dirname(os.path.abspath(__file__))
ACCELERATE = os.path.join(os.path.dirname(sys.executable), "accelerate")


def _run(argv, out_dir, timeout=120):
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "USE_TORCH_XLA")}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2")
    r = subprocess.run(argv, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    return {name[:-5]: json.load(open(os.path.join(out_dir, name)))
            for name in os.listdir(out_dir) if name.endswith(".json")}


def _close(got, want, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64),
                               torch.tensor(want, dtype=torch.float64), rtol=rtol, atol=atol)


def _params_close(got, want):
    assert len(got) == len(want) == 4
    for g, r in zip(got, want):
        _close(g, r)


def test_accelerate_launch_tpu_two_devices_matches_full_batch(tmp_path):
    got = _run([ACCELERATE, "launch", "--tpu", "--main_training_function", "accelerate_main",
                "client_multi_device_workloads.py", str(tmp_path)], str(tmp_path))
    r0, r1 = got["rank0"], got["rank1"]
    assert [r0["process_index"], r1["process_index"]] == [0, 1]
    assert r0["num_processes"] == r1["num_processes"] == 2
    assert (r0["device"], r1["device"]) == ("xla:0", "xla:1")
    assert r0["distributed_type"] == "DistributedType.XLA" and r0["fork_launched"] is True
    assert (r0["is_main_process"], r1["is_main_process"]) == (True, False)
    # accelerate's sharding: replica i gets batches i, i+2, ... of the
    # loader (batch 4), so each step's global batch is 8 consecutive rows.
    assert r0["rows"] == [list(range(s, s + 4)) for s in range(0, 32, 8)]
    assert r1["rows"] == [list(range(s + 4, s + 8)) for s in range(0, 32, 8)]
    ref = w.reference_sgd([list(range(s, s + 8)) for s in range(0, 32, 8)], lr=0.1)
    _close([(a + b) / 2 for a, b in zip(r0["losses"], r1["losses"])], ref["losses"])
    assert r0["losses"] != r1["losses"]
    # Gradients were averaged: both replicas hold the full-batch weights.
    assert r0["params"] == r1["params"]
    _params_close(r0["params"], ref["params"])
    for r in (r0, r1):
        assert r["gathered"] == r0["losses"] + r1["losses"]
        _close(r["reduced_sum"], [a + b for a, b in zip(r0["losses"], r1["losses"])])
        _close(r["reduced_mean"], [(a + b) / 2 for a, b in zip(r0["losses"], r1["losses"])])
        assert r["broadcast"] == [11.0, 11.0]   # process 1's tensor, on both
        # save_state: the main process writes the model and optimizer once,
        # each process its RNG states; load_state restores on both.
        assert r["saved_files"] == ["optimizer.bin", "pytorch_model.bin",
                                    "random_states_0.pkl", "random_states_1.pkl"]
        assert r["restored"] is True
    # pad_across_processes: lengths 1 and 2 padded to 2 with pad_index -1.
    assert r0["padded"] == [1.0, -1.0] and r1["padded"] == [1.0, 1.0]
    saved = torch.load(os.path.join(tmp_path, "state", "pytorch_model.bin"))
    _params_close([t.flatten().tolist() for t in saved.values()], ref["params"])


def test_trainer_two_devices_matches_one_device_same_global_batch(tmp_path):
    got = _run([sys.executable, "-c", "import sys, client_multi_device_workloads as w; "
                "w.trainer_main(sys.argv[1])", str(tmp_path)], str(tmp_path))
    r0, r1, single = got["rank0"], got["rank1"], got["single"]
    assert (r0["device"], r1["device"], single["device"]) == ("xla:0", "xla:1", "xla:0")
    assert (r0["world_size"], r1["world_size"], single["world_size"]) == (2, 2, 1)
    assert (r0["process_index"], r1["process_index"]) == (0, 1)
    # Logged losses are the mean over replicas (Trainer gathers them), one
    # per step: 32 rows, global batch 8.
    assert len(r0["losses"]) == len(single["losses"]) == 4
    assert r0["losses"] == r1["losses"]
    assert all(l == l and 0 < l < 10 for l in r0["losses"])
    _close(r0["losses"], single["losses"], rtol=1e-5)
    _close([r0["eval_loss"]], [single["eval_loss"]], rtol=1e-5)
    assert r0["weight_sum"] == r1["weight_sum"]
    _close([r0["weight_sum"]], [single["weight_sum"]], rtol=1e-6)


def test_lightning_tpu_two_devices_matches_full_batch(tmp_path):
    got = _run([sys.executable, "-c", "import sys, client_multi_device_lightning as w; "
                "w.lightning_main(sys.argv[1], 2)", str(tmp_path)], str(tmp_path))
    r0, r1, main = got["rank0"], got["rank1"], got["main"]
    assert (main["accelerator"], main["strategy"], main["num_devices"]) == \
        ("XLAAccelerator", "XLAStrategy", 2)
    assert (r0["global_rank"], r1["global_rank"]) == (0, 1)
    assert r0["world_size"] == r1["world_size"] == 2
    assert (r0["device"], r1["device"]) == ("xla:0", "xla:1")
    # Lightning's DistributedSampler (shuffled for training, seed 0): the
    # rows each replica got are the sampler's, and together cover the data.
    dataset = torch.utils.data.TensorDataset(torch.arange(32))
    for rank, r in ((0, r0), (1, r1)):
        sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=rank,
                                                      shuffle=True, seed=0)
        assert sum(r["rows"], []) == list(sampler)
    batches = [a + b for a, b in zip(r0["rows"], r1["rows"])]
    assert sorted(sum(batches, [])) == list(range(32))
    ref = w.reference_sgd(batches, lr=0.05)
    _close([(a + b) / 2 for a, b in zip(r0["losses"], r1["losses"])], ref["losses"])
    assert r0["params"] == r1["params"]
    _params_close(r0["params"], ref["params"])
    # val_loss (sync_dist=True) is the mean over all rows of the trained model.
    _close([main["val_loss"]], [w.reference_mse(ref["params"])], rtol=1e-5)
    # The checkpoint rank 0 wrote holds the trained weights.
    ckpt = torch.load(main["checkpoint"], weights_only=False)["state_dict"]
    _params_close([t.flatten().tolist() for t in ckpt.values()], ref["params"])
    # Lightning copies the weights back into the main process's module from
    # its launcher's strategy, which with several replica threads per
    # process is not the replicas' deep copy (lightning's
    # strategies/launchers/xla.py): the module keeps its initial weights, as
    # on PyTorch/XLA with thread replicas. docs/clients.md.
    initial = [p.detach().flatten().tolist() for p in w.regressor().parameters()]
    assert main["params"] == initial
