"""Running a lazy graph on several devices of a PJRT plugin: SPMD-partitioned
(by the graph's sharding annotations, through XLA's SPMD partitioner) or
replicated (every device runs the whole program; collectives combine them).

The engine's own CPU backend computes every program unpartitioned (a
sharding never changes a value, docs/stablehlo.md); these functions are the
explicit path that really partitions. Nothing here changes the lazy tensors:
they stay pending, their values come back as CPU tensors.

    run_spmd(tensors)              -> global values of tensors (CPU)
    run_replicated(tensors, n, replica_inputs) -> per replica, the values
"""
import math

import torch

from torchtpu import _C, bridge, pjrt
from torchtpu.bridge import TT_STORAGE_TORCH

_clients = {}
_executables = {}


def plugin_client(num_devices):
    """A client of XLA's CPU plugin with num_devices devices (one per count,
    kept for the process)."""
    client = _clients.get(num_devices)
    if client is None:
        path = pjrt.find_cpu_plugin()
        if path is None:
            raise RuntimeError("no XLA CPU PJRT plugin installed (pip install xla-cpu-pjrt, "
                               "or set TORCHTPU_PJRT_CPU_PLUGIN)")
        client = pjrt.Client(path, {"cpu_device_count": int(num_devices)})
        _clients[num_devices] = client
    return client


def _emit(tensors):
    import torch_xla.distributed.spmd as xs
    xs.reapply_shardings()
    handles = [bridge.handle_of(t) for t in tensors]
    text, inputs, (in_specs, out_specs) = _C.stablehlo_emit_spmd(handles, True)
    return handles, text, inputs, in_specs, out_specs


def _input_value(entry):
    """The CPU tensor of one @main argument (key, kind, dtype, shape, value)."""
    _key, kind, dt, shape, value = entry
    tdt = TT_STORAGE_TORCH[dt]
    if kind == "scalar":
        return torch.tensor(value, dtype=tdt)
    if value is None:
        raise RuntimeError("run_spmd: an input has no value")
    n = math.prod(shape)
    if n == 0:
        return torch.empty(shape, dtype=tdt)
    return torch.frombuffer(bytearray(value), dtype=tdt)[:n].reshape(shape).clone()


def _tiles(spec, rank):
    """{partition: tile index (rank ints)} of a tiled spec; None otherwise."""
    kind, tile_dims, devices, _last, _n = spec
    if kind != "tiled":
        return None
    out = {}
    for flat, dev in enumerate(devices):
        idx, rest = [], flat
        for d in reversed(tile_dims):
            idx.append(rest % d)
            rest //= d
        out[dev] = tuple(reversed(idx))[:rank]
    return out


def shard_of(value, spec, partition):
    """The piece of value partition holds under spec (zero-padded to XLA's
    shard shape, ceil(dim / tiles), when a dim does not divide)."""
    tiles = _tiles(spec, value.dim()) if spec is not None else None
    if tiles is None:
        return value
    tile_dims = spec[1][:value.dim()]
    idx = tiles[partition]
    out = value
    for d, (t, i) in enumerate(zip(tile_dims, idx)):
        size = -(-value.shape[d] // t)
        piece = out.narrow(d, min(i * size, value.shape[d]),
                           max(0, min(size, value.shape[d] - i * size)))
        if piece.shape[d] < size:
            pad_shape = list(piece.shape)
            pad_shape[d] = size - piece.shape[d]
            piece = torch.cat([piece, torch.zeros(pad_shape, dtype=piece.dtype)], dim=d)
        out = piece
    return out.contiguous()


def assemble(shards, spec, shape):
    """The global value from every partition's piece (shards[p]), cropping
    XLA's padding; replicated and manual values are partition 0's."""
    tiles = _tiles(spec, len(shape)) if spec is not None else None
    if tiles is None:
        return shards[0]
    tile_dims = spec[1][:len(shape)]
    first = shards[0]
    full_shape = [-(-s // t) * t for s, t in zip(shape, tile_dims)]
    out = torch.zeros(full_shape, dtype=first.dtype)
    for p, idx in tiles.items():
        region = out
        for d, (t, i) in enumerate(zip(tile_dims, idx)):
            size = full_shape[d] // t
            region = region.narrow(d, i * size, size)
        region.copy_(shards[p])
    for d, s in enumerate(shape):
        out = out.narrow(d, 0, s)
    return out.contiguous()


def _compile(client, text, **options):
    key = (id(client), text, tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                          for k, v in options.items())))
    exe = _executables.get(key)
    if exe is None:
        exe = client.compile(text, **options)
        _executables[key] = exe
    return exe


def _partition_order(client, exe, assignment):
    """For each of exe's argument lists, the position in assignment of the
    device it runs on."""
    ids = [d["id"] for d in client.devices()]
    return [assignment.index(ids[i]) for i in exe.devices()]


def run_spmd(tensors, client=None, with_shards=False):
    """Runs the lazy graph that computes tensors through a PJRT plugin,
    partitioned by XLA's SPMD partitioner over the device count of its
    sharding annotations (xs.mark_sharding): every device gets its shard of
    each sharded input and the whole of every other input, one execution
    runs all devices, and the outputs are assembled from their shards.
    Unannotated inputs and outputs are replicated. Returns CPU tensors, the
    global values, in order. client: a pjrt.Client with at least that many
    devices (default: XLA's CPU plugin with exactly that many)."""
    tensors = list(tensors)
    _handles, text, inputs, in_specs, out_specs = _emit(tensors)
    counts = {s[4] for s in in_specs + out_specs if s is not None and s[4] > 0}
    if not counts:
        raise ValueError("run_spmd: no input or output of the graph carries a sharding "
                         "(xs.mark_sharding)")
    if len(counts) > 1:
        raise ValueError(f"run_spmd: shardings over different device counts {sorted(counts)}")
    n = counts.pop()
    client = client or plugin_client(n)
    assignment = list(range(n))
    exe = _compile(client, text, num_partitions=n, use_spmd_partitioning=True,
                   device_assignment=assignment)
    values = [_input_value(e) for e in inputs]
    order = _partition_order(client, exe, assignment)
    lists = [[shard_of(v, s, p) for v, s in zip(values, in_specs)] for p in order]
    outs = exe.run_devices(lists, as_torch=True)
    by_partition = {p: o for p, o in zip(order, outs)}
    results, all_shards = [], []
    for k, t in enumerate(tensors):
        shards = {p: by_partition[p][k] for p in range(n)}
        results.append(assemble(shards, out_specs[k], tuple(t.shape)))
        all_shards.append(shards)
    return (results, all_shards) if with_shards else results


def run_replicated(tensors, num_replicas, replica_inputs=None, client=None):
    """Runs the lazy graph that computes tensors as a replicated program on
    num_replicas devices of a PJRT plugin (num_replicas replicas, one
    partition; the form cross-replica collectives such as xm.all_reduce
    with groups use). replica_inputs maps an input xla tensor of the graph
    to its num_replicas per-replica CPU values; every other input has the
    same value on every replica. Returns, per replica, the CPU values of
    tensors."""
    tensors = list(tensors)
    _handles, text, inputs, _in_specs, _out_specs = _emit(tensors)
    by_key = {}
    for t, vals in (replica_inputs or {}).items():
        key = _C.stablehlo_tensor_key(bridge.handle_of(t))
        if key is None:
            raise ValueError("run_replicated: a replica_inputs key is not device data (sync it "
                             "first)")
        vals = list(vals)
        if len(vals) != num_replicas:
            raise ValueError(f"run_replicated: {len(vals)} values for {num_replicas} replicas")
        by_key[key] = [v.detach().cpu().contiguous() for v in vals]
    unknown = set(by_key) - {e[0] for e in inputs}
    if unknown:
        raise ValueError("run_replicated: a replica_inputs key is not an input of the graph")
    client = client or plugin_client(num_replicas)
    assignment = list(range(num_replicas))
    exe = _compile(client, text, num_replicas=num_replicas, device_assignment=assignment)
    values = [_input_value(e) for e in inputs]
    order = _partition_order(client, exe, assignment)
    lists = [[by_key[e[0]][r] if e[0] in by_key else v for e, v in zip(inputs, values)]
             for r in order]
    outs = exe.run_devices(lists, as_torch=True)
    by_replica = {r: o for r, o in zip(order, outs)}
    return [by_replica[r] for r in range(num_replicas)]
