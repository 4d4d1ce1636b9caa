"""State-dict plumbing shared by the SPMD checkpoint planners and manager.

Contract:
- flatten_state_dict(sd) -> (flat, mappings): nested dicts and lists that
  hold (at any depth) a tensor or _CpuShards are walked; every other value
  (a tensor, a _CpuShards, a collection without tensors, a scalar) is a
  leaf. flat keys are the path parts joined by '.'; mappings[key] is the
  path with the original keys (ints stay ints), for set_element. Two
  paths giving one key are ValueError, as torch.distributed.checkpoint's
  own flattening raises.
- set_element(root, path, value) writes value at path, creating missing
  containers.
- narrow_tensor_by_index(t, offsets, sizes): the view of t at offsets.
- _CpuShards(shards, global_shape): a sharded tensor's shards already on
  the host (what save_async checkpoints from); _sharded_cpu_state_dict(sd)
  replaces each sharded xla tensor of sd by one (through the public
  XLAShardedTensor.local_shards) and every other xla tensor by its CPU
  copy.
- distinct_shards(replica_and_indices): the device positions whose shard
  is written or read: the first device of each distinct index set, so a
  shard replicated over several devices is handled once.
- dedup_tensors(plans): each WriteItem key (fqn, offset) kept in exactly
  one of the plans that hold it (the one with the fewest bytes so far), so
  each chunk is written once and ranks holding the same data share the
  writes.
"""
import dataclasses
import math
from typing import Any, Dict, List, Mapping, Tuple

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

import torch_xla
import torch_xla.distributed.spmd as xs
from torch_xla.distributed.spmd import ShardingType, XLAShardedTensor

FLATTEN_MAPPING = Dict[str, Tuple[Any, ...]]


@dataclasses.dataclass
class _CpuShards:
    shards: List[xs.XLAShard]
    global_shape: torch.Size


def _is_sharded_tensor(x: Any) -> bool:
    """True for an XLAShardedTensor whose data is split across devices (a
    replicated annotation is one value: the plain tensor path handles it)."""
    return isinstance(x, XLAShardedTensor) and x.sharding_type != ShardingType.REPLICATED


def _unwrap_xla_sharded_tensor(x: Any) -> Any:
    return x.global_tensor if isinstance(x, XLAShardedTensor) else x


def _is_tensor_like(x: Any) -> bool:
    return isinstance(x, (torch.Tensor, _CpuShards))


def _holds_tensors(x: Any) -> bool:
    if isinstance(x, Mapping):
        return any(_is_tensor_like(v) or _holds_tensors(v) for v in x.values())
    if isinstance(x, list):
        return any(_is_tensor_like(v) or _holds_tensors(v) for v in x)
    return False


def flatten_state_dict(state_dict) -> Tuple[Dict[str, Any], FLATTEN_MAPPING]:
    flat: Dict[str, Any] = {}
    mappings: FLATTEN_MAPPING = {}

    def visit(path, value):
        if _holds_tensors(value):
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            for k, v in items:
                visit(path + (k,), v)
            return
        key = ".".join(str(p) for p in path)
        if key in flat:
            raise ValueError(f"duplicated flatten key {key}")
        flat[key] = value
        mappings[key] = path

    for k, v in state_dict.items():
        visit((k,), v)
    return flat, mappings


def set_element(root, path, value) -> None:
    container = root
    for here, nxt in zip(path[:-1], path[1:]):
        empty = [] if isinstance(nxt, int) else {}
        if isinstance(container, Mapping):
            container = container.setdefault(here, empty)
        else:
            while len(container) <= here:
                container.append(None)
            if container[here] is None:
                container[here] = empty
            container = container[here]
    last = path[-1]
    if isinstance(container, list):
        while len(container) <= last:
            container.append(None)
    container[last] = value


def narrow_tensor_by_index(tensor, offsets, sizes):
    out = tensor
    for dim, (offset, size) in enumerate(zip(offsets, sizes)):
        if offset != 0 or size != tensor.size(dim):
            out = out.narrow(dim, offset, size)
    return out


def distinct_shards(replica_and_indices) -> List[Tuple[int, List[slice]]]:
    seen = set()
    out = []
    for position, (_replica, indices) in enumerate(replica_and_indices):
        key = tuple((s.start, s.stop) for s in indices)
        if key not in seen:
            seen.add(key)
            out.append((position, indices))
    return out


def _item_bytes(item):
    if item.tensor_data is None:
        return 0
    return math.prod(item.tensor_data.chunk.sizes) * item.tensor_data.properties.dtype.itemsize


def dedup_tensors(all_plans):
    holders = {}
    for i, plan in enumerate(all_plans):
        for item in plan.items:
            holders.setdefault(item.index, []).append((i, item))
    # Each key goes to the holder with the fewest bytes assigned so far
    # (ties: the lowest rank), so ranks holding the same shards share the
    # writing instead of one rank writing everything.
    load = [0] * len(all_plans)
    owner = {}
    for key, held in holders.items():
        i, item = min(held, key=lambda h: (load[h[0]], h[0]))
        owner[key] = i
        load[i] += _item_bytes(item)
    return [
        dataclasses.replace(plan, items=[it for it in plan.items if owner[it.index] == i])
        for i, plan in enumerate(all_plans)
    ]


def _sharded_cpu_state_dict(state_dict):
    """state_dict with its xla tensors on the host: a sharded one as
    _CpuShards of its local shards (never gathered into one tensor), any
    other one copied (all copied in one transfer)."""
    flat, spec = tree_flatten(state_dict)
    flat = [xs.wrap_if_sharded(x) for x in flat]
    plain = [
        _unwrap_xla_sharded_tensor(x) for x in flat
        if isinstance(x, torch.Tensor) and not _is_sharded_tensor(x) and x.device.type == "xla"
    ]
    cpu = iter(torch_xla._XLAC._xla_get_cpu_tensors(plain) if plain else [])

    def to_cpu(x):
        if _is_sharded_tensor(x):
            return _CpuShards(shards=x.local_shards, global_shape=x.global_tensor.shape)
        if isinstance(x, torch.Tensor) and x.device.type == "xla":
            return next(cpu)
        return _unwrap_xla_sharded_tensor(x)

    return tree_unflatten([to_cpu(x) for x in flat], spec)
