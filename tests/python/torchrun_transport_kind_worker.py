"""The worker test_process_transport_kind.py runs under torchrun (2
processes x 1 device): one all_reduce and one mismatched all_reduce, then
it writes, per process, which transport ran them and the counters of the
C++ transport to $KIND_OUT/<ordinal>.json."""
import json
import os

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def main():
    from torchtpu import process_transport
    r = xr.global_ordinal()
    x = torch.tensor([1.0, 2.0, 3.0], device=torch_xla.device()) * (r + 1)
    y = xm.all_reduce(xm.REDUCE_SUM, x)
    res = {"kind": process_transport.kind(), "sum": y.cpu().tolist()}
    res["requests"] = process_transport.requests()
    try:
        from torchtpu import _c10d_transport
        res["shim_requests"] = _c10d_transport.counters()[0]
    except ImportError:
        res["shim_requests"] = None
    with open(os.path.join(os.environ["KIND_OUT"], f"{r}.json"), "w") as f:
        json.dump(res, f)
    # Mismatched lengths: every process must fail naming both calls.
    z = torch.ones(4 if r == 0 else 8, device=torch_xla.device())
    try:
        xm.all_reduce(xm.REDUCE_SUM, z).cpu()
        res["mismatch"] = None
    except RuntimeError as e:
        res["mismatch"] = str(e)
    with open(os.path.join(os.environ["KIND_OUT"], f"{r}.json"), "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
