"""PartitionSpec: how a tensor's dims map onto mesh axes.

Contract: PartitionSpec(*entries) is a tuple (JAX's jax.sharding.PartitionSpec
and PyTorch/XLA's PartitionSpec type alias both describe one): entry i says
which mesh axis (an axis name or an int index) or axes (a tuple of those)
tensor dim i is split over, or None (dim i is not split). Being a tuple, it
is accepted wherever a plain tuple spec is, hashes and compares like one,
and `PartitionSpec("data", None) == ("data", None)`. Entries are checked
here for type only; whether the names exist is the mesh's business
(mark_sharding raises SpmdSpecError for an axis the mesh lacks).
"""


def _is_axis(e):
    """An axis name or index (numpy integers count; bools do not)."""
    import numpy as np
    return isinstance(e, str) or (isinstance(e, (int, np.integer)) and not isinstance(e, bool))


def _check_entry(e):
    if e is None or _is_axis(e):
        return
    if isinstance(e, tuple):
        for sub in e:
            if isinstance(sub, tuple):
                raise ValueError("Partition spec cannot contain nested tuples")
            if not _is_axis(sub):
                raise ValueError(f"Spec type {type(sub)} is not supported in partition spec")
        return
    raise ValueError(f"Spec type {type(e)} is not supported in partition spec")


class PartitionSpec(tuple):
    """A tuple of mesh axes, one entry per tensor dim (see module doc)."""

    def __new__(cls, *entries):
        for e in entries:
            _check_entry(e)
        return super().__new__(cls, entries)

    def __repr__(self):
        return "PartitionSpec" + (super().__repr__() if len(self) != 1
                                  else f"({self[0]!r})")

    def __reduce__(self):  # pickles as PartitionSpec(*entries)
        return (PartitionSpec, tuple(self))
