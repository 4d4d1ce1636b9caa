"""Kernels for torch.distributed's dispatcher ops on xla tensors.

Two op namespaces reach xla tensors through the dispatcher:
- `_c10d_functional` (the functional collectives, DTensor, and compiled
  code): all_reduce, all_gather_into_tensor, reduce_scatter_tensor,
  all_to_all_single, broadcast, their in-place / out= / coalesced forms,
  and wait_tensor. Each records the xm collective over the group's replica
  groups and returns the result, as PyTorch/XLA's XLA kernels do;
  wait_tensor returns its input (the data moves when the graph runs).
- `c10d` (c10d::allreduce_, broadcast_, ...): what C++ callers run for the
  ProcessGroup methods c10d's Python trampoline does not forward (reduce,
  gather, scatter, alltoall, the *_base forms) and what code calling the
  ops with `group.boxed()` runs. Each calls the ProcessGroupXla method.

xla tensors are a Python subclass under functionalization (docs/
tensor-bridge.md), so the dispatcher brings these ops to
XlaTensor.__torch_dispatch__ (the Python key comes before the XLA backend
key), which looks them up in the lowering table: they are registered there.
Without them the ops took the CPU fallback, and c10d ran the collective on
host copies. A kernel receives the inner tensors with functionalization
excluded; it re-enables it (_user_level) so the xm collectives and the
process group's methods run on ordinary xla tensors, then gives the inner
tensors the results (c10d ops write their tensor arguments in place)."""
import contextlib

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives  # noqa: F401  (defines _wrap_tensor_autograd)
from torch._C._distributed_c10d import (AllgatherOptions, AllreduceCoalescedOptions,
                                        AllreduceOptions, AllToAllOptions, BarrierOptions,
                                        BroadcastOptions, GatherOptions, ReduceOptions,
                                        ReduceScatterOptions, ScatterOptions)

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torchtpu import bridge
from torchtpu.bridge import XlaTensor
from torchtpu.lowering.core import lowers

_F = torch.ops._c10d_functional
_C10D = torch.ops.c10d


@contextlib.contextmanager
def _user_level():
    """Functionalization back on for the ops issued inside (a kernel runs
    below it)."""
    include = torch._C._dispatch_tls_local_include_set()
    exclude = torch._C._dispatch_tls_local_exclude_set().remove(
        torch._C.DispatchKey.Functionalize)
    with torch._C._ForceDispatchKeyGuard(include, exclude):
        yield


def _user(x):
    return bridge.wrap_user(x._h)


def _inner(u):
    return XlaTensor(bridge.handle_of(u))


def _assign(inner, u):
    inner._h = bridge.handle_of(u)
    return inner


# ---------------------------------------------------------- groups
class _Group:
    """A functional collective's group: its xm replica groups, its size,
    and the global rank of a group rank."""

    def __init__(self, group_name):
        from torch_xla.distributed.xla_backend import ProcessGroupXla
        if group_name is None or group_name == "":
            # PyTorch/XLA's xm.all_reduce under dynamo passes "": every replica.
            self.pg, self.mesh, self.size = None, [], xr.world_size()
            return
        if isinstance(group_name, torch.ScriptObject):
            pg = dist.ProcessGroup.unbox(group_name)
        else:
            pg = torch._C._distributed_c10d._resolve_process_group(group_name)
        if not isinstance(pg, ProcessGroupXla):
            raise RuntimeError(
                f"collective on xla tensors over process group {group_name!r}, whose backend is "
                f"{pg.name()!r}: xla tensors need a group of the 'xla' backend "
                "(dist.init_process_group('xla') or dist.new_group(backend='xla'))")
        self.pg, self.mesh, self.size = pg, pg._mesh, pg._shard_count()

    def global_rank(self, rank):
        if self.pg is None:
            return rank
        try:
            return dist.get_global_rank(self.pg, rank)
        except (ValueError, RuntimeError):
            return rank

    def check_size(self, group_size, what):
        if int(group_size) != self.size:
            raise ValueError(f"{what}: group_size {group_size} does not match the group's "
                             f"{self.size} ranks")


# The functional collectives' reduce ops: PyTorch's names (ReduceOp
# lowercased) and PyTorch/XLA's xm names. avg is the sum times 1/size.
_REDUCE = {
    "sum": xm.REDUCE_SUM, "avg": xm.REDUCE_SUM, "product": xm.REDUCE_MUL,
    "mul": xm.REDUCE_MUL, "min": xm.REDUCE_MIN, "max": xm.REDUCE_MAX,
    "band": xm.REDUCE_AND, "and": xm.REDUCE_AND, "bor": xm.REDUCE_OR, "or": xm.REDUCE_OR,
}


def _reduce(reduce_op, group):
    """(xm reduce type, scale) of a functional reduce op name."""
    name = str(reduce_op).lower()
    if name not in _REDUCE:
        raise RuntimeError(f"Unknown AllReduce type: {reduce_op} (the xla backend supports "
                           f"{', '.join(sorted(_REDUCE))})")
    return _REDUCE[name], (1.0 / group.size if name == "avg" else 1.0)


# ---------------------------------------------- _c10d_functional kernels
def _all_reduce(x, reduce_op, group_name):
    g = _Group(group_name)
    reduce_type, scale = _reduce(reduce_op, g)
    with _user_level():
        return xm.all_reduce(reduce_type, _user(x), scale=scale, groups=g.mesh,
                             pin_layout=False)


@lowers(_F.all_reduce.default)
def all_reduce(x, reduce_op, group_name):
    return _inner(_all_reduce(x, reduce_op, group_name))


@lowers(_F.all_reduce_.default)
def all_reduce_inplace(x, reduce_op, group_name):
    return _assign(x, _all_reduce(x, reduce_op, group_name))


@lowers(_F.all_reduce_coalesced.default)
def all_reduce_coalesced(xs, reduce_op, group_name):
    return [all_reduce(x, reduce_op, group_name) for x in xs]


@lowers(_F.all_reduce_coalesced_.default)
def all_reduce_coalesced_inplace(xs, reduce_op, group_name):
    return [all_reduce_inplace(x, reduce_op, group_name) for x in xs]


def _all_gather(x, group_size, group_name):
    """The inputs of the group's ranks concatenated along dim 0."""
    g = _Group(group_name)
    g.check_size(group_size, "all_gather_into_tensor")
    with _user_level():
        u = _user(x)
        return xm.all_gather(u.reshape(1) if u.dim() == 0 else u, dim=0, groups=g.mesh,
                             pin_layout=False)


@lowers(_F.all_gather_into_tensor.default)
def all_gather_into_tensor(x, group_size, group_name):
    return _inner(_all_gather(x, group_size, group_name))


@lowers(_F.all_gather_into_tensor_out.default)
def all_gather_into_tensor_out(x, group_size, group_name, out):
    return _assign(out, _all_gather(x, group_size, group_name))


@lowers(_F.all_gather_into_tensor_coalesced.default)
def all_gather_into_tensor_coalesced(xs, group_size, group_name):
    return [all_gather_into_tensor(x, group_size, group_name) for x in xs]


def _reduce_scatter(x, reduce_op, group_size, group_name):
    """Dim 0 of x holds one shard per rank; this rank's reduced shard."""
    g = _Group(group_name)
    g.check_size(group_size, "reduce_scatter_tensor")
    if x.dim() == 0 or x.shape[0] % g.size:
        raise ValueError(f"reduce_scatter_tensor: dim 0 of the input ({list(x.shape)}) must "
                         f"split evenly into {g.size} shards")
    reduce_type, scale = _reduce(reduce_op, g)
    with _user_level():
        return xm.reduce_scatter(reduce_type, _user(x), scale, 0, g.size, groups=g.mesh,
                                 pin_layout=False)


@lowers(_F.reduce_scatter_tensor.default)
def reduce_scatter_tensor(x, reduce_op, group_size, group_name):
    return _inner(_reduce_scatter(x, reduce_op, group_size, group_name))


@lowers(_F.reduce_scatter_tensor_out.default)
def reduce_scatter_tensor_out(x, reduce_op, group_size, group_name, out):
    return _assign(out, _reduce_scatter(x, reduce_op, group_size, group_name))


@lowers(_F.reduce_scatter_tensor_coalesced.default)
def reduce_scatter_tensor_coalesced(xs, reduce_op, group_size, group_name):
    return [reduce_scatter_tensor(x, reduce_op, group_size, group_name) for x in xs]


@lowers(_F.all_to_all_single.default)
def all_to_all_single(x, output_split_sizes, input_split_sizes, group_name):
    g = _Group(group_name)
    if x.dim() == 0 or x.shape[0] % g.size:
        raise ValueError(f"all_to_all_single: dim 0 of the input ({list(x.shape)}) must split "
                         f"evenly into {g.size} pieces")
    even = x.shape[0] // g.size
    for sizes in (output_split_sizes, input_split_sizes):
        if sizes and any(int(s) != even for s in sizes):
            # XLA's all-to-all sends equal pieces (PyTorch/XLA's message).
            raise RuntimeError("torch_xla does not support arbitrary split sizes for all_to_all")
    with _user_level():
        return _inner(xm.all_to_all(_user(x), 0, 0, g.size, groups=g.mesh, pin_layout=False))


def _broadcast(x, src, group_name):
    """src's x on every rank; src is a rank of the group."""
    g = _Group(group_name)
    with _user_level():
        u = _user(x).clone()
        xm.collective_broadcast([u], g.global_rank(int(src)), groups=g.mesh, pin_layout=False)
        return u


@lowers(_F.broadcast.default)
def broadcast(x, src, group_name):
    return _inner(_broadcast(x, src, group_name))


@lowers(_F.broadcast_.default)
def broadcast_inplace(x, src, group_name):
    return _assign(x, _broadcast(x, src, group_name))


@lowers(_F.wait_tensor.default)
def wait_tensor(x):
    # The collective is a node of the lazy graph: nothing to wait for until
    # the graph runs, and reading the result runs it.
    return XlaTensor(x._h)


@lowers(_F._wrap_tensor_autograd.default)
def wrap_tensor_autograd(x):
    # PyTorch wraps a functional collective's result in an
    # AsyncCollectiveTensor so the wait happens at first use; an xla result
    # is a lazy value already, so it stays a plain xla tensor.
    return XlaTensor(x._h)


def _no_p2p(*args, **kwargs):
    raise NotImplementedError(
        "point-to-point functional collectives (isend, irecv, batch_p2p_ops) are not supported "
        "on xla tensors; use xm.collective_permute with every source-target pair")


lowers(_F.isend.default, _F.irecv.default, _F.batch_p2p_ops.default)(_no_p2p)


# Functionalization refuses custom ops that write an argument and return
# it, and xla tensors are always functionalized; the in-place and out=
# forms are therefore given Functionalize kernels that run the functional
# form and copy its result into the written tensor (a functional copy_).
_functionalize_lib = torch.library.Library("_c10d_functional", "IMPL")


def _functionalize(name, functional, written):
    """Registers the Functionalize kernel of op `name`: functional(*args)
    copied into the argument `written(args, kwargs)` returns."""
    def kernel(*args, **kwargs):
        result = functional(*args, **kwargs)
        dst = written(args, kwargs)
        if isinstance(dst, (list, tuple)):
            for d, r in zip(dst, result):
                d.copy_(r)
        else:
            dst.copy_(result)
        return dst
    _functionalize_lib.impl(name, kernel, "Functionalize")


_functionalize("all_reduce_", lambda x, op, g: _F.all_reduce(x, op, g), lambda a, k: a[0])
_functionalize("all_reduce_coalesced_", lambda xs, op, g: _F.all_reduce_coalesced(xs, op, g),
               lambda a, k: a[0])
_functionalize("broadcast_", lambda x, src, g: _F.broadcast(x, src, g), lambda a, k: a[0])
_functionalize("all_gather_into_tensor_out",
               lambda x, n, g, out: _F.all_gather_into_tensor(x, n, g),
               lambda a, k: k["out"])
_functionalize("reduce_scatter_tensor_out",
               lambda x, op, n, g, out: _F.reduce_scatter_tensor(x, op, n, g),
               lambda a, k: k["out"])


# ------------------------------------------------------- c10d op kernels
def _red_op(script_op):
    """c10d's boxed ReduceOp as the ReduceOp its options take."""
    code = script_op.op()
    for member in dist.ReduceOp.RedOpType.__members__.values():
        if int(member.value) == int(code):
            return member
    raise ValueError(f"Invalid reduce op {code}")


def _map(fn, tree):
    if isinstance(tree, (list, tuple)):
        return [_map(fn, t) for t in tree]
    return fn(tree)


def _pairs(inner, user, out):
    if isinstance(inner, (list, tuple)):
        for i, u in zip(inner, user):
            _pairs(i, u, out)
    else:
        out.append((inner, user))
    return out


def _run(boxed_pg, method, tensor_args, *rest):
    """pg.method(*user-level tensor_args, *rest); the inner tensors then
    hold what the method left in their user-level copies. Returns the
    boxed Work."""
    pg = dist.ProcessGroup.unbox(boxed_pg)
    with _user_level():
        users = [_map(_user, a) for a in tensor_args]
        work = getattr(pg, method)(*users, *rest)
        for inner, user in _pairs(list(tensor_args), users, []):
            _assign(inner, user)
    return work.boxed()


@lowers(_C10D.allreduce_.default)
def c10d_allreduce(tensors, pg, reduce_op, sparse_indices=None, async_op=True, timeout=-1):
    opts = AllreduceOptions()
    opts.reduceOp = _red_op(reduce_op)
    return tensors, _run(pg, "allreduce", [tensors], opts)


@lowers(_C10D.allreduce_coalesced_.default)
def c10d_allreduce_coalesced(tensors, pg, reduce_op, async_op=True, timeout=-1):
    opts = AllreduceCoalescedOptions()
    opts.reduceOp = _red_op(reduce_op)
    return _run(pg, "allreduce_coalesced", [tensors], opts)


@lowers(_C10D.allgather_.default)
def c10d_allgather(output_tensors, input_tensors, pg, async_op=True, timeout=-1):
    return output_tensors, _run(pg, "allgather", [output_tensors, input_tensors],
                                AllgatherOptions())


@lowers(_C10D._allgather_base_.default)
def c10d_allgather_base(output, input, pg, async_op=True, timeout=-1):
    return output, _run(pg, "_allgather_base", [output, input], AllgatherOptions())


@lowers(_C10D.allgather_coalesced_.default)
def c10d_allgather_coalesced(output_lists, input_list, pg, async_op=True):
    return _run(pg, "allgather_coalesced", [output_lists, input_list], AllgatherOptions())


@lowers(_C10D.allgather_into_tensor_coalesced_.default)
def c10d_allgather_into_tensor_coalesced(outputs, inputs, pg, async_op=True):
    return _run(pg, "all_gather_single_coalesced", [outputs, inputs], AllgatherOptions())


def _rs_opts(reduce_op):
    opts = ReduceScatterOptions()
    opts.reduceOp = _red_op(reduce_op)
    return opts


@lowers(_C10D.reduce_scatter_.default)
def c10d_reduce_scatter(output_tensors, input_tensors, pg, reduce_op, async_op=True,
                        timeout=-1):
    return output_tensors, _run(pg, "reduce_scatter", [output_tensors, input_tensors],
                                _rs_opts(reduce_op))


@lowers(_C10D._reduce_scatter_base_.default)
def c10d_reduce_scatter_base(output, input, pg, reduce_op, async_op=True, timeout=-1):
    return output, _run(pg, "_reduce_scatter_base", [output, input], _rs_opts(reduce_op))


@lowers(_C10D.reduce_scatter_tensor_coalesced_.default)
def c10d_reduce_scatter_tensor_coalesced(outputs, inputs, pg, reduce_op, async_op=True,
                                         timeout=-1):
    return _run(pg, "reduce_scatter_single_coalesced", [outputs, inputs], _rs_opts(reduce_op))


@lowers(_C10D.broadcast_.default)
def c10d_broadcast(tensors, pg, root_rank, root_tensor, async_op=True, timeout=-1):
    opts = BroadcastOptions()
    opts.rootRank, opts.rootTensor = int(root_rank), int(root_tensor)
    return tensors, _run(pg, "broadcast", [tensors], opts)


@lowers(_C10D.reduce_.default)
def c10d_reduce(tensors, pg, reduce_op, root_rank, root_tensor, async_op=True, timeout=-1):
    opts = ReduceOptions()
    opts.reduceOp = _red_op(reduce_op)
    opts.rootRank, opts.rootTensor = int(root_rank), int(root_tensor)
    return _run(pg, "reduce", [tensors], opts)


@lowers(_C10D.gather_.default)
def c10d_gather(output_tensors, input_tensors, pg, root_rank, async_op=True, timeout=-1):
    opts = GatherOptions()
    opts.rootRank = int(root_rank)
    return _run(pg, "gather", [output_tensors, input_tensors], opts)


@lowers(_C10D.scatter_.default)
def c10d_scatter(output_tensors, input_tensors, pg, root_rank, async_op=True, timeout=-1):
    opts = ScatterOptions()
    opts.rootRank = int(root_rank)
    return output_tensors, _run(pg, "scatter", [output_tensors, input_tensors], opts)


@lowers(_C10D.alltoall_.default)
def c10d_alltoall(output_tensors, input_tensors, pg, async_op=True, timeout=-1):
    return output_tensors, _run(pg, "alltoall", [output_tensors, input_tensors],
                                AllToAllOptions())


@lowers(_C10D.alltoall_base_.default)
def c10d_alltoall_base(output, input, pg, output_split_sizes, input_split_sizes,
                       async_op=True, timeout=-1):
    return _run(pg, "alltoall_base", [output, input], list(output_split_sizes),
                list(input_split_sizes), AllToAllOptions())


@lowers(_C10D.barrier.default)
def c10d_barrier(tensor, pg, device_ids, async_op=True, timeout=-1):
    return _run(pg, "barrier", [], BarrierOptions())


@lowers(_C10D.send.default)
def c10d_send(tensors, pg, dst, tag):
    return _run(pg, "send", [tensors], int(dst), int(tag))


@lowers(_C10D.recv_.default)
def c10d_recv(tensors, pg, src, tag):
    return _run(pg, "recv", [tensors], int(src), int(tag))


@lowers(_C10D.recv_any_source_.default, _C10D.monitored_barrier_.default)
def c10d_unsupported(*args, **kwargs):
    raise NotImplementedError("recv_any_source and monitored_barrier are not supported by the "
                              "xla backend")
