"""torch_xla.distributed.xla_backend: the "xla" backend of torch.distributed.

Importing this module registers the backend (`dist.init_process_group("xla")`)
and the `xla://` init method (torch_xla/_internal/rendezvous.py). Each c10d
collective on xla tensors records the matching xm collective into the lazy
graph, over the group's ranks, and returns a completed Work: like
PyTorch/XLA, the data moves when the graph runs (the next sync), not when
the Work is waited on.

Ranks are xla replica ordinals (xr.global_ordinal()). This runtime has one
replica per process, so a group has one rank here (every collective is
then an identity, gather/scatter a copy); several devices and processes
are the multi-process work (docs/status.md)."""
import datetime
from typing import List, Optional

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

import torch_xla.core.xla_model as xm

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
    return ProcessGroupXla(prefix_store, rank, size, timeout)


def _register_xla_backend():
    dist.Backend.register_backend("xla", _create_xla_process_group, devices="xla")


def _done(result=None):
    """A Work that is already complete (the collective is in the graph)."""
    fut = torch.futures.Future()
    fut.set_result(result if result is not None else [])
    return torch._C._distributed_c10d._create_work_from_future(fut)


class ProcessGroupXla(ProcessGroup):
    """The c10d process group of xla devices (a Python ProcessGroup)."""

    def __init__(self, prefix_store, rank, size, timeout):
        super().__init__(rank, size)
        self.prefix_store = prefix_store
        self.timeout = timeout
        self._mesh = []  # replica groups; [] is every replica
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
        raise NotImplementedError(f"reduce op {reduce_op} is not supported by the xla backend")

    # ------------------------------------------------------ collectives
    def allreduce(self, tensors, all_reduce_options):
        xm.all_reduce(self._get_reduce_type(all_reduce_options.reduceOp), tensors,
                      groups=self._mesh, pin_layout=False)
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def _allgather_base(self, output_tensor, input_tensor, opts=None):
        gathered = xm.all_gather(input_tensor.reshape(-1) if input_tensor.dim() == 0 else
                                 input_tensor, dim=0, groups=self._mesh, pin_layout=False)
        output_tensor.copy_(gathered.reshape(output_tensor.shape))
        return _done([output_tensor])

    # torch >= 2.10 names the single-tensor forms *_single.
    def all_gather_single(self, output_tensor, input_tensor, opts=None):
        return self._allgather_base(output_tensor, input_tensor, opts)

    def all_gather_single_coalesced(self, output_tensors, input_tensors, opts=None):
        for out, x in zip(output_tensors, input_tensors):
            self._allgather_base(out, x, opts)
        return _done(output_tensors)

    def allgather(self, output_tensors_list, input_tensors, opts=None):
        for outputs, x in zip(output_tensors_list, input_tensors):
            gathered = xm.all_gather(x.unsqueeze(0), dim=0, groups=self._mesh,
                                     pin_layout=False)
            for i, out in enumerate(outputs):
                out.copy_(gathered[i])
        return _done(output_tensors_list)

    def allgather_coalesced(self, output_tensors_list, input_tensors, opts=None):
        return self.allgather(output_tensors_list, input_tensors, opts)

    def broadcast(self, tensors, opts):
        xm.collective_broadcast(tensors, opts.rootRank, groups=self._mesh, pin_layout=False)
        return _done(tensors)

    def reduce_scatter(self, output_tensors, input_tensors_list, opts):
        reduce_type = self._get_reduce_type(opts.reduceOp)
        for out, inputs in zip(output_tensors, input_tensors_list):
            stacked = torch.cat([t.unsqueeze(0) for t in inputs], dim=0)
            shard = xm.reduce_scatter(reduce_type, stacked, scale=1.0, scatter_dim=0,
                                      shard_count=self.size(), groups=self._mesh,
                                      pin_layout=False)
            out.copy_(shard.reshape(out.shape))
        return _done(output_tensors)

    def reduce_scatter_coalesced(self, output_tensors, input_tensors_list, opts):
        return self.reduce_scatter(output_tensors, input_tensors_list, opts)

    def _reduce_scatter_base(self, output_tensor, input_tensor, opts):
        shard = xm.reduce_scatter(self._get_reduce_type(opts.reduceOp), input_tensor,
                                  scale=1.0, scatter_dim=0, shard_count=self.size(),
                                  groups=self._mesh, pin_layout=False)
        output_tensor.copy_(shard.reshape(output_tensor.shape))
        return _done([output_tensor])

    def reduce_scatter_single(self, output_tensor, input_tensor, opts):
        return self._reduce_scatter_base(output_tensor, input_tensor, opts)

    def reduce_scatter_single_coalesced(self, output_tensors, input_tensors, opts):
        for out, x in zip(output_tensors, input_tensors):
            self._reduce_scatter_base(out, x, opts)
        return _done(output_tensors)

    def reduce(self, tensors, opts):
        # Every rank computes the reduction (one graph for all); only the
        # root's result is meaningful to c10d.
        xm.all_reduce(self._get_reduce_type(opts.reduceOp), tensors, groups=self._mesh,
                      pin_layout=False)
        return _done(tensors)

    def alltoall(self, output_tensor_list, input_tensor_list, opts=None):
        stacked = torch.cat([t.unsqueeze(0) for t in input_tensor_list], dim=0)
        result = xm.all_to_all(stacked, split_dimension=0, concat_dimension=0,
                               split_count=self.size(), groups=self._mesh, pin_layout=False)
        for i, out in enumerate(output_tensor_list):
            out.copy_(result[i])
        return _done(output_tensor_list)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        if output_split_sizes or input_split_sizes:
            raise NotImplementedError("the xla backend supports only even all_to_all splits "
                                      "(output_split_sizes and input_split_sizes empty)")
        result = xm.all_to_all(input, split_dimension=0, concat_dimension=0,
                               split_count=self.size(), groups=self._mesh, pin_layout=False)
        output.copy_(result)
        return _done([output])

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def gather(self, output_tensors_list, input_tensor_list, opts):
        for x, outputs in zip(input_tensor_list, output_tensors_list or
                              [[] for _ in input_tensor_list]):
            gathered = xm.all_gather(x.unsqueeze(0), dim=0, groups=self._mesh,
                                     pin_layout=False)
            if self.rank() == opts.rootRank:
                for i, out in enumerate(outputs):
                    out.copy_(gathered[i])
        return _done(output_tensors_list)

    def scatter(self, output_tensor_list, input_tensors_list, opts):
        for j, out in enumerate(output_tensor_list):
            if self.rank() == opts.rootRank:
                stacked = torch.cat([t.unsqueeze(0) for t in input_tensors_list[j]], dim=0)
            else:
                stacked = torch.zeros((self.size(), *out.shape), dtype=out.dtype,
                                      device=out.device)
            xm.collective_broadcast([stacked], opts.rootRank, groups=self._mesh,
                                    pin_layout=False)
            out.copy_(stacked[self.rank()])
        return _done(output_tensor_list)

    def barrier(self, opts=None):
        # The graphs recorded so far run before anyone passes.
        xm.mark_step()
        xm.wait_device_ops()
        xm.rendezvous("xla_backend_barrier")
        return _done()

    def send(self, tensors, dst_rank, tag=0):
        raise NotImplementedError(
            "send on the xla backend needs a peer replica; this runtime runs one replica "
            "per process")

    def recv(self, out_tensors, src_rank, tag=0):
        raise NotImplementedError(
            "recv on the xla backend needs a peer replica; this runtime runs one replica "
            "per process")

    def recv_anysource(self, *args):
        raise NotImplementedError("recv_anysource is not supported by the xla backend")

    def monitored_barrier(self, *args):
        raise NotImplementedError("monitored_barrier is not supported by the xla backend")

    def Options(self, *args):
        raise NotImplementedError("ProcessGroupXla has no Options")


def new_xla_process_group(ranks: Optional[List[int]] = None,
                          timeout: datetime.timedelta = datetime.timedelta(minutes=30),
                          backend=None, pg_options=None,
                          use_local_synchronization: bool = False):
    """dist.new_group(ranks, backend="xla") whose collectives use ranks as
    their replica group."""
    pg = dist.new_group(ranks=ranks, timeout=timeout, backend="xla", pg_options=pg_options,
                        use_local_synchronization=use_local_synchronization)
    if isinstance(pg, ProcessGroupXla) and ranks:
        pg._mesh = [sorted(int(r) for r in ranks)]
    return pg


_register_xla_backend()

from torch_xla._internal import rendezvous as _rendezvous  # noqa: E402

dist.register_rendezvous_handler("xla", _rendezvous.pjrt_rendezvous_handler)
