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


def _check_entry(e, where):
    if e is None or isinstance(e, str):
        return
    if isinstance(e, bool) or not isinstance(e, int):
        if isinstance(e, tuple) and where == "top":
            for sub in e:
                if isinstance(sub, tuple):
                    raise ValueError("Partition spec cannot contain nested tuples")
                _check_entry(sub, "nested")
            return
        try:  # numpy integers are ints for this purpose
            import numpy as np
            if isinstance(e, np.integer):
                return
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        raise ValueError(f"Spec type {type(e)} is not supported in partition spec")


class PartitionSpec(tuple):
    """A tuple of mesh axes, one entry per tensor dim (see module doc)."""

    def __new__(cls, *entries):
        for e in entries:
            _check_entry(e, "top")
        return super().__new__(cls, entries)

    def __repr__(self):
        return "PartitionSpec" + (super().__repr__() if len(self) != 1
                                  else f"({self[0]!r})")

    def __reduce__(self):  # pickles as PartitionSpec(*entries)
        return (PartitionSpec, tuple(self))
