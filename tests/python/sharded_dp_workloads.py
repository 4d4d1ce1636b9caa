"""Sharded data-parallel workloads for tests/python/test_fsdp.py and
test_zero_redundancy.py: `python sharded_dp_workloads.py MODE N CKPT_DIR [flatten] [replicated]`
(MODE fsdp or zero, CPU_NUM_DEVICES=N; flatten: FSDP's flatten_parameters;
replicated: also measure a DDP-style replica) trains an MLP and a small
transformer encoder on N replicas (torch_xla.launch's threads, fork), each
replica on its 1/N of every batch, and the same models on the CPU with the
whole batch; prints one line `RESULT <json>` with both runs' losses, the
largest weight difference, per-device bytes held after a step by the
sharded run (and by a replicated run of the same model), and (fsdp)
the checkpoint consolidation check."""
import gc
import json
import os
import subprocess
import sys
import threading

import torch
import torch.nn as nn

STEPS = 3
BATCH = 8
LR = 0.02
EPS = 1e-3  # Adam on the keys' bias (zero true gradient) would amplify rounding noise
_INIT_LOCK = threading.Lock()  # replica threads share torch's global RNG


class Transformer(nn.Module):

  def __init__(self):
    super().__init__()
    self.proj = nn.Linear(8, 32)
    layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
    self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    self.head = nn.Linear(32, 4)

  def forward(self, x):
    return self.head(self.encoder(self.proj(x)))


def make(kind):
  with _INIT_LOCK:
    torch.manual_seed(0)
    if kind == "mlp":
      return nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                           nn.Linear(128, 8))
    return Transformer()


def batches(kind):
  g = torch.Generator().manual_seed(1)
  shape, out = ((BATCH, 16), (BATCH, 8)) if kind == "mlp" else ((BATCH, 5, 8), (BATCH, 5, 4))
  return [(torch.randn(*shape, generator=g), torch.randn(*out, generator=g))
          for _ in range(STEPS)]


def reference(kind):
  m = make(kind)
  opt = torch.optim.Adam(m.parameters(), lr=LR, eps=EPS)
  losses = []
  for x, y in batches(kind):
    opt.zero_grad()
    loss = ((m(x) - y)**2).mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
  return losses, {k: v.detach().clone() for k, v in m.state_dict().items()}


def _train(model, opt, kind, step_fn):
  import torch_xla
  from torch_xla import runtime as xr
  dev = torch_xla.device()
  n, r = xr.world_size(), xr.global_ordinal()
  losses = []
  for x, y in batches(kind):
    b = x.shape[0] // n
    x, y = x[r * b:(r + 1) * b].to(dev), y[r * b:(r + 1) * b].to(dev)
    opt.zero_grad(set_to_none=False)
    loss = ((model(x) - y)**2).mean()
    loss.backward()
    step_fn(opt)
    torch_xla.sync()
    losses.append(loss.item())
  return losses


def _bytes_now():
  """Bytes this replica's device holds once garbage is gone and its
  queued programs (which may still hold buffers) have finished; every
  replica gets here first (a peer's gc.collect frees this one's cycles)."""
  import torch_xla
  import torch_xla.core.xla_model as xm
  for tag in ("mem-a", "mem-b"):
    xm.rendezvous(tag)
    gc.collect()
    torch_xla.sync()
    xm.wait_device_ops([str(torch_xla.device())])  # its own: a peer may wait in a collective
  return xm.get_memory_info(torch_xla.device())["bytes_used"]


def _replicated_bytes(kind):
  """Bytes a DDP-style replica keeps: full parameters, gradients, Adam
  state (gradients averaged with xm.optimizer_step)."""
  import torch_xla
  import torch_xla.core.xla_model as xm
  before = _bytes_now()
  m = make(kind).to(torch_xla.device())
  opt = torch.optim.Adam(m.parameters(), lr=LR, eps=EPS)
  _train(m, opt, kind, xm.optimizer_step)
  used = _bytes_now() - before
  del m, opt
  return used


def fsdp_replica(index, ckpt_dir, flatten, replicated):
  import torch_xla
  import torch_xla.core.xla_model as xm
  from torch_xla import runtime as xr
  from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
  from torch_xla.distributed.fsdp import consolidate_sharded_model_checkpoints
  from torch_xla.distributed.fsdp.wrap import (size_based_auto_wrap_policy,
                                               transformer_auto_wrap_policy)
  import functools
  out = {}
  for kind in ("mlp", "transformer"):
    before = _bytes_now()
    if kind == "mlp":
      # Every Linear its own flat-parameter unit, the root holding nothing.
      policy = functools.partial(size_based_auto_wrap_policy, min_num_params=100)
      model = FSDP(make(kind), auto_wrap_policy=policy, flatten_parameters=flatten)
    else:
      # One unit per encoder layer (resharded after forward, gathered again
      # in backward); the root holds proj and head.
      policy = functools.partial(transformer_auto_wrap_policy,
                                 transformer_layer_cls={nn.TransformerEncoderLayer})
      model = FSDP(make(kind), auto_wrap_policy=policy, flatten_parameters=flatten)
    opt = torch.optim.Adam(model.parameters(), lr=LR, eps=EPS)
    losses = _train(model, opt, kind, lambda o: o.step())
    used = _bytes_now() - before
    n_units = sum(isinstance(m, FSDP) for m in model.modules())
    held = [p._has_full_param for m in model.modules() if isinstance(m, FSDP)
            for p in m.full_params]
    prefix = os.path.join(ckpt_dir, kind)
    path = f"{prefix}_rank-{xr.global_ordinal():08d}-of-{xr.world_size():08d}.pth"
    xm.save({"model": model.state_dict(), "shard_metadata": model.get_shard_metadata(),
             "optimizer": opt.state_dict()}, path, master_only=False)
    xm.rendezvous(f"saved-{kind}")
    if xm.is_master_ordinal(local=False):
      consolidate_sharded_model_checkpoints(prefix, "_rank-*-of-*.pth")
    xm.rendezvous(f"consolidated-{kind}")
    del model, opt
    out[kind] = {"losses": losses, "bytes": used,
                 "replicated_bytes": _replicated_bytes(kind) if replicated else None,
                 "units": n_units, "full_params_held": any(held)}
  return out


def zero_replica(index, replicated):
  import torch_xla
  from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer
  out = {}
  for kind in ("mlp", "transformer"):
    before = _bytes_now()
    model = make(kind).to(torch_xla.device())
    opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=LR, eps=EPS,
                                  grad_clipping=False, save_master_weights=True)
    losses = _train(model, opt, kind, lambda o: o.step())
    used = _bytes_now() - before
    # Plain lists: tensors would travel back through shared-memory handles.
    weights = {k: v.cpu().tolist() for k, v in model.state_dict().items()}
    sd = opt.state_dict()
    state_shapes = [list(s["exp_avg"].shape) for s in sd["base_state"].values()]
    del model, opt
    out[kind] = {"losses": losses, "bytes": used,
                 "replicated_bytes": _replicated_bytes(kind) if replicated else None,
                 "weights": weights, "state_shapes": state_shapes,
                 "master_weights": len(sd["sharded_master_weights"])}
  return out


def run_workload(mode, n, ckpt_dir, *options):
  """Runs this file in a fresh interpreter with N devices (the device count
  is fixed when the runtime starts); returns its RESULT."""
  here = os.path.dirname(os.path.abspath(__file__))
  root = os.path.dirname(os.path.dirname(here))
  env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(n),
             PYTHONPATH=os.path.join(root, "python"))
  env.pop("XLA_FLAGS", None)
  p = subprocess.run([sys.executable, os.path.abspath(__file__), mode, str(n), str(ckpt_dir),
                      *options], env=env, cwd=root, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
  line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
  assert line, p.stdout[-2000:]
  return json.loads(line[0][len("RESULT "):])


def main():
  mode, n, ckpt_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
  flatten, replicated = "flatten" in sys.argv[4:], "replicated" in sys.argv[4:]
  refs = {kind: reference(kind) for kind in ("mlp", "transformer")}
  import torch_xla._internal.pjrt as pjrt
  if mode == "fsdp":
    fn = pjrt._SpawnFn(fsdp_replica, ckpt_dir, flatten, replicated)
  else:
    fn = pjrt._SpawnFn(zero_replica, replicated)
  got = pjrt.run_multiprocess(fn, start_method="fork")
  assert sorted(got) == list(range(n)), sorted(got)
  result = {}
  for kind, (ref_losses, ref_weights) in refs.items():
    per = [got[r][kind] for r in range(n)]
    # The mean of the replicas' losses on their 1/N is the full-batch loss.
    losses = [sum(p["losses"][k] for p in per) / n for k in range(STEPS)]
    entry = {
        "ref_losses": ref_losses,
        "losses": losses,
        "bytes": [p["bytes"] for p in per],
        "replicated_bytes": [p["replicated_bytes"] for p in per],
        "param_bytes": sum(v.numel() * 4 for v in ref_weights.values()),
    }
    if mode == "fsdp":
      full = torch.load(os.path.join(ckpt_dir, f"{kind}_consolidated.pth"))["model"]
      entry["ckpt_keys_match"] = sorted(full) == sorted(ref_weights)
      entry["weight_diff"] = max((full[k] - ref_weights[k]).abs().max().item() for k in ref_weights)
      entry["units"] = per[0]["units"]
      entry["full_params_held"] = any(p["full_params_held"] for p in per)
    else:
      entry["weight_diff"] = max((torch.tensor(p["weights"][k]) - ref_weights[k]).abs().max().item()
                                 for p in per for k in ref_weights)
      entry["state_shapes"] = per[0]["state_shapes"]
      entry["master_weights"] = per[0]["master_weights"]
    result[kind] = entry
  print("RESULT " + json.dumps(result))


if __name__ == "__main__":
  main()
