"""Collectives across the CPU backend's virtual devices: torch_xla.launch /
xmp.spawn run one replica thread per device (CPU_NUM_DEVICES), and the xm
collectives meet through the engine's collective layer.

The device count is fixed when the runtime starts, so each case runs a
small script in a fresh interpreter with its own CPU_NUM_DEVICES; the
script launches the replicas (start_method='fork': the launcher's new
process then costs no second import) and checks their results against
numpy, printing one line per check."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COLLECTIVES = textwrap.dedent(r"""
    import sys
    import numpy as np
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    N = int(sys.argv[1])

    def value(i, shape, dtype=torch.float32):
        g = torch.Generator().manual_seed(100 + i)
        return (torch.randint(-8, 8, shape, generator=g)).to(dtype)

    def replica(i):
        dev = torch_xla.device()
        assert dev == torch.device("xla", i), (dev, i)
        assert xm.xla_device() == dev
        assert (xr.world_size(), xr.global_ordinal(), xr.local_ordinal(), xm.get_ordinal()) == \
            (N, i, i, i)
        x = value(i, (4, 6)).to(dev)
        out = {}
        out["sum"] = xm.all_reduce(xm.REDUCE_SUM, x)
        out["max"] = xm.all_reduce(xm.REDUCE_MAX, x)
        out["min"] = xm.all_reduce(xm.REDUCE_MIN, x)
        out["mul"] = xm.all_reduce(xm.REDUCE_MUL, (x.abs() % 3) + 1)
        bits = (value(i, (5,), torch.int32) & 7).to(dev)
        out["and"] = xm.all_reduce(xm.REDUCE_AND, bits)
        out["or"] = xm.all_reduce(xm.REDUCE_OR, bits)
        out["bf16"] = xm.all_reduce(xm.REDUCE_SUM, x.to(torch.bfloat16))
        inplace = [x * 1, x + 1]
        assert xm.all_reduce(xm.REDUCE_SUM, inplace, scale=0.5) is inplace
        out["list0"], out["list1"] = inplace
        pairs = [[2 * k, 2 * k + 1] for k in range(N // 2)]
        out["groups"] = xm.all_reduce(xm.REDUCE_SUM, x, groups=pairs)
        out["gather0"] = xm.all_gather(x, dim=0)
        out["gather1"] = xm.all_gather(x, dim=1)
        out["gather_groups"] = xm.all_gather(x, dim=0, groups=pairs)
        y = value(i, (2 * N, 3)).to(dev)
        out["rs0"] = xm.reduce_scatter(xm.REDUCE_SUM, y, 0.25, 0, N)
        outs = [torch.zeros(2 * N, 3, device=dev) for _ in range(2)]
        assert xm.reduce_scatter(xm.REDUCE_SUM, [y, y * 2], 1.0, 0, N, output=outs) is outs
        out["rs_list"] = outs[1]  # took the result's shape, as upstream's *_out ops
        z = value(i, (3, 2 * N)).to(dev)
        out["rs1"] = xm.reduce_scatter(xm.REDUCE_SUM, z, 1.0, 1, N)
        out["a2a"] = xm.all_to_all(z, 1, 0, N)
        ring = [(k, (k + 1) % N) for k in range(N)]
        out["ring"] = xm.collective_permute(x, ring)
        out["partial"] = xm.collective_permute(x, ring[:-1])  # nobody sends to 0
        out["bcast"] = x + 0
        xm.collective_broadcast([out["bcast"]], root_ordinal=N - 1)
        torch_xla.sync()
        res = {k: v.cpu().float().numpy() for k, v in out.items()}
        res["rendezvous"] = xm.rendezvous("tag", f"r{i}".encode() * (i + 1))
        res["mesh"] = xm.mesh_reduce("m", float(i + 1), sum)
        return res

    def main():
        import torch_xla._internal.pjrt as pjrt
        got = pjrt.run_multiprocess(pjrt._SpawnFn(replica), start_method="fork")
        assert sorted(got) == list(range(N))
        xs = [value(i, (4, 6)).numpy() for i in range(N)]
        bits = [value(i, (5,), torch.int32).numpy() & 7 for i in range(N)]
        ys = [value(i, (2 * N, 3)).numpy() for i in range(N)]
        zs = [value(i, (3, 2 * N)).numpy() for i in range(N)]
        S = sum(xs)
        for i in range(N):
            r = got[i]
            p = i // 2 * 2
            want = {
                "sum": S, "max": np.maximum.reduce(xs), "min": np.minimum.reduce(xs),
                "mul": np.prod([(np.abs(x) % 3) + 1 for x in xs], axis=0),
                "and": np.bitwise_and.reduce(bits), "or": np.bitwise_or.reduce(bits),
                "bf16": S, "list0": S * 0.5, "list1": (S + N) * 0.5,
                "groups": xs[p] + xs[p + 1],
                "gather0": np.concatenate(xs, 0), "gather1": np.concatenate(xs, 1),
                "gather_groups": np.concatenate([xs[p], xs[p + 1]], 0),
                "rs0": (sum(ys) * 0.25)[2 * i:2 * i + 2],
                "rs1": sum(zs)[:, 2 * i:2 * i + 2],
                "rs_list": (sum(ys) * 2)[2 * i:2 * i + 2],
                "a2a": np.concatenate([z[:, 2 * i:2 * i + 2] for z in zs], 0),
                "ring": xs[(i - 1) % N],
                "partial": xs[i - 1] if i else np.zeros_like(xs[0]),
                "bcast": xs[N - 1],
            }
            for k, w in want.items():
                assert r[k].shape == w.shape, (i, k, r[k].shape, w.shape)
                np.testing.assert_array_equal(r[k], w.astype(np.float32), err_msg=f"{k} on {i}")
            assert r["rendezvous"] == [f"r{q}".encode() * (q + 1) for q in range(N)], r
            assert r["mesh"] == N * (N + 1) / 2, r["mesh"]
        print("CHECKED", N, len(want) + 2)

    if __name__ == "__main__":
        main()
""")

FAILURES = textwrap.dedent(r"""
    import sys, time
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_multiprocessing as xmp

    def mismatched(i):
        x = torch.ones(1024, device=torch_xla.device())
        y = xm.all_reduce(xm.REDUCE_SUM, x) if i == 0 else xm.all_gather(x)
        y.cpu()

    def missing(i):
        x = torch.ones(16, device=torch_xla.device())
        if i == 0:
            xm.all_reduce(xm.REDUCE_SUM, x).cpu()

    def raises(i):
        if i == 1:
            raise ValueError("boom in the replica")
        x = torch.ones(16, device=torch_xla.device())
        xm.all_reduce(xm.REDUCE_SUM, x).cpu()

    def case(name, fn):
        t0 = time.time()
        try:
            if name == "raises":
                torch_xla.launch(fn, start_method="fork")
            else:
                xmp.spawn(fn, start_method="fork")
            print(name, "NO ERROR")
        except Exception as e:
            print(name, type(e).__name__, "%.1f" % (time.time() - t0), str(e).replace("\n", " "))

    if __name__ == "__main__":
        case(sys.argv[1], {"mismatched": mismatched, "missing": missing, "raises": raises}[sys.argv[1]])
""")

TRAINING = textwrap.dedent(r"""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla._internal.pjrt as pjrt

    def build():
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def data():
        g = torch.Generator().manual_seed(1)
        return torch.randn(3, 8, 4, generator=g), torch.randn(3, 8, 1, generator=g)

    def replica(i, state):
        dev = torch_xla.device()
        model = build()
        model.load_state_dict(state)
        model.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        xs, ys = data()
        losses = []
        for step in range(3):
            x, y = xs[step, 4 * i:4 * i + 4].to(dev), ys[step, 4 * i:4 * i + 4].to(dev)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            xm.optimizer_step(opt)
            torch_xla.sync()
            losses.append(loss.item())
        return losses, {k: v.cpu() for k, v in model.state_dict().items()}

    if __name__ == "__main__":
        torch.manual_seed(0)
        ref = build()
        state = {k: v.clone() for k, v in ref.state_dict().items()}
        got = pjrt.run_multiprocess(pjrt._SpawnFn(replica, state), start_method="fork")
        # The same averaged gradients on the CPU.
        opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        xs, ys = data()
        for step in range(3):
            grads, losses = None, []
            for i in range(2):
                ref.zero_grad()
                loss = torch.nn.functional.mse_loss(ref(xs[step, 4 * i:4 * i + 4]),
                                                    ys[step, 4 * i:4 * i + 4])
                loss.backward()
                losses.append(loss.item())
                g = [p.grad.clone() for p in ref.parameters()]
                grads = g if grads is None else [a + b for a, b in zip(grads, g)]
            for p, g in zip(ref.parameters(), grads):
                p.grad = g / 2
            opt.step()
            for i in range(2):
                assert abs(got[i][0][step] - losses[i]) < 1e-5, (step, i, got[i][0], losses)
        for i in range(2):
            for k, v in ref.state_dict().items():
                torch.testing.assert_close(got[i][1][k], v, rtol=1e-5, atol=1e-6)
        assert got[0][0] != got[1][0]  # the replicas saw different data
        print("TRAINED", [round(l, 5) for l in got[0][0]])
""")


def test_spawn_threads_in_this_process():
    # The test process has 4 xla devices (conftest): one replica thread each.
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla._internal import pjrt
    seen = {}

    def fn(i, k):
        x = torch.full((2,), float(i + k), device=torch_xla.device())
        seen[i] = (xr.world_size(), xr.global_ordinal(), str(torch_xla.device()),
                   xm.all_reduce(xm.REDUCE_SUM, x).cpu().tolist())

    assert pjrt.spawn_threads(fn, args=(1,)) is None
    assert seen == {i: (4, i, f"xla:{i}", [10.0, 10.0]) for i in range(4)}
    assert (xr.world_size(), xr.global_ordinal()) == (1, 0)  # outside the launch again


def test_data_parallel_averages_gradients_across_devices():
    # torch_xla.distributed.data_parallel: one thread per device (4, conftest),
    # each a replica, so xm.optimizer_step averages the gradients.
    import torch
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.data_parallel as dp
    import torch_xla.runtime as xr
    torch.manual_seed(0)
    base = torch.nn.Linear(3, 1)
    want = torch.nn.Linear(3, 1)
    want.load_state_dict(base.state_dict())
    par = dp.DataParallel(base)
    n = len(par.devices)
    xs, ys = torch.randn(n, 2, 3), torch.randn(n, 2, 1)

    def loop_fn(model, device_loader, device, context):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for x, y in device_loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            xm.optimizer_step(opt)
        return xr.world_size(), xr.global_ordinal(), model.weight.cpu(), model.bias.cpu()

    results = par(loop_fn, [(xs[i], ys[i]) for i in range(n)])
    grads = [torch.autograd.grad(torch.nn.functional.mse_loss(want(xs[i]), ys[i]),
                                 [want.weight, want.bias]) for i in range(n)]
    with torch.no_grad():
        want.weight -= 0.5 * sum(g[0] for g in grads) / n
        want.bias -= 0.5 * sum(g[1] for g in grads) / n
    assert [r[:2] for r in results] == [(n, i) for i in range(n)]
    for _, _, w, b in results:
        torch.testing.assert_close(w, want.weight.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(b, want.bias.detach(), rtol=1e-5, atol=1e-6)
    assert xr.world_size() == 1


def _run(tmp_path, name, text, devices, *args, timeout_s=None):
    script = tmp_path / f"{name}.py"
    script.write_text(text)
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices),
               PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("XLA_FLAGS", None)
    if timeout_s is not None:
        env["TORCHTPU_COLLECTIVE_TIMEOUT_S"] = str(timeout_s)
    p = subprocess.run([sys.executable, str(script), *map(str, args)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.mark.parametrize("n", [2, 4, 8])
def test_every_collective_matches_numpy(tmp_path, n):
    out = _run(tmp_path, "collectives", COLLECTIVES, n, n)
    assert "CHECKED %d 22" % n in out, out


def test_mismatched_collectives_name_both_sides(tmp_path):
    out = _run(tmp_path, "failures", FAILURES, 2, "mismatched", timeout_s=60)
    assert out.startswith("mismatched RuntimeError"), out
    assert "device 1 issued all_gather(float32, 1024) #0 but device 0 issued " \
           "all_reduce(float32, 1024, sum) #0" in out, out


def test_missing_participant_times_out(tmp_path):
    out = _run(tmp_path, "failures", FAILURES, 2, "missing", timeout_s=1)
    name, kind, took, msg = out.split(" ", 3)
    assert (name, kind) == ("missing", "RuntimeError"), out
    assert 0.9 < float(took) < 30, out
    assert msg.startswith("[ordinal 0]"), out
    assert "timed out after 1 s" in msg and "arrived: 0; not arrived: 1" in msg, out


def test_exception_in_a_replica_stops_its_peers(tmp_path):
    t0 = time.time()
    out = _run(tmp_path, "failures", FAILURES, 2, "raises", timeout_s=100)
    assert time.time() - t0 < 60  # the peer was woken, not timed out
    assert out.startswith("raises ValueError"), out
    assert "[ordinal 1] boom in the replica" in out, out


def test_data_parallel_mlp_matches_cpu(tmp_path):
    out = _run(tmp_path, "training", TRAINING, 2)
    assert out.startswith("TRAINED"), out
