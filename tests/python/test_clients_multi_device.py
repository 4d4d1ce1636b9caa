"""The client libraries on several xla devices (the CPU backend's virtual
devices, CPU_NUM_DEVICES), each launched as the library launches
multi-device XLA, in a fresh child process: accelerate through `accelerate
launch --tpu` (4 devices) and through notebook_launcher (2 processes of one
device each), transformers' Trainer through xmp.spawn (as its
xla_spawn.py, 2 devices), Lightning through Trainer(accelerator="tpu",
devices=2).

Data-parallel training over n replicas of per-device batch 4 must equal
single-device training with the global batch of 4n: every replica's rows
are checked, the replicas' mean loss per step is the full batch's loss,
and the final weights equal the reference's (float32 rounding: the
averaged gradient sums in another order). The runs are in
client_multi_device_workloads.py and client_multi_device_lightning.py.
Also: every replica of a launch runs on a thread of its own (accelerate
keeps its state per thread)."""
import json
import os
import subprocess
import sys

import torch

import client_multi_device_workloads as w

HERE = os.path.dirname(os.path.abspath(__file__))
ACCELERATE = os.path.join(os.path.dirname(sys.executable), "accelerate")


def _run(argv, out_dir, devices=2, timeout=120):
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "USE_TORCH_XLA")}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
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


def _check_accelerate(got, n, launched_by_xmp):
    ranks = [got[f"rank{i}"] for i in range(n)]
    assert len(got) == n
    assert [r["process_index"] for r in ranks] == list(range(n))
    assert all(r["num_processes"] == n for r in ranks)
    assert all(r["distributed_type"] == "DistributedType.XLA" for r in ranks)
    assert [r["is_main_process"] for r in ranks] == [True] + [False] * (n - 1)
    if launched_by_xmp:
        # One process, a replica thread per device. accelerate reads the
        # local index from LOCAL_RANK unless the device type is TPU, so it
        # is -1 in every replica (as with PyTorch/XLA on a CPU host).
        assert [r["device"] for r in ranks] == [f"xla:{i}" for i in range(n)]
        assert all(r["fork_launched"] and r["local_process_index"] == -1 for r in ranks)
    else:
        # A process per replica (torchrun's environment), one device each.
        assert all(r["device"] == "xla:0" for r in ranks)
        assert [r["local_process_index"] for r in ranks] == list(range(n))
    # accelerate's sharding: replica i gets batches i, i+n, ... of the
    # loader (batch 4), so each step's global batch is 4n consecutive rows.
    for i, r in enumerate(ranks):
        assert r["rows"] == [list(range(s + 4 * i, s + 4 * i + 4)) for s in range(0, 32, 4 * n)]
    ref = w.reference_sgd([list(range(s, s + 4 * n)) for s in range(0, 32, 4 * n)], lr=0.1)
    per_step = list(zip(*[r["losses"] for r in ranks]))
    _close([sum(v) / n for v in per_step], ref["losses"])
    assert len(set(per_step[0])) == n   # each replica's own rows
    # Gradients were averaged: every replica holds the full-batch weights.
    assert all(r["params"] == ranks[0]["params"] for r in ranks)
    _params_close(ranks[0]["params"], ref["params"])
    for r in ranks:
        assert r["gathered"] == sum((q["losses"] for q in ranks), [])
        _close(r["reduced_sum"], [sum(v) for v in per_step])
        _close(r["reduced_mean"], [sum(v) / n for v in per_step])
        assert r["broadcast"] == [11.0, 11.0]   # process 1's tensor, everywhere
        # save_state: the main process writes the model and optimizer once,
        # each process its RNG state; load_state restores everywhere.
        assert r["saved_files"] == ["optimizer.bin", "pytorch_model.bin"] + \
            [f"random_states_{i}.pkl" for i in range(n)]
        assert r["restored"] is True
    # pad_across_processes: lengths 1..n padded to n with pad_index -1.
    assert [r["padded"] for r in ranks] == [[1.0] * (i + 1) + [-1.0] * (n - 1 - i)
                                            for i in range(n)]
    return ref


def test_accelerate_launch_tpu_four_devices_matches_full_batch(tmp_path):
    # 4 replica threads here; 2 replicas in the tests below.
    n = 4
    got = _run([ACCELERATE, "launch", "--tpu", "--main_training_function", "accelerate_main",
                "client_multi_device_workloads.py", str(tmp_path)], str(tmp_path), devices=n)
    ref = _check_accelerate(got, n, launched_by_xmp=True)
    saved = torch.load(os.path.join(tmp_path, "state", "pytorch_model.bin"))
    _params_close([t.flatten().tolist() for t in saved.values()], ref["params"])


def test_accelerate_notebook_launcher_two_processes_matches_full_batch(tmp_path):
    got = _run([sys.executable, "-c", "import sys, client_multi_device_workloads as w; "
                "w.notebook_main(sys.argv[1], 2)", str(tmp_path)], str(tmp_path), devices=1)
    _check_accelerate(got, 2, launched_by_xmp=False)


_THREAD_PROBE = """
import json, threading
from torch_xla._internal import pjrt
launches = []
for _ in range(5):
    seen = {}
    def replica(i):
        from accelerate.state import PartialState
        seen[i] = [threading.get_ident(), PartialState().process_index]
    pjrt.spawn_threads(replica)
    launches.append([seen[i] for i in range(4)])
print(json.dumps(launches))
"""


def test_each_replica_its_own_thread_and_accelerate_state():
    # Replicas that end at once (no collective holds them): the launcher's
    # thread pool must still give each its own thread, or accelerate's
    # per-thread state (made by the first replica on that thread) answers
    # for the next one: process_index 0 twice.
    env = {k: v for k, v in os.environ.items() if k != "USE_TORCH_XLA"}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4")
    r = subprocess.run([sys.executable, "-c", _THREAD_PROBE], cwd=HERE, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-4000:]
    launches = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(launches) == 5
    for replicas in launches:
        assert len({ident for ident, _ in replicas}) == 4
        assert [index for _, index in replicas] == [0, 1, 2, 3]


def test_trainer_two_devices_matches_one_device_same_global_batch(tmp_path):
    got = _run([sys.executable, "-c", "import sys, client_multi_device_workloads as w; "
                "w.trainer_main(sys.argv[1])", str(tmp_path)], str(tmp_path))
    r0, r1, single = got["rank0"], got["rank1"], got["single"]
    assert (r0["device"], r1["device"], single["device"]) == ("xla:0", "xla:1", "xla:0")
    assert (r0["world_size"], r1["world_size"], single["world_size"]) == (2, 2, 1)
    assert (r0["process_index"], r1["process_index"]) == (0, 1)
    assert r0["initial_sum"] == r1["initial_sum"] == single["initial_sum"]
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
    for r in (r0, r1):
        # xm.all_gather concatenates along dim 0 (lightning documents a new
        # leading dim; PyTorch/XLA's gives the same concatenation).
        assert r["all_gather"] == [0, 10]
        assert r["all_gather_sync_grads"] == [1.0, 1.0, 2.0, 2.0]
        # xf.all_gather's backward: this replica's slice of its own output
        # gradient (d/dx of sum([1, 2][:, None] * gathered) is 1 + 2).
        assert r["all_gather_grad"] == [3.0, 3.0]
        assert r["broadcast"] == {"from": 1, "rows": r1["rows"][0]}
        assert r["reduce_mean"] == 0.5
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
