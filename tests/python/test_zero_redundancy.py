"""torch_xla.distributed.zero_redundancy_optimizer.ZeroRedundancyOptimizer:
ZeRO-1 over 2 and 4 replicas against full-batch CPU training (losses,
weights, optimizer-state shapes, per-device bytes), and on one device:
clipping, the bucketed and gradient-hook paths, state_dict round trip,
errors."""
import copy

import pytest
import torch
import torch.nn as nn

import torch_xla
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer

from sharded_dp_workloads import run_workload


@pytest.mark.parametrize("n", [2, 4])
def test_zero1_training_matches_full_batch_cpu(tmp_path, n):
  res = run_workload("zero", n, tmp_path)
  for kind in ("mlp", "transformer"):
    r = res[kind]
    assert r["ref_losses"][0] != r["ref_losses"][2]
    torch.testing.assert_close(r["losses"], r["ref_losses"], rtol=1e-5, atol=1e-6)
    assert r["weight_diff"] < 1e-5, (kind, r["weight_diff"])
    assert r["master_weights"] == len(r["state_shapes"])
    # Adam's state lives on dim-0 shards: 128 rows -> 128 / n per replica.
    if kind == "mlp":
      assert r["state_shapes"][:2] == [[128 // n, 16], [128 // n]]
    # Full parameters and gradients stay; the master-weight shard and the
    # two Adam states are 1/N: 2 + 3/N parameter sizes per device (the
    # shapes here divide evenly, no padding).
    p = r["param_bytes"]
    assert r["bytes"] == [2 * p + 3 * p // n] * n, (kind, r["bytes"], p)


def _model(dev):
  torch.manual_seed(0)
  return nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3)).to(dev)


def _run(model, opt, steps=3, clip=None):
  g = torch.Generator().manual_seed(3)
  dev = next(model.parameters()).device
  for _ in range(steps):
    x, y = torch.randn(4, 6, generator=g).to(dev), torch.randn(4, 3, generator=g).to(dev)
    opt.zero_grad()
    ((model(x) - y)**2).mean().backward()
    if clip is not None:
      torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    if dev.type == "xla":
      torch_xla.sync()
  return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("options", [
    dict(grad_clipping=True, max_norm=0.1),
    dict(grad_clipping=False, bucket_cap_mb_all_gather=1, bucket_cap_mb_reduce_scatter=1),
    dict(grad_clipping=False, use_grad_acc_hook=True),
])
def test_one_replica_matches_plain_optimizer(options):
  model = _model(torch_xla.device())
  opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.AdamW, lr=0.05, **options)
  cpu_model = _model("cpu")
  want = _run(cpu_model, torch.optim.AdamW(cpu_model.parameters(), lr=0.05),
              clip=options.get("max_norm") if options["grad_clipping"] else None)
  got = _run(model, opt)
  for a, b in zip(got, want):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
  if options["grad_clipping"]:
    assert opt.grad_norm is not None and opt.grad_norm.item() > 0.1


def test_state_dict_round_trip_continues_identically():
  dev = torch_xla.device()
  model = _model(dev)
  opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=0.05,
                                grad_clipping=False, save_master_weights=True)
  _run(model, opt, steps=2)
  sd = copy.deepcopy(opt.state_dict())  # as saved: the live state changes in place
  assert sorted(sd) == ["base_state", "param_groups", "shape_info", "sharded_master_weights",
                        "state"]
  assert sd["shape_info"] == {0: (10, 6), 1: (10,), 2: (3, 10), 3: (3,)}
  assert int(sd["base_state"][0]["step"]) == 2
  weights = copy.deepcopy(model.state_dict())
  continued = _run(model, opt, steps=2)

  model2 = _model(dev)
  model2.load_state_dict(weights)
  opt2 = ZeroRedundancyOptimizer(model2.parameters(), torch.optim.Adam, lr=0.05,
                                 grad_clipping=False, save_master_weights=True)
  opt2.load_state_dict(sd)
  assert int(opt2.base_optimizer.state_dict()["state"][0]["step"]) == 2
  resumed = _run(model2, opt2, steps=2)
  for a, b in zip(resumed, continued):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_param_group_settings_follow_the_wrapper():
  model = _model(torch_xla.device())
  opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.5, grad_clipping=False)
  sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.1)
  _run(model, opt, steps=1)
  sched.step()
  _run(model, opt, steps=1)
  assert opt.base_optimizer.param_groups[0]["lr"] == pytest.approx(0.05)


def test_errors():
  dev = torch_xla.device()
  with pytest.raises(ValueError, match="Current rank 0 is missing from the sharding_groups"):
    ZeroRedundancyOptimizer(_model(dev).parameters(), torch.optim.SGD, lr=0.1,
                            sharding_groups=[[1]])
  with pytest.raises(AssertionError, match="xla device"):
    ZeroRedundancyOptimizer(_model("cpu").parameters(), torch.optim.SGD, lr=0.1)
  opt = ZeroRedundancyOptimizer(_model(dev).parameters(), torch.optim.SGD, lr=0.1,
                                lazy_init=True)
  with pytest.raises(AssertionError, match="must call init_zero"):
    opt.step()
  opt.sharding_groups = [[0]]
  opt.init_zero()
  with pytest.raises(AssertionError, match="already inited"):
    opt.sharding_groups = [[0]]
