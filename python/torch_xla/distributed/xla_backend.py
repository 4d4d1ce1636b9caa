"""torch_xla.distributed.xla_backend: the "xla" backend of torch.distributed.

Importing this module registers the backend (`dist.init_process_group("xla")`),
the `xla://` init method (torch_xla/_internal/rendezvous.py), the kernels
that let c10d's dispatcher ops and the functional collectives run on xla
tensors (torch_xla/distributed/c10d_xla_kernels.py), and replaces
`dist.new_group` with new_xla_process_group, as PyTorch/XLA does.

Each c10d collective on xla tensors records the matching xm collective into
the lazy graph over the group's replica groups and returns a completed Work:
as in PyTorch/XLA the data moves when the graph runs (the next sync), not
when the Work is waited on. reduce, gather, send and recv sync the graph
themselves (their ranks take different paths afterwards; send and recv move
their data through the group's store, torchtpu/point_to_point.py), and barrier syncs,
waits for the device and meets every rank.

Ranks are xla replica ordinals (xr.global_ordinal()), one rank per process:
torch.distributed's default group is process-wide state. Inside a
torch_xla.launch / xmp.spawn that runs several replicas as threads of one
process, those threads cannot each be a rank of it, so creating an xla
process group there raises a RuntimeError (use the xm collectives inside a
launch, or one process per device). Outside a launch, and in a launch whose
processes hold one replica each, the group has one rank per process; with a
single process it has one rank, and every collective is an identity.
docs/torch-distributed.md describes what runs where."""
import datetime
import logging
from typing import List, Optional

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, ReduceScatterOptions

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla._internal import rendezvous as _rendezvous

# c10d's ReduceOp compares equal to its RedOpType but does not hash like it.
_REDUCE_TYPES = (
    (dist.ReduceOp.SUM, xm.REDUCE_SUM),
    (dist.ReduceOp.PRODUCT, xm.REDUCE_MUL),
    (dist.ReduceOp.MIN, xm.REDUCE_MIN),
    (dist.ReduceOp.MAX, xm.REDUCE_MAX),
    (dist.ReduceOp.BAND, xm.REDUCE_AND),
    (dist.ReduceOp.BOR, xm.REDUCE_OR),
)


def _create_xla_process_group(prefix_store, rank, size, timeout):
    if xr.is_spmd():
        # PyTorch/XLA asserts the same: SPMD programs have one device view
        # per process and use a CPU group for host-side coordination.
        raise AssertionError("XLA backend is not supported with SPMD. Please use a CPU "
                             "process group instead.")
    _rendezvous.refuse_threaded_launch()
    return ProcessGroupXla(prefix_store, rank, size, timeout)


def _register_xla_backend():
    dist.Backend.register_backend("xla", _create_xla_process_group, devices="xla")


def _done(result=None):
    """A Work that is already complete (the collective is in the graph)."""
    fut = torch.futures.Future()
    fut.set_result(result if result is not None else [])
    return torch._C._distributed_c10d._create_work_from_future(fut)


def _check_same_shapes(tensors):
    first = tensors[0].shape
    for i, t in enumerate(tensors[1:]):
        if t.shape != first:
            raise ValueError(f"Input {i + 1}'s shape is different from input 0: "
                             f"{t.shape} vs {first}")


_SEND_RECV_WARNING = ("Individual send/recv ops are inefficient on an XLA device. Consider "
                      "using xla_model.collective_permute() and specifying all "
                      "source-target pairs.")

class ProcessGroupXla(ProcessGroup):
    """The c10d process group of xla devices (a Python ProcessGroup: c10d
    calls these methods from Python and, through its trampoline, from C++,
    e.g. DistributedDataParallel's reducer)."""

    def __init__(self, prefix_store, rank, size, timeout):
        super().__init__(rank, size)
        self.prefix_store = prefix_store
        self.timeout = timeout
        self._mesh = []  # replica groups of the collectives; [] is every replica
        self._group_name = None

    def getBackendName(self):
        return "xla"

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self):
        return self._group_name

    def _get_reduce_type(self, reduce_op):
        for op, name in _REDUCE_TYPES:
            if reduce_op == op:
                return name
        if reduce_op == dist.ReduceOp.BXOR:
            raise NotImplementedError(f"reduce op {reduce_op}")
        raise ValueError(f"Invalid reduce op {reduce_op}")

    def _shard_count(self):
        return len(self._mesh[0]) if self._mesh else self.size()

    # ------------------------------------------------------ all-reduce
    def allreduce(self, tensors, all_reduce_options):
        xm.all_reduce(self._get_reduce_type(all_reduce_options.reduceOp), tensors,
                      groups=self._mesh, pin_layout=False)
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts):
        # PyTorch/XLA raises NotImplementedError; the same all-reduce per
        # tensor is what coalescing would compute.
        return self.allreduce(tensors, opts)

    # ------------------------------------------------------ all-gather
    def _allgather_base(self, output_tensor, input_tensor, opts=None):
        """dist.all_gather_into_tensor: output is the inputs concatenated
        along dim 0, or stacked along a new dim 0."""
        if input_tensor.dim() == 0:
            input_tensor = input_tensor.reshape(1)
        result = xm.all_gather(input_tensor, dim=0, groups=self._mesh, pin_layout=False)
        if result.shape != output_tensor.shape:
            stacked = torch.stack(torch.split(result, input_tensor.shape[0], dim=0), dim=0)
            if stacked.shape != output_tensor.shape:
                raise ValueError(
                    f"Input shape {input_tensor.shape} and output shape {output_tensor.shape} "
                    "are not compatible for all_gather_into_tensor. Input must be stacked or "
                    "concatenated to create output.")
            result = stacked
        output_tensor.copy_(result)
        return _done([output_tensor])

    # torch >= 2.10 names the single-tensor forms *_single.
    def all_gather_single(self, output_tensor, input_tensor, opts=None):
        return self._allgather_base(output_tensor, input_tensor, opts)

    def all_gather_single_coalesced(self, output_tensors, input_tensors, opts=None):
        for out, x in zip(output_tensors, input_tensors):
            self._allgather_base(out, x, opts)
        return _done(output_tensors)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _gather_chunks(self, x):
        """x of every rank of the group, as a list (scalars stay scalars)."""
        scalar = x.dim() == 0
        flat = x.reshape(1) if scalar else x
        result = xm.all_gather(flat, dim=0, groups=self._mesh, pin_layout=False)
        chunks = torch.split(result, flat.shape[0], dim=0)
        return [c.reshape(()) for c in chunks] if scalar else list(chunks)

    def allgather(self, output_tensors_list, input_tensors, opts=None):
        for outputs, x in zip(output_tensors_list, input_tensors):
            for out, chunk in zip(outputs, self._gather_chunks(x)):
                with torch.no_grad():
                    out.copy_(chunk)
        return _done([t for outputs in output_tensors_list for t in outputs])

    def allgather_coalesced(self, output_tensors_list, input_tensors, opts=None):
        return self.allgather(output_tensors_list, input_tensors, opts)

    # ------------------------------------------------------ broadcast
    def broadcast(self, tensors, opts):
        root = tensors[opts.rootTensor]
        # xm collectives name replicas by global ordinal, c10d by group rank.
        try:
            src = dist.get_global_rank(self, opts.rootRank)
        except (ValueError, RuntimeError):  # a group c10d has not registered
            src = opts.rootRank
        xm.collective_broadcast([root], src, groups=self._mesh, pin_layout=False)
        return _done([root])

    # ------------------------------------------------------ reduce-scatter
    def reduce_scatter(self, output_tensors, input_tensors_list, opts):
        reduce_type = self._get_reduce_type(opts.reduceOp)
        for out, inputs in zip(output_tensors, input_tensors_list):
            _check_same_shapes(inputs)
            xm.reduce_scatter(reduce_type, torch.cat(inputs), scale=1.0, scatter_dim=0,
                              shard_count=self._shard_count(), groups=self._mesh,
                              output=out, pin_layout=False)
        return _done(output_tensors)

    def reduce_scatter_coalesced(self, output_tensors, input_tensors_list, opts):
        return self.reduce_scatter(output_tensors, input_tensors_list, opts)

    def _reduce_scatter_base(self, output_tensor, input_tensor, opts):
        """dist.reduce_scatter_tensor: dim 0 of input holds the group's
        shards."""
        xm.reduce_scatter(self._get_reduce_type(opts.reduceOp), input_tensor, scale=1.0,
                          scatter_dim=0, shard_count=self._shard_count(), groups=self._mesh,
                          output=output_tensor, pin_layout=False)
        return _done([output_tensor])

    def reduce_scatter_single(self, output_tensor, input_tensor, opts):
        return self._reduce_scatter_base(output_tensor, input_tensor, opts)

    def reduce_scatter_single_coalesced(self, output_tensors, input_tensors, opts):
        for out, x in zip(output_tensors, input_tensors):
            self._reduce_scatter_base(out, x, opts)
        return _done(output_tensors)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # ------------------------------------------------------ rooted ops
    def reduce(self, tensors, opts):
        """dist.reduce: only the root's tensors take the result. Every rank
        runs the same all-reduce graph (so their programs match), syncs, and
        then only the root copies."""
        reduce_type = self._get_reduce_type(opts.reduceOp)
        for tensor in tensors:
            result = xm.all_reduce(reduce_type, tensor, groups=self._mesh, pin_layout=False)
            torch_xla.sync()
            if self.rank() == opts.rootRank:
                tensor.copy_(result)
        return _done(tensors)

    def gather(self, output_tensors_list, input_tensor_list, opts):
        """dist.gather: every rank all-gathers and syncs (same graph), the
        root keeps the pieces."""
        is_root = self.rank() == opts.rootRank
        for i, x in enumerate(input_tensor_list):
            chunks = self._gather_chunks(x)
            torch_xla.sync()
            if is_root:
                for out, chunk in zip(output_tensors_list[i], chunks):
                    out.copy_(chunk.reshape(out.shape))
        return _done(output_tensors_list if is_root else [[]])

    def scatter(self, output_tensor_list, input_tensors_list, opts):
        """dist.scatter as a summed reduce-scatter in which only the root
        contributes non-zero pieces."""
        if self.rank() == opts.rootRank:
            inputs = input_tensors_list
        else:
            inputs = [[torch.zeros_like(out)] * self.size() for out in output_tensor_list]
        rs_opts = ReduceScatterOptions()
        rs_opts.reduceOp = dist.ReduceOp.SUM
        return self.reduce_scatter(output_tensor_list, inputs, rs_opts)

    # ------------------------------------------------------ all-to-all
    def alltoall(self, output_tensor_list, input_tensor_list, opts=None):
        split_count = len(input_tensor_list)
        stacked = xm.all_to_all(torch.stack(input_tensor_list, dim=0), split_dimension=0,
                                concat_dimension=0, split_count=split_count,
                                groups=self._mesh, pin_layout=False)
        for out, piece in zip(output_tensor_list, torch.chunk(stacked, split_count, dim=0)):
            out.copy_(piece.squeeze(0))
        return _done(output_tensor_list)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        """dist.all_to_all_single with even splits along dim 0 (XLA's
        all-to-all has no per-rank sizes; PyTorch/XLA asserts the same)."""
        if output_split_sizes or input_split_sizes:
            raise AssertionError("XLA doesn't support specifying non-empty output_split_sizes "
                                 "and input_split_sizes")
        result = xm.all_to_all(input, 0, 0, self._shard_count(), groups=self._mesh,
                               pin_layout=False)
        output.copy_(result)
        return _done([output])

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    # ------------------------------------------------------ barrier, p2p
    def barrier(self, opts=None):
        """A real barrier: the graphs recorded so far run and finish on this
        rank, then every rank of the process meets (PyTorch/XLA's barrier
        returns at once)."""
        torch_xla.sync()
        xm.wait_device_ops()
        xm.rendezvous("xla_backend_barrier")
        return _done()

    def send(self, tensors, dst_rank, tag=0):
        """Buffered: each tensor's value goes to the group's store, for the
        recv of dst_rank with the same tag (in order; torchtpu/point_to_point.py),
        so dst_rank need not be issuing the matching recv at the same time
        (PyTorch/XLA records a collective_permute that both ranks must join)."""
        logging.warning(_SEND_RECV_WARNING)
        from torchtpu import point_to_point
        key = ("dist", self.rank(), int(dst_rank), int(tag))
        for t in tensors:
            point_to_point.send(t, key, f"send to rank {dst_rank} (tag {tag})",
                                store=self.prefix_store)
        return _done(list(tensors))

    def recv(self, out_tensors, src_rank, tag=0):
        logging.warning(_SEND_RECV_WARNING)
        from torchtpu import point_to_point
        key = ("dist", int(src_rank), self.rank(), int(tag))
        for out in out_tensors:
            result = point_to_point.recv(out, key, f"recv from rank {src_rank} (tag {tag})",
                                         store=self.prefix_store)
            with torch.no_grad():
                out.copy_(result)
        return _done(list(out_tensors))

    def recv_anysource(self, *args):
        raise NotImplementedError("recv_anysource is not supported by the xla backend")

    def monitored_barrier(self, *args):
        raise NotImplementedError("monitored_barrier is not supported by the xla backend")

    def Options(self, *args):
        raise NotImplementedError("ProcessGroupXla has no Options")


# ------------------------------------------------------- dist.new_group
_orig_new_group_fn = dist.new_group


def _infer_mesh(slice_ranks, world_size):
    """The rectangular mesh of world_size ranks that has slice_ranks as one
    of its rows: consecutive ranks give rows of the world split in order,
    ranks `world_size / len` apart give the strided rows (columns of the
    consecutive layout)."""
    n = len(slice_ranks)
    if world_size % n != 0:
        raise ValueError("Given slice length doesn't equal to a side of a rectangle. "
                         f"World size: {world_size}, slice length: {n}")
    start, step = slice_ranks[0], slice_ranks[1] - slice_ranks[0]
    if slice_ranks != list(range(start, start + step * n, step)):
        raise ValueError(f"Given slice isn't a range with evenly distributed steps: "
                         f"{slice_ranks}")
    rows = world_size // n
    if step == 1:
        if start % n != 0 or start >= world_size:
            raise ValueError("Given horizontal slice doesn't have a correct start: "
                             f"World size: {world_size}, slice length: {n}, slice: "
                             f"{slice_ranks}")
        mesh = [list(range(r * n, (r + 1) * n)) for r in range(rows)]
    else:
        if start >= rows:
            raise ValueError("Given vertical slice doesn't have a correct start: "
                             f"World size: {world_size}, slice length: {n}, slice: "
                             f"{slice_ranks}")
        if step != rows:
            raise ValueError("Given vertical slice doesn't have a correct step: "
                             f"World size: {world_size}, slice length: {n}, slice: "
                             f"{slice_ranks}")
        mesh = [list(range(r, r + n * step, step)) for r in range(rows)]
    return mesh


def new_xla_process_group(ranks=None,
                          timeout: datetime.timedelta = dist.default_pg_timeout,
                          backend=None, pg_options=None, **kwargs):
    """dist.new_group (which this replaces) that gives an xla group the
    replica groups its collectives use. Every rank of a collective takes
    part in the same XLA op, so a group of some ranks becomes a mesh of
    disjoint groups covering the world: the group itself when it is the
    world, one group per rank for a single rank, the mesh given as
    pg_options={'xla_pg_options': {'mesh': ...}}, or with {'spmd': True}
    the rectangle inferred from the ranks; other subsets are one group."""
    mesh = None
    infer = False
    if isinstance(pg_options, dict) and "xla_pg_options" in pg_options:
        mesh = pg_options["xla_pg_options"].get("mesh", None)
        if mesh is None:
            infer = pg_options["xla_pg_options"].get("spmd", False)
    pg = _orig_new_group_fn(ranks=ranks, timeout=timeout, backend=backend,
                            pg_options=pg_options, **kwargs)
    if not isinstance(pg, ProcessGroupXla) or ranks is None:
        return pg
    world = dist.group.WORLD
    if not isinstance(world, ProcessGroupXla):
        raise RuntimeError("xla backend requires the default ProcessGroup to be a "
                           "ProcessGroupXla")
    ranks = [int(r) for r in ranks]
    size = world.size()
    if ranks == list(range(size)):
        pg._mesh = [ranks]
    elif len(ranks) == 1:
        if ranks[0] not in range(size):
            raise ValueError(f"Given ranks is out of range: World size: {size}, ranks: {ranks}")
        pg._mesh = [[r] for r in range(size)]
    elif 1 < len(ranks) < size:
        pg._mesh = mesh if mesh else (_infer_mesh(ranks, size) if infer else [ranks])
    else:
        logging.warning(f"Can't infer process group mesh from given ranks \"{ranks}\". The "
                        "process group will use the entire world as its collective comm group.")
    return pg


dist.new_group = new_xla_process_group

_register_xla_backend()
dist.register_rendezvous_handler("xla", _rendezvous.pjrt_rendezvous_handler)

from torch_xla.distributed import c10d_xla_kernels as _c10d_xla_kernels  # noqa: E402,F401
