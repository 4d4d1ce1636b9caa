"""The lowering table: aten op -> engine IR, one small function per op.

dispatch() is the single entry from XlaTensor.__torch_dispatch__. Order of
resolution: an explicit lowering; else PyTorch's decomposition table (its
pieces come back through dispatch); else the counted CPU fallback, which
increments the aten::<op> counter exactly as PyTorch/XLA does.
"""
from torchtpu.bridge import XlaTensor, complex_in_use

from torchtpu.lowering.core import LOWERINGS
from torchtpu.lowering import (  # noqa: F401  (register lowerings)
    elementwise, shape_ops, reductions, nn_ops, misc_ops, sort_ops, index_ops,
    dynamic_ops, pool_ops, linalg_ops, extra_ops, complex_ops, foreach_ops, attention_ops)
from torchtpu.lowering.complex_ops import dispatch_complex, involves_complex
from torchtpu.lowering.fallback import decompose_or_fallback

# Decompositions we never take: their results are handled natively or would
# recurse into themselves.
_SKIP_DECOMP = set()


# Set by torchtpu.modes (eager mode, torch_xla.compile graph counting):
# called as op_observer(func, result, updated) after each top-level op, that
# is one not issued from inside another op's lowering or decomposition;
# updated lists the xla arguments the op gave a new value (batch norm's
# running statistics). None costs one global read per op.
op_observer = None
_depth = [0]


def _tag(func, out):
    """Marks each xla result with the aten op that made its value (and that
    value's id): PyTorch/XLA's debug text names a tensor's IR node by its
    op ('aten::add'), and the engine's node is not the aten op. An outer op
    tags after the ops of its decomposition, so the outermost op wins."""
    if type(out) is XlaTensor:
        out._op = (func, out._h.id)
    elif type(out) is tuple or type(out) is list:
        for o in out:
            if type(o) is XlaTensor:
                o._op = (func, o._h.id)
    return out


def dispatch(func, args, kwargs):
    if op_observer is None:
        return _tag(func, _dispatch(func, args, kwargs))
    before = [(a, a._h) for a in args if type(a) is XlaTensor] if _depth[0] == 0 else ()
    _depth[0] += 1
    try:
        out = _dispatch(func, args, kwargs)
    finally:
        _depth[0] -= 1
    if _depth[0] == 0 and op_observer is not None:
        op_observer(func, out, [a for a, h in before if a._h is not h])
    return _tag(func, out)


def _dispatch(func, args, kwargs):
    if (kwargs or complex_in_use[0]) and involves_complex(args, kwargs):
        return dispatch_complex(func, args, kwargs)
    fn = LOWERINGS.get(func)
    if fn is not None:
        return fn(*args, **kwargs)
    return decompose_or_fallback(func, args, kwargs, _SKIP_DECOMP)
