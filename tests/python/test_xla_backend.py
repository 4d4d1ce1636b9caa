"""torch.distributed's "xla" backend and the xla:// init method
(torch_xla.distributed.xla_backend) on one replica: every c10d collective
is recorded as the engine's collective op and gives c10d's result for a
world of one. Runs in a child process: the default process group is
process-wide state."""
import os
import subprocess
import sys

_CHILD = r"""
import torch, torch.distributed as dist, torch_xla
import torch_xla.distributed.xla_backend as xb
dev = torch_xla.device()
dist.init_process_group("xla", init_method="xla://")
out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "backend": dist.get_backend(),
       "pg": type(dist.group.WORLD).__name__}
t = torch.arange(4.0, device=dev) + 1
dist.all_reduce(t)
out["recorded"] = "all_reduce" in torch_xla._XLAC._get_xla_tensors_text([t])
out["all_reduce"] = t.cpu().tolist()
m = t.clone(); dist.all_reduce(m, op=dist.ReduceOp.MAX); out["max"] = m.cpu().tolist()
o = torch.zeros(4, device=dev); dist.all_gather_into_tensor(o, t * 2); out["agt"] = o.cpu().tolist()
ol = [torch.zeros(4, device=dev)]; dist.all_gather(ol, t * 3); out["ag"] = ol[0].cpu().tolist()
b = t * 4; dist.broadcast(b, 0); out["bcast"] = b.cpu().tolist()
r = torch.zeros(4, device=dev); dist.reduce_scatter_tensor(r, t * 5); out["rs"] = r.cpu().tolist()
a = torch.zeros(4, device=dev); dist.all_to_all_single(a, t * 6); out["a2a"] = a.cpu().tolist()
gl = [torch.zeros(4, device=dev)]; dist.gather(t * 7, gl, dst=0); out["gather"] = gl[0].cpu().tolist()
s = torch.zeros(4, device=dev); dist.scatter(s, [t * 8], src=0); out["scatter"] = s.cpu().tolist()
dist.barrier()
g = xb.new_xla_process_group([0]); x = torch.ones(2, device=dev); dist.all_reduce(x, group=g)
out["group_mesh"] = g._mesh if hasattr(g, "_mesh") else None
out["group"] = x.cpu().tolist()
try:
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
except Exception as e:
    out["avg"] = type(e).__name__
try:
    dist.send(t, 0)
except Exception as e:
    out["send"] = type(e).__name__
dist.destroy_process_group()
print(repr(out))
"""


def test_xla_process_group_collectives_on_one_replica():
    env = dict(os.environ, PJRT_DEVICE="CPU")
    env.pop("CPU_NUM_DEVICES", None)
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = eval(r.stdout.strip().splitlines()[-1])
    base = [1.0, 2.0, 3.0, 4.0]
    assert (out["rank"], out["world"], out["backend"]) == (0, 1, "xla")
    assert out["pg"] == "ProcessGroupXla" and out["group_mesh"] == [[0]]
    assert out["recorded"]  # an engine collective, not a skipped call
    assert out["all_reduce"] == base and out["max"] == base
    assert out["agt"] == [2 * v for v in base] and out["ag"] == [3 * v for v in base]
    assert out["bcast"] == [4 * v for v in base] and out["rs"] == [5 * v for v in base]
    assert out["a2a"] == [6 * v for v in base] and out["gather"] == [7 * v for v in base]
    assert out["scatter"] == [8 * v for v in base]
    assert out["group"] == [1.0, 1.0]
    assert out["avg"] == "ValueError"  # PyTorch/XLA's 'Invalid reduce op' 
    assert out["send"] == "ValueError"  # c10d refuses sending to oneself
