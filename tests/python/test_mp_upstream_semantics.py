"""Behaviours PyTorch/XLA's own multi-replica scripts (test/test_mp_*.py)
rely on, pinned here so they hold without the upstream checkout:

- xm.rendezvous(tag, payload, replicas=[...]) over a subset of the
  replicas: only those replicas meet, and the payloads come back in the
  order of `replicas` (test_mp_rendezvous.py). PyTorch/XLA documents the
  argument but raises ValueError('Only global rendezvous is supported');
  here the subset meets as one replica group (docs/collectives.md).
- xm.all_reduce and xm.all_gather inside torch.compile(backend='openxla',
  fullgraph=True) (test_mp_replication.py, test_mp_all_gather.py): traced
  as the functional collectives, run over the replicas when the compiled
  graph runs.
- xm.all_gather of a list of tensors, with and without an `output` list
  (test_mp_all_gather.py).

The multi-replica cases run in a fresh interpreter with CPU_NUM_DEVICES=4
(the device count is fixed when the runtime starts); the one-replica cases
run here."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPLICAS = textwrap.dedent(r"""
    import json
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    import torch_xla._internal.pjrt as pjrt

    def all_reduce(t):
        return xm.all_reduce(xm.REDUCE_SUM, t)

    def replica(i):
        # Two rendezvous at once, each over its own pair; the first pair is
        # listed out of ordinal order.
        pair = [1, 0] if i < 2 else [2, 3]
        got = xm.rendezvous(f"pair{pair[0]}", f"ORD={i}".encode(), replicas=pair)
        everyone = xm.rendezvous("all", bytes([i]) * i, replicas=[0, 1, 2, 3])
        try:
            xm.rendezvous("outsider", b"", replicas=[(i + 1) % 4, (i + 2) % 4])
            outsider = None
        except ValueError as e:
            outsider = str(e)
        compiled = torch.compile(all_reduce, backend="openxla", fullgraph=True)
        x = torch.full((2, 3), float(i + 1), device=torch_xla.device())
        reduced = compiled(x).cpu().tolist()
        gather = torch.compile(lambda t, d: xm.all_gather(t, dim=d), backend="openxla",
                               fullgraph=True)
        y = torch.tensor([[i, 10 * i]], dtype=torch.float32, device=torch_xla.device())
        gathered0 = gather(y, 0).cpu().tolist()
        gathered1 = gather(y, 1).cpu().tolist()
        items = [torch.tensor([100 * k + i], dtype=torch.float32, device=torch_xla.device())
                 for k in range(3)]
        listed = [t.cpu().tolist() for t in xm.all_gather(items, dim=0, pin_layout=False)]
        outs = [torch.zeros(4, device=torch_xla.device()) for _ in range(3)]
        back = xm.all_gather(items, dim=0, output=outs, pin_layout=False)
        into = [t.cpu().tolist() for t in outs] if back is outs else None
        return {"pair": [p.decode() for p in got], "all": [list(p) for p in everyone],
                "reduced": reduced, "outsider": outsider, "gathered0": gathered0,
                "gathered1": gathered1, "listed": listed, "into": into}

    got = pjrt.run_multiprocess(pjrt._SpawnFn(replica), start_method="fork")
    print("RESULT " + json.dumps({str(k): v for k, v in got.items()}))
""")


@pytest.fixture(scope="module")
def four_replicas():
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="4",
               PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.run([sys.executable, "-c", REPLICAS], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {int(k): v for k, v in json.loads(line[-1][len("RESULT "):]).items()}


def test_rendezvous_over_a_subset_returns_payloads_in_replicas_order(four_replicas):
    assert sorted(four_replicas) == [0, 1, 2, 3]
    for i in (0, 1):
        assert four_replicas[i]["pair"] == ["ORD=1", "ORD=0"]
    for i in (2, 3):
        assert four_replicas[i]["pair"] == ["ORD=2", "ORD=3"]


def test_rendezvous_naming_every_replica_is_global(four_replicas):
    for i in range(4):
        assert four_replicas[i]["all"] == [[], [1], [2, 2], [3, 3, 3]]


def test_compiled_all_reduce_reduces_over_replicas(four_replicas):
    for i in range(4):
        assert four_replicas[i]["reduced"] == [[10.0] * 3] * 2


def test_rendezvous_replicas_must_include_the_caller(four_replicas):
    for i in range(4):
        group = [(i + 1) % 4, (i + 2) % 4]
        assert four_replicas[i]["outsider"] == (
            f"replica {i} joined a rendezvous over replicas {group}, which does not include it")


def test_rendezvous_replicas_must_be_distinct_ordinals():
    with pytest.raises(ValueError, match="name a replica twice"):
        xm.rendezvous("u29", b"x", replicas=[0, 0])
    with pytest.raises(ValueError, match=r"ordinals \[5\] are not in \[0, 1\)"):
        xm.rendezvous("u29", b"x", replicas=[0, 5])


def test_rendezvous_over_the_one_replica_returns_its_payload():
    assert xm.rendezvous("u29", b"abc", replicas=[0]) == [b"abc"]
    assert xm.xla_rendezvous(b"abc", [0]) == [b"abc"]


def test_compiled_all_reduce_one_replica_is_a_copy():
    def fn(t):
        return xm.all_reduce(xm.REDUCE_SUM, t)

    compiled = torch.compile(fn, backend="openxla", fullgraph=True)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(torch_xla.device())
    out = compiled(x)
    assert out.device.type == "xla"
    assert torch.equal(out.cpu(), torch.arange(6, dtype=torch.float32).reshape(2, 3))


def test_compiled_all_gather_concatenates_along_dim(four_replicas):
    for i in range(4):
        assert four_replicas[i]["gathered0"] == [[float(r), 10.0 * r] for r in range(4)]
        assert four_replicas[i]["gathered1"] == [[v for r in range(4) for v in (r, 10.0 * r)]]


def test_all_gather_of_a_list_gathers_each_tensor(four_replicas):
    expected = [[100.0 * k + r for r in range(4)] for k in range(3)]
    for i in range(4):
        assert four_replicas[i]["listed"] == expected
        assert four_replicas[i]["into"] == expected
