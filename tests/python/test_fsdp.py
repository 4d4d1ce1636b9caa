"""torch_xla.distributed.fsdp: XlaFullyShardedDataParallel over 2 and 4
replicas against full-batch CPU training (losses, consolidated weights,
per-device bytes), checkpoint consolidation, and on one device: frozen
parameters, resharding, dtypes, state_dict/metadata layout, auto-wrap
policies, errors."""
import functools
import pytest
import torch
import torch.nn as nn

import torch_xla
from torch_xla.distributed.fsdp import (XlaFullyShardedDataParallel as FSDP, checkpoint_module,
                                        consolidate_sharded_state_dicts)
from sharded_dp_workloads import run_workload
from torch_xla.distributed.fsdp import consolidate_sharded_ckpts
from torch_xla.distributed.fsdp.wrap import (always_wrap_policy, lambda_auto_wrap_policy,
                                             recursive_wrap, size_based_auto_wrap_policy,
                                             transformer_auto_wrap_policy)

@pytest.mark.parametrize("n,flatten", [(2, False), (4, True)])
def test_fsdp_training_matches_full_batch_cpu(tmp_path, n, flatten):
  opts = ["flatten", "replicated"] if flatten else []
  res = run_workload("fsdp", n, tmp_path, *opts)
  for kind, units in (("mlp", 4), ("transformer", 3)):
    r = res[kind]
    assert r["ref_losses"][0] != r["ref_losses"][2]  # it trains
    torch.testing.assert_close(r["losses"], r["ref_losses"], rtol=1e-5, atol=1e-6)
    # The consolidated checkpoint is the unwrapped model's state_dict.
    assert r["ckpt_keys_match"], kind
    assert r["weight_diff"] < 1e-5, (kind, r["weight_diff"])
    assert r["units"] == units
    assert not r["full_params_held"]  # every gathered parameter was freed
    # Shards, their gradients and Adam's two states: about 4 * params / N
    # per device (padding to 128 * N elements per shard adds a little).
    full = 4 * r["param_bytes"]
    assert len(set(r["bytes"])) == 1, r["bytes"]
    assert full / n <= r["bytes"][0] <= full / n * (1.1 if flatten else 1.3), (kind, r)
    if flatten:
      # A replica of DDP-style training holds all of it.
      assert r["replicated_bytes"] == [full] * n, r


def _mlp():
  torch.manual_seed(0)
  return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _grads(model, x):
  model(x).pow(2).sum().backward()


def test_frozen_weight_is_gathered_and_freed():
  dev = torch_xla.device()
  torch.manual_seed(0)
  plain = nn.Linear(64, 64)
  plain.weight.requires_grad = False
  model = nn.Linear(64, 64)
  model.load_state_dict(plain.state_dict())
  model.weight.requires_grad = False
  model = FSDP(model)
  x = torch.rand(2, 64)
  loss = model(x.to(dev)).sum()
  assert all(p._has_full_param for p in model.full_params)  # root keeps them for backward
  loss.backward()
  assert not any(p._has_full_param for p in model.full_params)
  plain(x).sum().backward()
  shards = dict(model.named_parameters())
  frozen = [p for p in shards.values() if not p.requires_grad]
  trainable = [p for p in shards.values() if p.requires_grad]
  assert len(frozen) == 1 and frozen[0].grad is None
  assert len(trainable) == 1 and trainable[0].shape == (128,)  # 64 padded to 128
  torch.testing.assert_close(trainable[0].grad.cpu()[:64], plain.bias.grad)
  torch.testing.assert_close(loss.cpu(), plain(x).sum(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [
    dict(),
    dict(flatten_parameters=True),
    dict(shard_param_on_dim_0=True),
    dict(reshard_after_forward=True, disable_reshard_on_root=False, _use_xla_patched_linear=False),
])
def test_nested_units_match_plain_gradients(options):
  dev = torch_xla.device()
  x = torch.randn(5, 8)
  plain = _mlp()
  _grads(plain, x)
  model = _mlp()
  model[2] = FSDP(model[2], **options)
  model = FSDP(model, **options)
  _grads(model, x.to(dev))
  got = dict(model.get_original_names_and_sharded_parameters())
  want = dict(plain.named_parameters())
  if options.get("flatten_parameters"):
    # The root holds layer 0 (layer 2 is the nested unit's).
    assert sorted(got) == ["2.flat_param_0", "flat_param_0"]
    for name, layer in (("flat_param_0", "0"), ("2.flat_param_0", "2")):
      flat = torch.cat([want[f"{layer}.{k}"].grad.reshape(-1) for k in ("weight", "bias")])
      torch.testing.assert_close(got[name].grad.cpu()[:flat.numel()], flat, rtol=1e-5,
                                 atol=1e-6)
    return
  assert sorted(got) == sorted(want)
  for name, shard in got.items():
    g = want[name].grad
    if options.get("shard_param_on_dim_0"):
      assert shard.shape[1:] == g.shape[1:]
      torch.testing.assert_close(shard.grad.cpu()[:g.shape[0]], g, rtol=1e-5, atol=1e-6)
    else:
      torch.testing.assert_close(shard.grad.cpu()[:g.numel()], g.reshape(-1), rtol=1e-5,
                                 atol=1e-6)


def test_reshard_regathers_in_backward_and_frees_after():
  dev = torch_xla.device()
  model = _mlp()
  model[0] = FSDP(model[0])  # not the root: resharded after forward
  model = FSDP(model)
  inner = model.module[0]
  out = model(torch.randn(3, 8).to(dev))
  assert not any(p._has_full_param for p in inner.full_params)
  assert all(p._has_full_param for p in model.full_params)
  out.sum().backward()
  assert not any(p._has_full_param for m in (model, inner) for p in m.full_params)
  assert inner._regathered == {} and all(p.grad is not None for p in model.parameters())
  # Outside forward the module holds one-element records, not parameters.
  assert inner.module.weight.numel() == 1 and not isinstance(inner.module.weight.grad, torch.Tensor)


def test_compute_dtype_and_fp32_reduce_scatter():
  dev = torch_xla.device()
  model = FSDP(_mlp(), compute_dtype=torch.bfloat16, fp32_reduce_scatter=True)
  out = model(torch.randn(3, 8).to(dev))
  assert out.dtype == torch.bfloat16
  out.float().sum().backward()
  assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32
             for p in model.parameters())


def test_checkpoint_module_under_auto_wrap():
  dev = torch_xla.device()
  x = torch.randn(4, 8)
  plain = _mlp()
  _grads(plain, x)
  wrapper = lambda m, *a, **k: FSDP(checkpoint_module(m), *a, **k)
  model = FSDP(_mlp(), auto_wrap_policy=always_wrap_policy, auto_wrapper_callable=wrapper)
  assert isinstance(model.module[0], FSDP) and isinstance(model.module[2], FSDP)
  _grads(model, x.to(dev))
  got = dict(model.get_original_names_and_sharded_parameters())
  for name, p in plain.named_parameters():
    torch.testing.assert_close(got[name].grad.cpu()[:p.numel()], p.grad.reshape(-1), rtol=1e-5,
                               atol=1e-6)


def test_no_sync_accumulates_until_the_synced_pass():
  dev = torch_xla.device()
  xs = [torch.randn(3, 8) for _ in range(3)]
  plain = _mlp()
  for x in xs:
    _grads(plain, x)
  model = _mlp()
  model[2] = FSDP(model[2])
  model = FSDP(model)
  with model.no_sync():
    _grads(model, xs[0].to(dev))
    _grads(model, xs[1].to(dev))
    assert all(p.grad is None for p in model.parameters())  # nothing reduced yet
  _grads(model, xs[2].to(dev))
  got = dict(model.get_original_names_and_sharded_parameters())
  for name, p in plain.named_parameters():
    torch.testing.assert_close(got[name].grad.cpu()[:p.numel()], p.grad.reshape(-1), rtol=1e-5,
                               atol=1e-5)
  with pytest.raises(AssertionError, match="no_sync on inner FSDP"):
    with model.module[2].no_sync():
      pass


def test_clip_grad_norm_and_finalization_sync():
  dev = torch_xla.device()
  x = torch.randn(4, 8)
  plain = _mlp()
  _grads(plain, x)
  want = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
  model = FSDP(_mlp(), mark_step_on_finalization=True)
  assert model.sync_on_finalization is True
  _grads(model, x.to(dev))
  total = model.clip_grad_norm_(0.5)
  torch.testing.assert_close(total.cpu(), want, rtol=1e-5, atol=1e-6)
  got = dict(model.get_original_names_and_sharded_parameters())
  for name, p in plain.named_parameters():
    torch.testing.assert_close(got[name].grad.cpu()[:p.numel()], p.grad.reshape(-1), rtol=1e-5,
                               atol=1e-6)


def test_state_dict_layout_and_consolidation_on_one_rank(tmp_path):
  plain = _mlp()
  model = _mlp()
  model.add_module("bn", nn.BatchNorm1d(4))
  plain.add_module("bn", nn.BatchNorm1d(4))
  model[0] = FSDP(model[0], flatten_parameters=True)
  model = FSDP(model, buffer_dtype=torch.bfloat16)
  sd = model.state_dict()
  sep = "_FSDP_SHARD_SEPARATOR_"
  assert f"_fsdp_shard{sep}_fsdp_wrapped_module{sep}2{sep}weight" in sd
  assert f"_fsdp_wrapped_module.0._fsdp_shard{sep}_fsdp_wrapped_module{sep}flat_param_0" in sd
  assert sd["_fsdp_wrapped_module.bn.running_mean"].dtype == torch.bfloat16
  meta = model.get_shard_metadata()
  assert (meta["world_size"], meta["rank"]) == (1, 0)
  assert sorted(meta["shard_info"]) == ["", "_fsdp_wrapped_module.0"]
  assert meta["flatten_info"]["_fsdp_wrapped_module.0._fsdp_wrapped_module.flat_param_0"] == (
      ["weight", "bias"], [(16, 8), (16,)], [128, 16])
  assert meta["buffer_info"]["_fsdp_wrapped_module.bn.running_mean"] == {
      "_orig_dtype": torch.float32}
  full = consolidate_sharded_state_dicts([{k: v.cpu() for k, v in sd.items()}], meta)
  want = plain.state_dict()
  assert list(full) == list(want) or sorted(full) == sorted(want)
  for k in want:
    assert full[k].dtype == want[k].dtype, k
    torch.testing.assert_close(full[k], want[k])
  with pytest.raises(ValueError, match="expected 1 state dicts"):
    consolidate_sharded_state_dicts([sd, sd], meta)
  # The command-line consolidation reads per-rank files.
  torch.save({"model": {k: v.cpu() for k, v in sd.items()}, "shard_metadata": meta},
             tmp_path / "ckpt_rank-0.pth")
  consolidate_sharded_ckpts.main(["--ckpt_prefix", str(tmp_path / "ckpt"), "--ckpt_suffix",
                                  "_rank-*.pth"])
  saved = torch.load(tmp_path / "ckpt_consolidated.pth")["model"]
  assert sorted(saved) == sorted(want)
  torch.testing.assert_close(saved["2.weight"], want["2.weight"])


def test_auto_wrap_policies_choose_modules():

  class Wrapped(nn.Module):

    def __init__(self, module, **kwargs):
      super().__init__()
      self.inner, self.kwargs = module, kwargs

  def wrapped_types(model):
    return [type(m.inner).__name__ for m in model.modules() if isinstance(m, Wrapped)]

  def build():
    return nn.Sequential(nn.Linear(20, 20), nn.Sequential(nn.Linear(2, 2), nn.ReLU()),
                         nn.MultiheadAttention(20, 2))

  m, n = recursive_wrap(build(), functools.partial(size_based_auto_wrap_policy,
                                                   min_num_params=100), Wrapped, set(), set(),
                        only_wrap_children=True, flag=1)
  # Linear(20, 20) is big enough; the attention is a forced leaf (never
  # entered, so its parameters stay with the parent), the rest is small.
  assert wrapped_types(m) == ["Linear"] and n == 420
  assert m[0].kwargs == {"flag": 1}
  m, _ = recursive_wrap(build(), functools.partial(transformer_auto_wrap_policy,
                                                   transformer_layer_cls={nn.ReLU}), Wrapped,
                        set(), set())
  assert wrapped_types(m) == ["ReLU"]
  m, _ = recursive_wrap(build(), functools.partial(lambda_auto_wrap_policy,
                                                   lambda_fn=lambda x: type(x) is nn.Linear),
                        Wrapped, set(), set(), only_wrap_children=True)
  assert wrapped_types(m) == ["Linear", "Linear"]
  assert always_wrap_policy(module=None, recurse=False, unwrapped_params=0) is True
  assert size_based_auto_wrap_policy(nn.ModuleList(), False, 10**9) is False


def test_errors():
  with pytest.raises(RuntimeError, match="must define a `forward` method"):
    FSDP(nn.ModuleList([nn.Linear(2, 2)]))
  inner = FSDP(nn.Linear(2, 2))
  with pytest.raises(RuntimeError, match="already wrapped with FSDP"):
    FSDP(inner)
  with pytest.raises(ValueError, match="compute_dtype must be one of"):
    FSDP(nn.Linear(2, 2), compute_dtype=torch.int32)
  with pytest.raises(ValueError, match="sharding_rank and sharding_world_size"):
    FSDP(nn.Linear(2, 2), sharding_groups=[[0]])
  with pytest.raises(TypeError, match="only fp32 parameters are supported"):
    FSDP(nn.Linear(2, 2).double())
  with pytest.raises(ValueError, match="to NOT be FullyShardedDataParallel"):
    FSDP(nn.Sequential(FSDP(nn.Linear(2, 2))), auto_wrap_policy=always_wrap_policy)
