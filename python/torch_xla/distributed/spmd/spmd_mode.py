"""Turning SPMD mode on from the first sharding annotation.

Contract: ensure_spmd(what) returns with xr.is_spmd() true. When SPMD is
off and no device other than xla:0 (the device SPMD mode presents as its
one virtual device) holds data now, it switches SPMD on (xr.use_spmd()).
When another device holds data, the program was written for several
devices and cannot be reinterpreted as one SPMD program: RuntimeError
naming the devices and the call to make first.
"""
from torchtpu import _C, config


def devices_used_besides_first():
    """Indices of devices other than 0 that hold data now (bytes in use;
    data since freed does not tie the program to its device)."""
    n = config.ensure_runtime()
    return [i for i in range(1, n) if _C.memory_stats(i)[0] > 0]


def ensure_spmd(what):
    import torch_xla.runtime as xr
    if xr.is_spmd():
        return
    used = devices_used_besides_first()
    if used:
        names = ", ".join(f"xla:{i}" for i in used)
        raise RuntimeError(
            f"{what}: SPMD mode is off and this program already placed data on {names}. "
            "An SPMD program sees one virtual device (xla:0); call "
            "torch_xla.runtime.use_spmd() at the start of the program, before creating "
            "tensors on other xla devices.")
    xr.use_spmd()
