"""Where a slice's or as_strided's elements sit in the tensor it was cut from.

An xla tensor has no storage of its own to share: a view's value is a new
(contiguous) engine tensor. as_strided, though, addresses *storage*: on
the CPU, `a[:, ::2].as_strided((5, 5), (5, 1), 0)` reads all of `a`.
PyTorch/XLA answers this by remembering, for slice and as_strided results,
the tensor they were first cut from (its "base") and applying as_strided
to that. This module keeps the same record, plus the view's storage
offset and strides in that base, so an as_strided without an explicit
offset starts where the view starts, as on the CPU.

Contract:
- note(result, base, offset, strides): result's element i (multi-index)
  is base's flat element offset + sum(i_d * strides_d); base is the root
  (never itself a noted view).
- layout(x): (base, offset, strides) as noted, or None: x is its own
  storage (offset 0, contiguous), or its base is gone. Records hold the
  base weakly, so a view never keeps a large base alive.
"""
import weakref

from torch.utils.weak import WeakIdKeyDictionary

_views = WeakIdKeyDictionary()


def contiguous_strides(shape):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return strides[::-1]


def note(result, base, offset, strides):
    _views[result] = (weakref.ref(base), int(offset), tuple(int(s) for s in strides))


def layout(x):
    rec = _views.get(x)
    if rec is None:
        return None
    base = rec[0]()
    if base is None:
        return None
    return base, rec[1], rec[2]


def note_slice(result, x, dim, start, step):
    """result = x[..., start::step (on dim), ...] (a slice lowering)."""
    rec = layout(x)
    if rec is None:
        base, offset, strides = x, 0, contiguous_strides(x.shape)
    else:
        base, offset, strides = rec
    strides = list(strides)
    offset += start * strides[dim]
    strides[dim] *= step
    note(result, base, offset, strides)
