"""torch_xla.distributed.fsdp.state_dict_utils: rebuilding the unwrapped
model's state_dict from the state_dict() of every FSDP rank and the
get_shard_metadata() of any one of them (PyTorch/XLA's
consolidate_sharded_state_dicts / consolidate_sharded_model_checkpoints).

Sharded entries are the keys with a component starting `_fsdp_shard`:
rank r's value is slice r of the padded tensor, so the full tensor is the
ranks' values concatenated on dim 0 and cut to the original size. Flat
parameters (`..._fsdp_wrapped_module.flat_param_i`) are then split by the
flatten metadata. Everything else (buffers) is taken from rank 0, cast
back to its original dtype. `_fsdp_wrapped_module.` is removed from every
name."""
from collections import OrderedDict
from glob import glob
from typing import Any, Dict, List, Tuple

import torch

_WRAPPED = "_fsdp_wrapped_module."


def _numel(shape) -> int:
  n = 1
  for d in shape:
    n *= d
  return n


def _split_sharded_name(name: str):
  """(FSDP instance prefix, registered shard name) or None."""
  parts = name.split(".")
  for i, part in enumerate(parts):
    if part.startswith("_fsdp_shard"):
      return ".".join(parts[:i]), ".".join(parts[i:])
  return None


def consolidate_sharded_state_dicts(state_dict_list: List[Dict[str, Any]],
                                    shard_metadata: Dict[str, Any]) -> "OrderedDict":
  """The full state_dict of the unwrapped module from state_dict_list (one
  model.state_dict() per rank, in rank order) and shard_metadata (any
  rank's model.get_shard_metadata())."""
  world_size = shard_metadata["world_size"]
  if len(state_dict_list) != world_size:
    raise ValueError(f"expected {world_size} state dicts (world_size in shard_metadata), "
                     f"got {len(state_dict_list)}")
  buffer_info = shard_metadata.get("buffer_info", {})
  merged = OrderedDict()
  for name, value in state_dict_list[0].items():
    split = _split_sharded_name(name)
    if split is None:
      if name in buffer_info:
        value = value.to(buffer_info[name]["_orig_dtype"])
      merged[name] = value
      continue
    prefix, shard_name = split
    info = shard_metadata["shard_info"][prefix][shard_name]
    size = info["_orig_size"]
    full = torch.cat([sd[name] for sd in state_dict_list], dim=0)
    if full.dim() == 1:
      full = full[:_numel(size)].view(*size)
    else:  # sharded on dim 0 (shard_param_on_dim_0)
      full = full[:size[0]]
    merged[f"{prefix}.{info['_orig_name']}" if prefix else info["_orig_name"]] = full

  flatten_info = shard_metadata.get("flatten_info", {})
  unflattened = OrderedDict()
  for name, value in merged.items():
    if _WRAPPED + "flat_param_" not in name:
      unflattened[name] = value
      continue
    names, shapes, numels = flatten_info[name]
    prefix = name.rsplit(".", 1)[0]
    for n, shape, piece in zip(names, shapes, value.split(list(numels))):
      unflattened[f"{prefix}.{n}"] = piece.view(shape)
  return OrderedDict((k.replace(_WRAPPED, ""), v) for k, v in unflattened.items())


def consolidate_sharded_model_checkpoints(ckpt_prefix: str,
                                          ckpt_suffix: str = "*.pth",
                                          save_path: str = "",
                                          save_model: bool = True) -> Tuple[Dict, Any]:
  """Loads every file matching ckpt_prefix + ckpt_suffix (each a dict with
  "model": model.state_dict() and "shard_metadata":
  model.get_shard_metadata() of one rank), consolidates them, and with
  save_model writes {"model": full_state_dict} to save_path (default
  ckpt_prefix + "_consolidated.pth"). Returns (full_state_dict, the path
  written or None)."""
  pattern = ckpt_prefix + ckpt_suffix
  paths = glob(pattern)
  if not paths:
    raise AssertionError(f"Cannot find any files matching {pattern}.")
  print(f"found {len(paths)} checkpoint files in {pattern}")
  loaded = [(torch.load(p, map_location="cpu", weights_only=False), p) for p in paths]
  loaded.sort(key=lambda cp: cp[0]["shard_metadata"]["rank"])
  for rank, (ckpt, path) in enumerate(loaded):
    meta = ckpt["shard_metadata"]
    if meta["world_size"] != len(loaded):
      raise AssertionError(f"Expecting {meta['world_size']} files (based on metadata in {path}) "
                           f"but got {len(loaded)} files. Please check if you have missing or "
                           f"unexpected files in {pattern}.")
    if meta["rank"] != rank:
      raise AssertionError(f"Expecting rank {meta['rank']} for {path} but it is ranked {rank} "
                           f"(out of {len(loaded)} files). Please check if you have missing or "
                           f"unexpected files in {pattern}.")
  full = consolidate_sharded_state_dicts([c["model"] for c, _ in loaded],
                                         loaded[0][0]["shard_metadata"])
  written = None
  if save_model:
    written = save_path or ckpt_prefix + "_consolidated.pth"
    torch.save({"model": full}, written)
    print(f"saved consolidated model to {written}")
  return full, written
