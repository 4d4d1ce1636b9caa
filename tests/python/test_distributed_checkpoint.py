"""torch_xla.experimental.distributed_checkpoint (issue 30): sharded state
saved shard by shard through torch.distributed.checkpoint and restored onto
another mesh or unsharded, CheckpointManager's steps, keep-last-n, async
saves and preemption, a save killed at each stage leaving the previous
checkpoint whole, and the errors of bad restores. 4 CPU devices, SPMD mode
per test (conftest.py)."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import torch_xla
import torch_xla.distributed.spmd as xs
from torch_xla.experimental.distributed_checkpoint import (CheckpointManager, SPMDLoadPlanner,
                                                           SPMDSavePlanner, prime_optimizer)
from torch_xla.experimental.distributed_checkpoint._helpers import (_CpuShards,
                                                                    _sharded_cpu_state_dict)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.usefixtures("in_spmd_mode")


class Net(torch.nn.Module):

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 10)  # weight (10, 6): 10 rows on 4 devices pads
        self.fc2 = torch.nn.Linear(10, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def mesh4():
    return xs.Mesh(np.arange(4), (4,))


def mesh22():
    return xs.Mesh(np.arange(4), (2, 2))


def net_on_mesh4(seed):
    torch.manual_seed(seed)
    m = Net().to("xla")
    xs.mark_sharding(m.fc1.weight, mesh4(), (0, None))   # tiled, last shard short
    xs.mark_sharding(m.fc2.weight, mesh4(), (None, 0))
    xs.mark_sharding(m.fc1.bias, mesh4(), (None,))       # replicated
    return m


def net_on_mesh22(seed):
    torch.manual_seed(seed)
    m = Net().to("xla")
    xs.mark_sharding(m.fc1.weight, mesh22(), (1, 0))     # transposed 2x2 tiling
    xs.mark_sharding(m.fc2.weight, mesh22(), (0, None))  # partially replicated
    return m


def train_step(model, opt):
    model(torch.ones(3, 6, device="xla")).square().sum().backward()
    opt.step()
    torch_xla.sync()


def cpu(x):
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def assert_same(a, b, path=""):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.shape == b.shape and a.dtype == b.dtype, path
        assert torch.equal(cpu(a), cpu(b)), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def snapshot(sd):
    return torch.utils._pytree.tree_map(cpu, sd)


def chunks_of(md, fqn):
    return sorted((tuple(c.offsets), tuple(c.sizes)) for c in md.state_dict_metadata[fqn].chunks)


@pytest.fixture
def process_group(tmp_path_factory):
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", world_size=1, rank=0)
    yield
    dist.destroy_process_group()


# ------------------------------------------------------------- planners
def test_sharded_model_and_optimizer_restore_onto_another_mesh_and_unsharded(tmp_path):
    model = net_on_mesh4(0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    train_step(model, opt)
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    expected = snapshot(state)

    # Record what the planner hands the writer for the sharded weight.
    planner = SPMDSavePlanner()
    written = []
    resolve = planner.resolve_data

    def spy(item):
        data = resolve(item)
        if item.index.fqn == "model.fc1.weight":
            written.append(tuple(data.shape))
        return data

    planner.resolve_data = spy
    md = dcp.save(state, storage_writer=dcp.FileSystemWriter(str(tmp_path)), planner=planner)
    # fc1.weight (10, 6) on 4 devices: shards of ceil(10/4) = 3 rows, the
    # last one short; each written once, none the whole tensor.
    assert chunks_of(md, "model.fc1.weight") == [((0, 0), (3, 6)), ((3, 0), (3, 6)),
                                                 ((6, 0), (3, 6)), ((9, 0), (1, 6))]
    assert sorted(written) == [(1, 6), (3, 6), (3, 6), (3, 6)]
    assert chunks_of(md, "model.fc2.weight") == [((0, c), (4, 3)) for c in (0, 3, 6)] + \
        [((0, 9), (4, 1))]
    # The replicated bias is one chunk.
    assert chunks_of(md, "model.fc1.bias") == [((0,), (10,))]

    # Onto a 2x2 mesh with other shardings and a primed optimizer.
    model2 = net_on_mesh22(1)
    opt2 = prime_optimizer(torch.optim.AdamW(model2.parameters(), lr=0.1))
    state2 = {"model": model2.state_dict(), "optim": opt2.state_dict()}
    assert not torch.equal(cpu(state2["model"]["fc1.weight"]), expected["model"]["fc1.weight"])
    dcp.load(state2, storage_reader=dcp.FileSystemReader(str(tmp_path)), planner=SPMDLoadPlanner())
    assert_same(expected, snapshot(state2))
    model2.load_state_dict(state2["model"])
    opt2.load_state_dict(state2["optim"])
    assert_same(expected["model"], snapshot(model2.state_dict()))
    # The destination keeps its own sharding.
    assert xs.get_sharding_spec(model2.fc1.weight) == "{devices=[2,2]0,2,1,3}"
    assert xs.get_sharding_spec(model2.fc2.weight) == \
        "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"

    # Onto an unsharded CPU model and optimizer.
    torch.manual_seed(2)
    model3 = Net()
    opt3 = torch.optim.AdamW(model3.parameters(), lr=0.1)
    model3(torch.ones(1, 6)).sum().backward()
    opt3.step()
    state3 = {"model": model3.state_dict(), "optim": opt3.state_dict()}
    dcp.load(state3, storage_reader=dcp.FileSystemReader(str(tmp_path)), planner=SPMDLoadPlanner())
    assert_same(expected, snapshot(state3))


def test_partially_replicated_shards_are_written_once_and_loaded_to_every_replica(tmp_path):
    src = torch.arange(40, dtype=torch.float32).reshape(8, 5)
    t = src.to("xla")
    xs.mark_sharding(t, mesh22(), (0, None))    # 2 distinct shards, each on 2 devices
    planner = SPMDSavePlanner()
    planner.set_up_planner({"t": t}, is_coordinator=True)
    plan = planner.create_local_plan()
    assert sorted(tuple(i.index.offset) for i in plan.items) == [(0, 0), (4, 0)]
    dcp.save({"t": t}, storage_writer=dcp.FileSystemWriter(str(tmp_path)),
             planner=SPMDSavePlanner(), no_dist=True)

    dst = torch.zeros(8, 5).to("xla")
    xs.mark_sharding(dst, mesh22(), (0, None))
    dcp.load({"t": dst}, storage_reader=dcp.FileSystemReader(str(tmp_path)),
             planner=SPMDLoadPlanner(), no_dist=True)
    assert torch.equal(dst.cpu(), src)
    shards = xs.wrap_if_sharded(dst).local_shards
    for s in shards:
        assert torch.equal(s.unpadded_data, src[tuple(s.indices)])


def test_empty_shards_are_not_written(tmp_path):
    src = torch.arange(8).reshape(2, 4)
    t = src.to("xla")
    xs.mark_sharding(t, mesh4(), (0, None))  # rows 1, 1, 0, 0
    md = dcp.save({"t": t}, storage_writer=dcp.FileSystemWriter(str(tmp_path)),
                  planner=SPMDSavePlanner())
    assert chunks_of(md, "t") == [((0, 0), (1, 4)), ((1, 0), (1, 4))]
    dst = torch.zeros(2, 4, dtype=torch.int64).to("xla")
    xs.mark_sharding(dst, mesh22(), (1, 0))
    dcp.load({"t": dst}, storage_reader=dcp.FileSystemReader(str(tmp_path)),
             planner=SPMDLoadPlanner())
    assert dst.dtype == torch.int64 and torch.equal(dst.cpu(), src)


def test_global_plan_keeps_each_chunk_in_one_rank():
    t = torch.arange(16.).reshape(4, 4).to("xla")
    xs.mark_sharding(t, mesh4(), (0, None))
    plans = []
    for rank in range(2):  # two ranks holding the same shards and bias
        p = SPMDSavePlanner()
        p.set_up_planner({"t": t, "b": torch.ones(3)}, is_coordinator=rank == 0)
        plans.append(p.create_local_plan())
    global_plans, md = SPMDSavePlanner().create_global_plan(plans)
    kept = [[(i.index.fqn, tuple(i.index.offset)) for i in p.items] for p in global_plans]
    # Every chunk in exactly one plan, the writes shared by bytes.
    assert sorted(kept[0] + kept[1]) == [("b", (0,))] + [("t", (r, 0)) for r in range(4)]
    assert kept == [[("b", (0,)), ("t", (1, 0)), ("t", (3, 0))], [("t", (0, 0)), ("t", (2, 0))]]
    assert len(md.state_dict_metadata["t"].chunks) == 4


def test_sharded_cpu_state_dict_holds_shards_not_the_whole_tensor():
    t = torch.arange(12.).reshape(4, 3).to("xla")
    xs.mark_sharding(t, mesh4(), (0, None))
    r = torch.ones(2).to("xla")
    out = _sharded_cpu_state_dict({"a": {"t": t, "r": r}, "n": 3})
    assert isinstance(out["a"]["t"], _CpuShards) and out["n"] == 3
    assert out["a"]["t"].global_shape == torch.Size([4, 3])
    assert [tuple(s.data.shape) for s in out["a"]["t"].shards] == [(1, 3)] * 4
    assert out["a"]["r"].device.type == "cpu" and torch.equal(out["a"]["r"], torch.ones(2))


# ----------------------------------------------------------------- errors
def test_load_errors_are_torch_checkpoint_errors(tmp_path):
    t = torch.arange(12.).reshape(4, 3).to("xla")
    xs.mark_sharding(t, mesh4(), (0, None))
    dcp.save({"t": t}, storage_writer=dcp.FileSystemWriter(str(tmp_path)),
             planner=SPMDSavePlanner())
    reader = dcp.FileSystemReader(str(tmp_path))

    wrong = torch.zeros(8, 3).to("xla")
    xs.mark_sharding(wrong, mesh4(), (0, None))
    for dst in (wrong, torch.zeros(4, 4)):  # sharded and plain destinations
        with pytest.raises(CheckpointException) as e:
            dcp.load({"t": dst}, storage_reader=reader, planner=SPMDLoadPlanner())
        exc = e.value.failures[0][0]
        assert isinstance(exc, ValueError) and "Size mismatch" in str(exc)

    missing = torch.zeros(4, 3).to("xla")
    xs.mark_sharding(missing, mesh4(), (0, None))
    with pytest.raises(CheckpointException) as e:
        dcp.load({"u": missing}, storage_reader=reader, planner=SPMDLoadPlanner())
    exc = e.value.failures[0][0]
    assert isinstance(exc, RuntimeError) and "Missing key in checkpoint state_dict: u" in str(exc)
    assert torch.equal(missing.cpu(), torch.zeros(4, 3))


def test_manager_refuses_bad_input(tmp_path, process_group):
    mgr = CheckpointManager(str(tmp_path), 10, chkpt_on_preemption=False)
    with pytest.raises(AssertionError, match=r"Cannot restore from untracked step 5"):
        mgr.restore(5, {"x": torch.zeros(2)})
    with pytest.raises(AssertionError, match="save_interval must be positive"):
        CheckpointManager(str(tmp_path), 0, chkpt_on_preemption=False)
    with pytest.raises(NotImplementedError, match="local directory"):
        CheckpointManager("gs://bucket/run", 10, chkpt_on_preemption=False)
    with pytest.raises(AssertionError, match="Preemption detection not enabled"):
        mgr.reached_preemption(1)


def test_manager_needs_a_process_group(tmp_path, monkeypatch):
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    with pytest.raises(AssertionError, match="A process group is required"):
        CheckpointManager(str(tmp_path), 10)


# ---------------------------------------------------------------- manager
def test_manager_steps_keep_last_n_and_restore(tmp_path, process_group):
    mgr = CheckpointManager(str(tmp_path), 10, max_to_keep=2, chkpt_on_preemption=False)
    sd = net_on_mesh4(0).state_dict()
    assert mgr.all_steps() == []
    assert [mgr.save(s, sd) for s in range(1, 10)] == [False] * 9
    assert mgr.all_steps() == []
    for step, kept in ((10, [10]), (20, [10, 20]), (30, [20, 30]), (10, [10, 30])):
        assert mgr.save(step, sd)
        assert mgr.all_steps() == kept
        assert sorted(os.listdir(tmp_path)) == [str(s) for s in sorted(kept)]
    assert mgr.save(7, sd, force=True)  # force ignores the interval
    assert mgr.all_steps() == [7, 10]
    # A new manager sees the same steps and the same oldest-first order.
    mgr2 = CheckpointManager(str(tmp_path), 10, max_to_keep=2, chkpt_on_preemption=False)
    assert mgr2.all_steps() == [7, 10]
    assert mgr2.save(20, sd)
    assert mgr2.all_steps() == [7, 20]  # 10 was older than 7

    dst = net_on_mesh22(5).state_dict()
    mgr2.restore(20, dst)
    assert_same(snapshot(sd), snapshot(dst))


def test_manager_save_async_writes_the_values_of_the_call(tmp_path, process_group):
    mgr = CheckpointManager(str(tmp_path), 10, max_pending_async=2, chkpt_on_preemption=False)
    model = net_on_mesh4(0)
    sd = model.state_dict()
    expected = snapshot(sd)
    assert not mgr.save_async(5, sd)
    assert mgr.save_async(10, sd)
    # The model changes right away; the checkpoint holds the call's values.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    torch_xla.sync()
    assert mgr.save_async(20, model.state_dict())
    mgr.join()
    assert mgr.all_steps() == [10, 20]
    dst = net_on_mesh22(3).state_dict()
    mgr.restore(10, dst)
    assert_same(expected, snapshot(dst))
    mgr.restore(20, dst)
    assert torch.equal(cpu(dst["fc1.weight"]), expected["fc1.weight"] + 1)


def test_manager_checkpoints_at_the_preemption_sync_point(tmp_path, process_group):
    mgr = CheckpointManager(str(tmp_path), 100)
    try:
        sd = net_on_mesh4(0).state_dict()
        assert [mgr.save(s, sd) for s in range(1, 5)] == [False] * 4
        os.kill(os.getpid(), signal.SIGTERM)  # the handler only records it
        assert mgr.save(5, sd)                # off the interval, saved
        assert mgr.all_steps() == [5]
        assert mgr.reached_preemption(5) and not mgr.reached_preemption(6)
        assert not mgr.save(6, sd)
    finally:
        torch_xla._XLAC._deactivate_preemption_sync_manager()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


# ----------------------------------------------------- killed during save
_KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys
    import numpy as np, torch, torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch_xla, torch_xla.runtime as xr, torch_xla.distributed.spmd as xs
    from torch_xla.experimental.distributed_checkpoint import CheckpointManager, step_dirs
    xr.use_spmd()
    base, stage = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", init_method="file://" + base + "-pg", world_size=1, rank=0)
    def state(v):
        t = torch.full((8, 4), float(v)).to("xla")
        xs.mark_sharding(t, xs.Mesh(np.arange(4), (4,)), (0, None))
        return {"w": t, "b": torch.full((3,), float(v)).to("xla")}
    mgr = CheckpointManager(base, 10, chkpt_on_preemption=False)
    mgr.save(10, state(1))
    def die(*_):
        os.kill(os.getpid(), signal.SIGKILL)
    if stage == "write_data":
        real = dcp.FileSystemWriter.write_data
        def hooked(self, *a, **k):
            real(self, *a, **k)   # the shard files are written, then the kill
            die()
        dcp.FileSystemWriter.write_data = hooked
    else:
        step_dirs._commit_hook = lambda s: die() if s == stage else None
    step = 10 if stage in ("moved_aside", "renamed") else 20
    mgr.save(step, state(2))
    print("not killed")
""")


# ------------------------------------------------------ two ranks, gloo
_TWO_RANKS = textwrap.dedent("""
    import os, signal, sys
    import numpy as np, torch, torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch_xla, torch_xla.runtime as xr, torch_xla.distributed.spmd as xs
    from torch_xla.experimental.distributed_checkpoint import CheckpointManager
    xr.use_spmd()
    base, rank = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo", init_method="file://" + base + "-pg", world_size=2,
                            rank=rank)
    w = torch.arange(32.).reshape(8, 4).to("xla")
    xs.mark_sharding(w, xs.Mesh(np.arange(4), (4,)), (0, None))
    mgr = CheckpointManager(base, 10, chkpt_on_preemption=False)
    assert mgr.save(10, {"w": w, "b": torch.arange(3.).to("xla"), "n": {"k": 5}})
    dst = {"w": torch.zeros(8, 4).to("xla"), "b": torch.zeros(3).to("xla"), "n": {"k": 0}}
    xs.mark_sharding(dst["w"], xs.Mesh(np.arange(4), (2, 2)), (1, 0))
    mgr.restore(10, dst)
    ok = torch.equal(dst["w"].cpu(), w.cpu()) and torch.equal(dst["b"].cpu(), torch.arange(3.))
    print("RESULT", rank, mgr.all_steps(), ok, dst["n"], flush=True)
    # A SIGTERM reaching rank 1 only: both ranks save at the same step.
    mgr = CheckpointManager(base, 100)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGTERM)
    print("PREEMPT", rank, mgr.save(3, {"w": w}), mgr.save(4, {"w": w}), mgr.all_steps(),
          flush=True)
    dist.destroy_process_group()
""")


# write_data: inside the storage writer, the shard files written, no
# metadata yet (a new step 20); moved_aside / renamed: a save of step 10
# again, killed just before and just after its commit point.
# stage -> (steps listed afterwards, value of step 10 restored)
_KILL_STAGES = {"write_data": ([10], 1.), "moved_aside": ([10], 1.), "renamed": ([10], 2.)}


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """The subprocesses of the last two tests, started together (each
    spends seconds importing torch): name -> (Popen, its directory)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), PJRT_DEVICE="CPU",
               CPU_NUM_DEVICES="4")
    root = tmp_path_factory.mktemp("children")
    runs = {}

    def start(name, script, *args):
        runs[name] = (subprocess.Popen([sys.executable, "-c", script, *args], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT),
                      str(root / name.split(":")[0]))

    for stage in _KILL_STAGES:
        start(stage, _KILLED_SAVE, str(root / stage), stage)
    for r in range(2):
        start(f"ranks:{r}", _TWO_RANKS, str(root / "ranks"), str(r))
    yield runs
    for p, _ in runs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def test_save_killed_at_each_stage_leaves_the_previous_checkpoint(children, process_group):
    for stage, (steps, value) in _KILL_STAGES.items():
        proc, base = children[stage]
        out = proc.communicate(timeout=120)[0].decode()
        assert proc.returncode == -signal.SIGKILL, (stage, out[-2000:])
        left = sorted(os.listdir(base))
        assert any(n.startswith(".") for n in left) or stage == "renamed", (stage, left)
        mgr = CheckpointManager(base, 10, chkpt_on_preemption=False)
        assert mgr.all_steps() == steps, stage
        assert sorted(os.listdir(base)) == ["10"], stage   # temporaries cleared
        dst = {"w": torch.zeros(8, 4).to("xla"), "b": torch.zeros(3).to("xla")}
        xs.mark_sharding(dst["w"], mesh22(), (None, 1))
        mgr.restore(10, dst)
        assert torch.equal(dst["w"].cpu(), torch.full((8, 4), value)), stage
        assert torch.equal(dst["b"].cpu(), torch.full((3,), value)), stage


def test_two_ranks_write_each_chunk_once_restore_and_agree_on_preemption(children):
    for r in range(2):
        proc, base = children[f"ranks:{r}"]
        out = proc.communicate(timeout=120)[0].decode()
        assert proc.returncode == 0, out[-3000:]
        assert f"RESULT {r} [10] True {{'k': 5}}" in out, out[-3000:]
        assert f"PREEMPT {r} True False [3, 10]" in out, out[-3000:]
    md = dcp.FileSystemReader(os.path.join(base, "10")).read_metadata()
    files = {(k.fqn, tuple(k.offset or ())): v.relative_path for k, v in md.storage_data.items()}
    # Both ranks hold every chunk; each chunk is in one file, both ranks wrote.
    assert sorted(files) == [("b", (0,)), ("n", ())] + [("w", (r, 0)) for r in (0, 2, 4, 6)]
    assert {f[:3] for f in files.values()} == {"__0", "__1"}
    assert sorted(os.listdir(base)) == ["10", "3"]
