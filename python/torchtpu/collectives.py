"""Collective ops recorded in the lazy graph (xm.all_reduce, all_gather,
reduce_scatter, all_to_all, collective_permute).

Each becomes one IR op (tt_op_t ALL_REDUCE, ..., include/torchtpu/ir.h)
with its replica groups as attributes, and lowers to the StableHLO
collective of the same name (docs/stablehlo.md). The engine's own CPU
backend runs them between its devices through the collective layer
(docs/collectives.md): inside torch_xla.launch / xmp.spawn each device's
thread is a replica and groups=None means every replica; outside a launch
there is one replica (xr.world_size() == 1) and a collective is a copy.
A PJRT plugin runs them too (torchtpu.spmd.run_replicated).
"""
import torch

from torchtpu import bridge, ir
from torchtpu.lowering import core

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"

_REDUCE_CODES = {
    REDUCE_SUM: core.RED_SUM, REDUCE_MUL: core.RED_PROD, REDUCE_MAX: core.RED_MAX,
    REDUCE_MIN: core.RED_MIN, REDUCE_OR: core.RED_ANY, REDUCE_AND: core.RED_ALL,
}
_MAX_IDS = 32 - core.COLLECTIVE_HEADER  # TT_MAX_IATTRS


def _world_size():
    import torch_xla.runtime as xr
    return xr.world_size()


def _reduce_code(reduce_type):
    code = _REDUCE_CODES.get(reduce_type)
    if code is None:
        raise ValueError(f"Invalid reduce type {reduce_type!r}; expected one of "
                         f"{sorted(_REDUCE_CODES)} (xm.REDUCE_SUM, ...)")
    return code


def _groups(groups, what):
    """(group_size, flat ids) of PyTorch/XLA's groups (a list of lists of
    replica ids, or None for one group of every replica)."""
    if groups is None or len(groups) == 0:
        return 1, []
    groups = [[int(r) for r in g] for g in groups]
    size = len(groups[0])
    if size == 0 or any(len(g) != size for g in groups):
        raise ValueError(f"{what}: replica groups must all have the same, nonzero size, got "
                         f"{groups}")
    ids = [r for g in groups for r in g]
    if len(ids) > _MAX_IDS:
        raise ValueError(f"{what}: at most {_MAX_IDS} replica ids in groups, got {len(ids)}")
    return size, ids


def _channel():
    """In SPMD mode (xr.use_spmd()) collectives are SPMD collectives: a
    channel (numbered by the emitter) and groups of global device ids, as
    inside manual regions (xs.enable_manual_sharding); else cross-replica."""
    import torch_xla.runtime as xr
    return 1 if xr.is_spmd() else 0


def _record(build, t, groups, what, channel_id=None, **fields):
    """Records collective `build` (a torchtpu.ir builder) on t with its
    op-specific fields and the (group_size, ids) of _groups."""
    if not isinstance(t, torch.Tensor) or t.device.type != "xla":
        raise TypeError(f"{what} expects tensors on an xla device, got "
                        f"{getattr(t, 'device', type(t).__name__)}")
    size, ids = groups
    if channel_id is None:
        channel_id = _channel()
    fields = {name: int(v) for name, v in fields.items()}
    out = build(bridge.handle_of(t), **fields, channel_id=int(channel_id), group_size=size,
                groups=ids)
    return bridge.wrap_user(out)


def _scaled(t, scale):
    return t if scale == 1.0 else t * scale


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """Reduces inputs over the replicas of each group, then multiplies by
    scale. A tensor gives a new tensor; a list of tensors is updated in place
    and returned. pin_layout is accepted and ignored (layouts are the
    compiler's)."""
    if (isinstance(inputs, torch.Tensor) and scale == 1.0 and not groups and pin_layout
            and torch.compiler.is_compiling()):
        # Dynamo cannot trace the recording below (it reads the tensor's
        # engine handle); as PyTorch/XLA does, a compiled xm.all_reduce goes
        # through the functional collective, which Dynamo puts in the graph
        # and whose xla kernel (torch_xla.distributed.c10d_xla_kernels)
        # records this same collective when the graph runs.
        return torch.ops._c10d_functional.all_reduce(inputs, reduce_type, "")
    code = _reduce_code(reduce_type)
    g = _groups(groups, "all_reduce")
    if isinstance(inputs, torch.Tensor):
        return _scaled(_record(ir.all_reduce, inputs, g, "all_reduce", reduce=code), scale)
    # A list is coalesced as PyTorch/XLA does: one collective per dtype over
    # the tensors flattened end to end, then split back. The elements reduce
    # exactly as one by one; a group spanning processes pays its per-call
    # latency (a Gloo round trip or two) once instead of once per tensor.
    by_dtype = {}
    for t in inputs:
        if not isinstance(t, torch.Tensor) or t.device.type != "xla":
            raise TypeError(f"all_reduce expects tensors on an xla device, got "
                            f"{getattr(t, 'device', type(t).__name__)}")
        by_dtype.setdefault(t.dtype, []).append(t)
    for same in by_dtype.values():
        if len(same) == 1:
            same[0].copy_(_scaled(_record(ir.all_reduce, same[0], g, "all_reduce", reduce=code),
                                  scale))
            continue
        flat = torch.cat([t.reshape(-1) for t in same])
        flat = _scaled(_record(ir.all_reduce, flat, g, "all_reduce", reduce=code), scale)
        for t, part in zip(same, flat.split([t.numel() for t in same])):
            t.copy_(part.view(t.shape))
    return inputs


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    """Concatenates value of every replica of the group along dim. A list
    of tensors gives the list of their results (one collective each; into
    `output`, a list of as many tensors, when given)."""
    if isinstance(value, list):
        if not all(isinstance(t, torch.Tensor) for t in value):
            raise TypeError("all_gather expects a tensor or a list of tensors, got a list of "
                            f"{sorted({type(t).__name__ for t in value})}")
        if output is None:
            return [all_gather(t, dim, groups, None, pin_layout) for t in value]
        if not isinstance(output, list) or len(output) != len(value):
            raise ValueError("all_gather: `output` must be a list of as many tensors as the "
                             f"input ({len(value)})")
        for t, o in zip(value, output):
            _write_output(o, all_gather(t, dim, groups, None, pin_layout))
        return output
    if (isinstance(value, torch.Tensor) and not groups and output is None and pin_layout
            and torch.compiler.is_compiling()):
        # As all_reduce above: Dynamo traces the functional collective
        # (which gathers along dim 0).
        d = dim % max(value.dim(), 1)
        moved = value.reshape(1) if value.dim() == 0 else value.movedim(d, 0).contiguous()
        gathered = torch.ops._c10d_functional.all_gather_into_tensor(moved, _world_size(), "")
        return gathered if value.dim() == 0 else gathered.movedim(0, d)
    g = _groups(groups, "all_gather")
    shard_count = g[0] if g[1] else _world_size()
    dim = dim % max(value.dim(), 1)
    r = _record(ir.all_gather, value, g, "all_gather", dim=dim, shard_count=shard_count)
    if output is not None:
        output.copy_(r)
        return output
    return r


def _write_output(output, r):
    """Makes `output` hold r: in place when the shapes agree, else (as
    PyTorch/XLA's *_out collectives do) output takes r's value and shape."""
    if output.shape == r.shape:
        output.copy_(r)
    else:
        output.data = r


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None,
                   output=None, pin_layout=True):
    """Reduces input over the group and leaves each replica its
    1/shard_count slice along scatter_dim, times scale. A list of tensors
    gives the list of their results (written into `output` when given)."""
    code = _reduce_code(reduce_type)
    g = _groups(groups, "reduce_scatter")
    if isinstance(input, list) and all(isinstance(t, torch.Tensor) for t in input):
        # Coalesced as PyTorch/XLA does: one collective per dtype.
        if output is not None:
            if not isinstance(output, list) or any(
                    not isinstance(o, torch.Tensor) for o in output):
                raise TypeError(f"`output` needs to be a list of Tensors, but given "
                                f"{type(output)}.")
            if len(output) != len(input):
                raise ValueError("`output` length doesn't match `input` length: "
                                 f"{len(output)} vs {len(input)}.")
        results = _reduce_scatter_coalesced(reduce_type, input, scale, scatter_dim,
                                            shard_count, groups)
        if output is None:
            return results
        for o, r in zip(output, results):
            _write_output(o, r)
        return output
    if not isinstance(input, torch.Tensor):
        raise TypeError("`input` needs to be a Tensor or a list of Tensors, but given "
                        f"{type(input)}.")
    dim = scatter_dim % max(input.dim(), 1)
    r = _scaled(_record(ir.reduce_scatter, input, g, "reduce_scatter", reduce=code, dim=dim,
                        shard_count=shard_count), scale)
    if output is not None:
        _write_output(output, r)
        return output
    return r


def _reduce_scatter_coalesced(reduce_type, inputs, scale, scatter_dim, shard_count, groups):
    """reduce_scatter of each tensor of inputs, one collective per dtype:
    each tensor, its scatter dim moved first, is seen as shard_count rows
    (row q: the elements of shard q); the rows of the tensors of one dtype
    are joined side by side, so one reduce_scatter along dim 0 leaves each
    replica its row, which splits back into every tensor's shard. The
    elements reduce exactly as one by one. A tensor that cannot be split
    this way (a scalar, a dim not divisible by shard_count) gets its own
    collective, which raises the usual error."""
    results = [None] * len(inputs)
    by_dtype = {}
    for k, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.device.type != "xla":
            raise TypeError(f"reduce_scatter expects tensors on an xla device, got "
                            f"{getattr(t, 'device', type(t).__name__)}")
        dim = scatter_dim % max(t.dim(), 1)
        if (t.dim() == 0 or not isinstance(shard_count, int) or shard_count <= 0
                or t.shape[dim] % shard_count):
            results[k] = reduce_scatter(reduce_type, t, scale, scatter_dim, shard_count, groups)
        else:
            by_dtype.setdefault(t.dtype, []).append(k)
    for ks in by_dtype.values():
        if len(ks) == 1:
            k = ks[0]
            results[k] = reduce_scatter(reduce_type, inputs[k], scale, scatter_dim, shard_count,
                                        groups)
            continue
        rows, shards = [], []
        for k in ks:
            t = inputs[k]
            dim = scatter_dim % t.dim()
            moved = t.movedim(dim, 0)
            shard = (moved.shape[0] // shard_count,) + tuple(moved.shape[1:])
            shards.append((k, dim, shard))
            rows.append(moved.reshape(shard_count, -1))
        joined = torch.cat(rows, dim=1)
        mine = reduce_scatter(reduce_type, joined, scale, 0, shard_count, groups)
        parts = mine.reshape(-1).split([r.shape[1] for r in rows])
        for (k, dim, shard), part in zip(shards, parts):
            results[k] = part.reshape(shard).movedim(0, dim)
    return results


def all_to_all(value, split_dimension, concat_dimension, split_count, groups=None,
               pin_layout=True):
    """Splits value into split_count pieces along split_dimension, sends
    piece i to replica i of the group, concatenates what arrives along
    concat_dimension."""
    g = _groups(groups, "all_to_all")
    rank = max(value.dim(), 1)
    return _record(ir.all_to_all, value, g, "all_to_all", split_dim=split_dimension % rank,
                   concat_dim=concat_dimension % rank, split_count=split_count)


def collective_permute(value, pairs):
    """Sends value from each pair's source replica to its target; a replica
    that no pair targets receives zeros."""
    flat = []
    for p in pairs:
        if len(p) != 2:
            raise ValueError(f"collective_permute: pairs must be (source, target), got {p!r}")
        flat += [int(p[0]), int(p[1])]
    if len(flat) > _MAX_IDS:
        raise ValueError(f"collective_permute: at most {_MAX_IDS // 2} pairs, got "
                         f"{len(flat) // 2}")
    return _record(ir.collective_permute, value, (2, flat), "collective_permute")
