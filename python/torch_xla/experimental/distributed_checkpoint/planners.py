"""SPMDSavePlanner / SPMDLoadPlanner: torch.distributed.checkpoint planners
for state_dicts holding sharded xla tensors (PyTorch/XLA's names and
behaviour).

Contract:
- Both flatten the state_dict (_helpers.flatten_state_dict), wrap annotated
  xla tensors as XLAShardedTensor and split them: `sharded_state_dict`
  holds the tensors split across devices (and, when saving, _CpuShards);
  `unsharded_state_dict` holds everything else (a replicated tensor is one
  value), which torch's default planner logic handles.
- Saving writes each chunk of a sharded tensor once: one WriteItem per
  distinct non-empty shard (a shard replicated over devices is written
  from its first device), its data taken from XLAShardedTensor.local_shards (the
  per-device shards; the global tensor is never gathered), each shard
  released once written. Across ranks, a chunk several plans hold is
  kept in one of them (the least loaded: _helpers.dedup_tensors).
- Loading reads, for each distinct shard of the destination's own
  sharding, the overlapping pieces of whatever chunks the checkpoint holds
  (any mesh, or unsharded), into the shards from local_shards; when every
  element of a tensor has arrived, the shards replicated over several
  devices are copied from their first device and load_local_shards_ writes
  the whole set back. Unsharded destinations are loaded in place.
- A destination key missing from the checkpoint is RuntimeError and a
  tensor of another shape is ValueError (torch's default planner's errors;
  torch.distributed.checkpoint.load wraps them in CheckpointException).
- Neither needs a process group: dist_cp.save/load with no group (or
  no_dist=True) run them as the only rank.
"""
import dataclasses
import io
import math
from typing import Any, Dict, List

import torch
import torch_xla
import torch_xla.distributed.spmd as xs
from torch.distributed.checkpoint.default_planner import (
    create_default_global_load_plan, create_default_global_save_plan,
    create_default_local_load_plan, create_default_local_save_plan)
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex,
                                                   TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import (LoadPlan, LoadPlanner, ReadItem, SavePlan,
                                                  SavePlanner, TensorWriteData, WriteItem,
                                                  WriteItemType)
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list
from torch.distributed.checkpoint.utils import find_state_dict_object
from torch.utils._pytree import tree_map
from torch_xla.distributed.spmd import XLAShardedTensor

from torch_xla.experimental.distributed_checkpoint._helpers import (
    _CpuShards, _is_sharded_tensor, _unwrap_xla_sharded_tensor, dedup_tensors, distinct_shards,
    flatten_state_dict, narrow_tensor_by_index, set_element)


def _split(state_dict, keep_cpu_shards):
    flat, mappings = flatten_state_dict(state_dict)
    flat = tree_map(xs.wrap_if_sharded, flat)
    sharded = {
        k: v for k, v in flat.items()
        if _is_sharded_tensor(v) or (keep_cpu_shards and isinstance(v, _CpuShards))
    }
    unsharded = tree_map(_unwrap_xla_sharded_tensor,
                         {k: v for k, v in flat.items() if k not in sharded})
    return mappings, sharded, unsharded


def _chunk(indices) -> ChunkStorageMetadata:
    return ChunkStorageMetadata(offsets=torch.Size(s.start for s in indices),
                                sizes=torch.Size(s.stop - s.start for s in indices))


def _layout(t: XLAShardedTensor):
    # Indices only: asking for local_shards here would move data.
    return torch_xla._XLAC._get_local_shard_replica_and_indices([t.global_tensor])[0]


class SPMDSavePlanner(SavePlanner):
    """Plans and resolves the writes of a state_dict with sharded xla
    tensors (XLAShardedTensor or annotated xla tensors) or _CpuShards."""

    def __init__(self):
        self.is_coordinator = False
        self.mappings = None
        self.sharded_state_dict: Dict[str, Any] = None
        self.unsharded_state_dict: Dict[str, Any] = None
        # fqn -> the tensor's shards (one per device), fetched on the first
        # write of the tensor; each entry is dropped once written, the list
        # once its last distinct shard is.
        self._local_shards: Dict[str, List[Any]] = {}
        self._pending_writes: Dict[str, int] = {}

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False) -> None:
        # torch passes (state_dict, storage_meta=, is_coordinator=); upstream's
        # tests call set_up_planner(state_dict, True).
        if isinstance(storage_meta, bool):
            storage_meta, is_coordinator = None, storage_meta
        self.is_coordinator = is_coordinator
        self.mappings, self.sharded_state_dict, self.unsharded_state_dict = _split(
            state_dict, keep_cpu_shards=True)

    def create_local_plan(self) -> SavePlan:
        plan = create_default_local_save_plan(self.unsharded_state_dict, self.is_coordinator)
        plan = dataclasses.replace(plan, planner_data=self.mappings)
        for fqn, value in self.sharded_state_dict.items():
            items = _write_items(fqn, value)
            self._pending_writes[fqn] = len(items)
            plan.items.extend(items)
        return plan

    def create_global_plan(self, all_plans: List[SavePlan]):
        all_plans = dedup_tensors(all_plans)
        global_plan, metadata = create_default_global_save_plan(all_plans,
                                                                rewrite_index_hints=False)
        merged = {}
        for p in global_plan:
            merged.update(p.planner_data or {})
        return global_plan, dataclasses.replace(metadata, planner_data=merged)

    def finish_plan(self, new_plan: SavePlan) -> SavePlan:
        return new_plan

    def resolve_data(self, write_item: WriteItem):
        return self.transform_object(write_item, self.lookup_object(write_item.index))

    def lookup_object(self, index: MetadataIndex) -> Any:
        if index.fqn in self.unsharded_state_dict:
            return self.unsharded_state_dict[index.fqn]
        value = self.sharded_state_dict[index.fqn]
        if index.fqn not in self._local_shards:
            shards = value.local_shards if isinstance(value, XLAShardedTensor) else value.shards
            self._local_shards[index.fqn] = list(shards)
        shards = self._local_shards[index.fqn]
        shard = shards[index.index]
        if shard is None:
            raise RuntimeError(f"WriteItem has already been processed: {index}")
        if index.offset != torch.Size(s.start for s in shard.indices):
            raise RuntimeError(f"WriteItem {index} does not correspond to shard {index.index}")
        shards[index.index] = None
        self._pending_writes[index.fqn] -= 1
        if self._pending_writes[index.fqn] == 0:
            del self._local_shards[index.fqn]
        return shard.unpadded_data

    def transform_object(self, write_item: WriteItem, obj: Any):
        if write_item.type == WriteItemType.BYTE_IO:
            buf = io.BytesIO()
            torch.save(obj, buf)
            return buf
        return obj


def _write_items(fqn, value) -> List[WriteItem]:
    if isinstance(value, XLAShardedTensor):
        layout, size, dtype = _layout(value), value.size(), value.dtype
    elif isinstance(value, _CpuShards):
        layout = [(s.replica_id, s.indices) for s in value.shards]
        size = torch.Size(value.global_shape)
        dtype = value.shards[0].data.dtype
    else:
        raise TypeError("SPMDSavePlanner writes shards of an XLAShardedTensor or _CpuShards, "
                        f"got {type(value).__name__}")
    props = TensorProperties(dtype=dtype)
    items = []
    for position, indices in distinct_shards(layout):
        chunk = _chunk(indices)
        if math.prod(chunk.sizes) == 0:
            continue  # a device past the end of a short dim holds no data
        items.append(WriteItem(
            index=MetadataIndex(fqn, chunk.offsets, position),
            type=WriteItemType.SHARD,
            tensor_data=TensorWriteData(chunk=chunk, properties=props, size=size)))
    return items


class SPMDLoadPlanner(LoadPlanner):
    """Loads a checkpoint in place into a state_dict whose sharded tensors
    are already on their xla devices with the sharding wanted."""

    def __init__(self):
        self.metadata: Metadata = None
        self.is_coordinator = False
        self.original_state_dict = None
        self.mappings = None
        self.sharded_state_dict: Dict[str, XLAShardedTensor] = None
        self.unsharded_state_dict: Dict[str, Any] = None
        # fqn -> the device positions read (chunk i of the read plan is the
        # shard of device positions[i]), the shards being filled and the
        # elements still to arrive.
        self._positions: Dict[str, List[int]] = {}
        self._local_shards: Dict[str, List[Any]] = {}
        self._pending_elements: Dict[str, int] = {}

    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False) -> None:
        self.metadata = metadata
        self.is_coordinator = is_coordinator
        self.original_state_dict = state_dict
        self.mappings, self.sharded_state_dict, self.unsharded_state_dict = _split(
            state_dict, keep_cpu_shards=False)

    def create_local_plan(self) -> LoadPlan:
        plan = create_default_local_load_plan(self.unsharded_state_dict, self.metadata)
        for fqn, t in self.sharded_state_dict.items():
            md = self.metadata.state_dict_metadata.get(fqn)
            if md is None:
                raise RuntimeError(f"Missing key in checkpoint state_dict: {fqn}.")
            if not isinstance(md, TensorStorageMetadata):
                raise ValueError(f"{fqn} is a tensor here but was not saved as one")
            if md.size != t.size():
                raise ValueError(
                    f"Size mismatch between saved {md.size} and current: {t.size()} for {fqn}")
            shards = distinct_shards(_layout(t))
            self._positions[fqn] = [p for p, _ in shards]
            plan.items.extend(create_read_items_for_chunk_list(
                fqn, md, [_chunk(ind) for _, ind in shards]))
        return plan

    def create_global_plan(self, global_plan: List[LoadPlan]) -> List[LoadPlan]:
        return create_default_global_load_plan(global_plan)

    def finish_plan(self, central_plan: LoadPlan) -> LoadPlan:
        return central_plan

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn],
                    torch.load(value, weights_only=False))

    def resolve_tensor(self, read_item: ReadItem) -> torch.Tensor:
        return self.transform_tensor(read_item, self.lookup_tensor(read_item.dest_index))

    def lookup_tensor(self, index: MetadataIndex) -> torch.Tensor:
        if index.fqn in self.unsharded_state_dict:
            return find_state_dict_object(self.unsharded_state_dict, index)
        fqn = index.fqn
        if fqn not in self._local_shards:
            shards = self.sharded_state_dict[fqn].local_shards
            self._local_shards[fqn] = shards
            self._pending_elements[fqn] = sum(
                shards[p].unpadded_data.numel() for p in self._positions[fqn])
        shard = self._local_shards[fqn][self._positions[fqn][index.index]]
        if index.offset != torch.Size(s.start for s in shard.indices):
            raise RuntimeError(f"ReadItem {index} does not correspond to its shard")
        # The padded buffer: transform_tensor narrows it to the read.
        return shard.data

    def transform_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> torch.Tensor:
        return narrow_tensor_by_index(tensor, read_item.dest_offsets, read_item.lengths)

    def commit_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> None:
        fqn = read_item.dest_index.fqn
        if fqn not in self.sharded_state_dict:
            return
        self._pending_elements[fqn] -= math.prod(read_item.lengths)
        if self._pending_elements[fqn] < 0:
            raise RuntimeError(f"Too many writes for tensor {fqn}")
        if self._pending_elements[fqn] == 0:
            shards = self._local_shards.pop(fqn)
            first = {}
            for position, shard in enumerate(shards):
                key = tuple((s.start, s.stop) for s in shard.indices)
                if key in first:
                    shard.data.copy_(shards[first[key]].data)
                else:
                    first[key] = position
            self.sharded_state_dict[fqn].load_local_shards_(shards)
