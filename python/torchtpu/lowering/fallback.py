"""The explicit CPU fallback for ops with no lowering: inputs move to the
host, PyTorch computes, results move back, and aten::<op> is counted."""
import torch
from torch.utils._pytree import tree_map

from torchtpu import _C, bridge
from torchtpu.bridge import XlaTensor

_fallback_names = set()


def fallback_names():
    """Every counter name the fallback ever incremented (the metrics module
    filters them by current value)."""
    return sorted(_fallback_names)


def fallback(func, args, kwargs):
    name = func._schema.name  # e.g. "aten::nonzero"
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

    def to_dev(x):
        if isinstance(x, torch.Tensor) and not isinstance(x, XlaTensor):
            return XlaTensor(bridge.upload(x, index))
        return x

    return tree_map(to_dev, out)
