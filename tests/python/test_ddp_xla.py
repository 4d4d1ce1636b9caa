"""DistributedDataParallel, the functional collectives and c10d's dispatcher
ops on xla (torch_xla/distributed/c10d_xla_kernels.py), and the xla group's
ops over real replicas: each runs in a child process (the default process
group and a launch are process-wide state)."""
import os
import subprocess
import sys
import textwrap


def _run(code, devices=None):
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env.pop("CPU_NUM_DEVICES", None)
    if devices:
        env["CPU_NUM_DEVICES"] = str(devices)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    return [eval(l) for l in r.stdout.splitlines() if l.startswith(("{", "("))]


def test_ddp_mlp_training_matches_cpu():
    out = _run("""
        import torch, torch.nn as nn, torch.distributed as dist, torch_xla
        import torch_xla.distributed.xla_backend
        import torch_xla.debug.metrics as met
        dist.init_process_group("xla", init_method="xla://")
        def train(device, ddp):
            torch.manual_seed(0)
            m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(device)
            if ddp:
                m = nn.parallel.DistributedDataParallel(m)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            g = torch.Generator().manual_seed(1)
            losses = []
            for _ in range(3):
                x = torch.randn(16, 4, generator=g).to(device)
                y = torch.randn(16, 2, generator=g).to(device)
                opt.zero_grad(); loss = ((m(x) - y) ** 2).mean(); loss.backward(); opt.step()
                if device != "cpu":
                    torch_xla.sync()
                losses.append(loss.item())
            return losses, [p.detach().cpu() for p in m.parameters()]
        cl, cp = train("cpu", False)
        xl, xp = train(torch_xla.device(), True)
        print(repr({"cpu": cl, "xla": xl,
                    "diff": max((a - b).abs().max().item() for a, b in zip(cp, xp)),
                    "c10d_fallbacks": [n for n in met.counter_names() if "c10d" in n]}))
    """)[0]
    assert len(out["xla"]) == 3 and out["cpu"][0] != out["cpu"][2]
    assert all(abs(a - b) < 1e-5 for a, b in zip(out["cpu"], out["xla"]))
    assert out["diff"] < 1e-5
    assert out["c10d_fallbacks"] == []


def test_functional_collectives_and_c10d_ops_on_one_replica():
    out = _run("""
        import torch, torch.distributed as dist, torch_xla
        import torch_xla.distributed.xla_backend
        import torch.distributed._functional_collectives as fc
        import torch_xla.debug.metrics as met
        dist.init_process_group("xla", init_method="xla://")
        dev = torch_xla.device(); W = dist.group.WORLD; gn = W.group_name
        F = torch.ops._c10d_functional
        t = torch.arange(4., device=dev) + 1
        r = {}
        r["fc_ar"] = fc.all_reduce(t, "sum", W)
        r["text"] = "all_reduce" in torch_xla._XLAC._get_xla_tensors_text([r["fc_ar"]])
        r["ag"] = F.all_gather_into_tensor(t * 2, 1, gn)
        r["rs"] = F.reduce_scatter_tensor(t * 3, "sum", 1, gn)
        r["bc"] = F.broadcast(t * 4, 0, gn)
        r["a2a"] = F.all_to_all_single(t * 5, [4], [4], gn)
        r["wait"] = F.wait_tensor(F.all_reduce(t * 6, "max", gn))
        x = t * 7; F.all_reduce_(x, "sum", gn); r["ar_"] = x
        o = torch.zeros(4, device=dev); F.all_gather_into_tensor_out(t * 8, 1, gn, out=o); r["agout"] = o
        r["c10d_ar"] = torch.ops.c10d.allreduce_([t * 9], W.boxed(), torch.classes.c10d.ReduceOp(), None, False, -1)[0][0]
        r["c10d_agb"] = torch.ops.c10d._allgather_base_(torch.zeros(4, device=dev), t * 10, W.boxed(), False, -1)[0]
        res = {k: (v if isinstance(v, bool) else (type(v).__name__, v.device.type, v.cpu().tolist())) for k, v in r.items()}
        for name, fn in [("split", lambda: F.all_to_all_single(t, [3, 1], [3, 1], gn)),
                         ("op", lambda: F.all_reduce(t, "bxor", gn)),
                         ("size", lambda: F.all_gather_into_tensor(t, 2, gn))]:
            try:
                fn(); res[name] = None
            except Exception as e:
                res[name] = type(e).__name__
        res["fallbacks"] = [n for n in met.counter_names() if "c10d" in n]
        print(repr(res))
    """)[0]
    base = [1.0, 2.0, 3.0, 4.0]
    for k, f in [("fc_ar", 1), ("ag", 2), ("rs", 3), ("bc", 4), ("a2a", 5), ("wait", 6),
                 ("ar_", 7), ("agout", 8), ("c10d_ar", 9), ("c10d_agb", 10)]:
        assert out[k] == ("Tensor", "xla", [f * v for v in base]), k
    assert out["text"]
    assert (out["split"], out["op"], out["size"]) == ("RuntimeError", "RuntimeError", "ValueError")
    assert out["fallbacks"] == []


_LAUNCH = """
import torch, torch.distributed as dist, torch_xla
import torch_xla.runtime as xr
import torch_xla.distributed.xla_backend as xb
from torch._C._distributed_c10d import AllreduceOptions, BroadcastOptions, ReduceScatterOptions
import sys, threading
_out = threading.Lock()  # one whole line per replica thread, never interleaved
def fn(i):
    r, n, dev = xr.global_ordinal(), xr.world_size(), torch_xla.device()
    try:
        dist.init_process_group("xla", init_method="xla://"); err = None
    except RuntimeError as e:
        err = str(e)
    pg = xb.ProcessGroupXla(dist.HashStore(), r, n, None)
    t = torch.tensor([float(r + 1), 10.0 * (r + 1)], device=dev)
    a = t.clone(); o = AllreduceOptions(); o.reduceOp = dist.ReduceOp.SUM; pg.allreduce([a], o)
    b = t.clone(); bo = BroadcastOptions(); bo.rootRank = 1; pg.broadcast([b], bo)
    ag = [torch.zeros(2, device=dev) for _ in range(n)]; pg.allgather([ag], [t])
    agt = torch.zeros(n * 2, device=dev); pg._allgather_base(agt, t)
    rs = torch.zeros(2, device=dev); ro = ReduceScatterOptions(); ro.reduceOp = dist.ReduceOp.SUM
    pg.reduce_scatter([rs], [[t * (k + 1) for k in range(n)]], ro)
    a2a = [torch.zeros(2, device=dev) for _ in range(n)]
    pg.alltoall(a2a, [t + 100 * k for k in range(n)])
    fr = torch.ops._c10d_functional.all_reduce(t, "avg", "")
    torch_xla.sync()
    row = repr((r, err, a.cpu().tolist(), b.cpu().tolist(), [x.cpu().tolist() for x in ag],
                agt.cpu().tolist(), rs.cpu().tolist(), [x.cpu().tolist() for x in a2a],
                fr.cpu().tolist()))
    with _out:
        sys.stdout.write(row + "\\n"); sys.stdout.flush()
if __name__ == "__main__":
    torch_xla.launch(fn, args=())
"""


def test_group_ops_over_two_replicas_and_launch_refusal(tmp_path):
    script = tmp_path / "launch_ops.py"
    script.write_text(_LAUNCH)
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2")
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = sorted(eval(l) for l in r.stdout.splitlines() if l.startswith("("))
    assert [row[0] for row in rows] == [0, 1]
    for rank, err, a, b, ag, agt, rs, a2a, fr in rows:
        assert "cannot be created inside a torch_xla.launch" in err and "xm collectives" in err
        assert a == [3.0, 30.0] and b == [2.0, 20.0] and fr == [1.5, 15.0]
        assert ag == [[1.0, 10.0], [2.0, 20.0]] and agt == [1.0, 10.0, 2.0, 20.0]
        assert rs == ([3.0, 30.0] if rank == 0 else [6.0, 60.0])
        assert a2a == [[1.0 + 100 * rank, 10.0 + 100 * rank], [2.0 + 100 * rank, 20.0 + 100 * rank]]
