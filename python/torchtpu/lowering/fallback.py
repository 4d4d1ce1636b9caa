"""The explicit CPU fallback for ops with no lowering: inputs move to the
host, PyTorch computes, results move back, and aten::<op> is counted."""
import torch
from torch._decomp import decomposition_table
from torch.utils._pytree import tree_map

from torchtpu import _C, bridge
from torchtpu.bridge import XlaTensor

_fallback_names = set()


def fallback_names():
    """Every counter name the fallback ever incremented (the metrics module
    filters them by current value)."""
    return sorted(_fallback_names)


# > 0 while a decomposition runs (lowering/__init__.py): an in-place op
# issued there writes into tensors the decomposition made, views of its
# inputs among them, and a CPU run cannot reach those views' bases.
decomposition_depth = [0]


def decomposed(fn, args, kwargs):
    """fn(*args, **kwargs), a decomposition, counted in decomposition_depth."""
    decomposition_depth[0] += 1
    try:
        return fn(*args, **kwargs)
    finally:
        decomposition_depth[0] -= 1


def decompose_or_fallback(func, args, kwargs, skip=()):
    """An op without a lowering: PyTorch's decomposition table, then the
    op's own CompositeImplicit decomposition (their pieces come back through
    dispatch), else the counted CPU fallback."""
    decomp = decomposition_table.get(func)
    if decomp is not None and func not in skip:
        out = decomposed(decomp, args, kwargs)
        if out is not NotImplemented:
            return out
    if func._can_decompose():
        out = decomposed(func.decompose, args, kwargs)
        if out is not NotImplemented:
            return out
    return fallback(func, args, kwargs)


def _written_args(func, args, kwargs):
    """The XlaTensor arguments func's schema says it writes."""
    out = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        v = args[i] if i < len(args) else kwargs.get(a.name)
        if isinstance(v, XlaTensor):
            out.append((i, a.name, v))
    return out


def fallback(func, args, kwargs):
    # PyTorch/XLA's counter name: the operator with its overload
    # ("aten::nonzero", "aten::repeat_interleave.Tensor").
    overload = func._schema.overload_name
    name = func._schema.name + ("." + overload if overload else "")
    written = _written_args(func, args, kwargs) if func._schema.is_mutable else []
    if written and decomposition_depth[0] > 0:
        raise NotImplementedError(
            f"{name} writes its input in place inside a decomposition and has no lowering on "
            "xla: the write could not reach the tensor it views")
    _C.counter_add(name, 1)
    _fallback_names.add(name)
    dev = [None]

    def to_cpu(x):
        if isinstance(x, XlaTensor):
            dev[0] = x._h.device if dev[0] is None else dev[0]
            return bridge.download(x._h)
        if isinstance(x, torch.device) and x.type == "xla":
            dev[0] = bridge.device_index(x) if dev[0] is None else dev[0]
            return torch.device("cpu")
        return x

    cargs = tree_map(to_cpu, args)
    ckwargs = tree_map(to_cpu, kwargs)
    out = func(*cargs, **ckwargs)
    index = dev[0] if dev[0] is not None else bridge.current_device_index()
    # In-place ops: the written inputs take the CPU result, as the kernel
    # would have left them.
    for i, arg_name, x in written:
        c = cargs[i] if i < len(cargs) else ckwargs[arg_name]
        x._h = bridge.upload(c, index, defer=True)

    # Results are copied back as PyTorch/XLA's fallback copies them: in SPMD
    # mode they stay on the host until used (bridge.upload).
    def to_dev(x):
        if isinstance(x, torch.Tensor) and not isinstance(x, XlaTensor):
            return XlaTensor(bridge.upload(x, index, defer=True))
        return x

    return tree_map(to_dev, out)
