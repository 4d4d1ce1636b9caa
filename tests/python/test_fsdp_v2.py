"""SpmdFullyShardedDataParallel (FSDP via SPMD, issue 30 item 5):
parameter and gradient shardings, output sharding and its errors, the
argument checks, nested and auto wrapping (with checkpoint_module), and
training that matches unwrapped CPU training step for step, on 4 virtual
devices in process (conftest.py) and on 8 in a fresh interpreter."""
import copy
import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
from torch_xla.distributed.fsdp import checkpoint_module
from torch_xla.distributed.fsdp.wrap import (size_based_auto_wrap_policy,
                                             transformer_auto_wrap_policy)
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
    SpmdFullyShardedDataParallel as FSDPv2, _prepare_spmd_partition_spec)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.usefixtures("in_spmd_mode")

ALL4 = "0,1,2,3"


class MLP(nn.Module):

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 6)
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Block(nn.Module):
    """A small pre-norm transformer layer."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):

    def __init__(self, vocab=16, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(Block(d), Block(d))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.blocks(self.emb(ids)))


def fsdp_mesh(n=4):
    return xs.Mesh(np.arange(n), (n, 1), ("fsdp", "model"))


def spec(t):
    return xs.get_sharding_spec(t)


@pytest.fixture(autouse=True)
def no_global_mesh():
    yield
    xs.set_global_mesh(None)


def test_partition_spec_shards_dim_0_or_the_largest_dim():
    w = torch.empty(3, 7, 5)
    assert _prepare_spmd_partition_spec(w) == ("fsdp", None, None)
    assert _prepare_spmd_partition_spec(w, shard_maximal=True) == (None, "fsdp", None)
    assert _prepare_spmd_partition_spec(torch.empty(4, 4), shard_maximal=True) == ("fsdp", None)
    assert _prepare_spmd_partition_spec(w, "data") == (("data", "fsdp"), None, None)
    assert _prepare_spmd_partition_spec(torch.empty(())) == ()


def test_nested_wrappers_each_shard_their_own_parameters():
    torch.manual_seed(0)
    model = MLP().to("xla")
    mesh = fsdp_mesh()
    model.fc1 = FSDPv2(model.fc1, mesh=mesh)
    model.fc2 = FSDPv2(model.fc2, mesh=mesh)
    model = FSDPv2(model, mesh=mesh)
    # the largest dim of each parameter over 'fsdp', the 'model' axis replicated
    assert spec(model.fc1.weight) == "{devices=[1,4]%s}" % ALL4  # (6, 12)
    assert spec(model.fc1.bias) == "{devices=[4]%s}" % ALL4
    assert spec(model.fc2.weight) == "{devices=[1,4]%s}" % ALL4  # (3, 6)
    assert spec(model.fc2.bias) == "{devices=[4]%s}" % ALL4
    assert isinstance(model.fc1, FSDPv2) and model.module.fc1.module.__class__ is nn.Linear
    x = torch.randn(8, 12).to("xla")
    out = model(x)
    assert spec(out) == "{devices=[4,1]%s}" % ALL4
    out.sum().backward()
    for name, p in model.named_parameters():
        assert spec(p.grad) == spec(p), name  # gradients sharded like their parameters


def test_output_sharding_default_tuple_custom_and_errors():
    mesh = fsdp_mesh()

    class Pair(nn.Module):

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y, y.sum()

    wrapped = FSDPv2(Pair(), mesh=mesh)
    with pytest.warns(UserWarning, match="only the first element is sharded"):
        first, total = wrapped(torch.randn(8, 4).to("xla"))
    assert spec(first) == "{devices=[4,1]%s}" % ALL4 and spec(total) == ""

    class Dict(nn.Module):

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return {"y": self.lin(x)}

    with pytest.raises(RuntimeError, match=r"The output type is not supported: <class 'dict'>\. "
                       "Please provide your own shard_output callable"):
        FSDPv2(Dict(), mesh=mesh)(torch.randn(8, 4).to("xla"))

    seen = []

    def shard_output(output, m):
        seen.append(m)
        xs.mark_sharding(output["y"], m, (None, "fsdp"))

    out = FSDPv2(Dict(), mesh=mesh, shard_output=shard_output)(torch.randn(8, 4).to("xla"))
    assert seen == [mesh] and spec(out["y"]) == "{devices=[1,4]%s}" % ALL4


def test_extra_data_axis_shards_the_output_over_both_axes():
    mesh = xs.Mesh(np.arange(4), (2, 2, 1), ("data", "fsdp", "model"))
    model = FSDPv2(MLP(), mesh=mesh, extra_data_axis="data")
    # parameters over 'fsdp' only, replicated over 'data'
    assert spec(model.fc1.weight) == "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"
    x = torch.randn(8, 12).to("xla")
    xs.mark_sharding(x, mesh, (("data", "fsdp"), None))
    assert spec(model(x)) == "{devices=[4,1]%s}" % ALL4


def test_argument_errors():
    with pytest.raises(ValueError, match="No mesh is provided and no global mesh is set"):
        FSDPv2(MLP())
    with pytest.raises(ValueError, match="The mesh must have an axis named 'fsdp'"):
        FSDPv2(MLP(), mesh=xs.Mesh(np.arange(4), (4,), ("data",)))
    with pytest.raises(ValueError, match="The provided ddp axis is not in the mesh"):
        FSDPv2(MLP(), mesh=fsdp_mesh(), extra_data_axis="ddp")
    with pytest.raises(RuntimeError, match="must define a `forward` method"):
        FSDPv2(nn.ModuleList([nn.Linear(2, 2)]), mesh=fsdp_mesh())
    wrapped = FSDPv2(MLP(), mesh=fsdp_mesh())
    with pytest.raises(RuntimeError, match="already wrapped with FSDP"):
        FSDPv2(wrapped, mesh=fsdp_mesh())
    inner = MLP()
    inner.fc1 = FSDPv2(inner.fc1, mesh=fsdp_mesh())
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
    with pytest.raises(ValueError, match="Expected fc1 to NOT be SpmdFullyShardedDataParallel"):
        FSDPv2(inner, mesh=fsdp_mesh(), auto_wrap_policy=policy)


def test_global_mesh_cpu_module_and_attribute_forwarding():
    mesh = fsdp_mesh()
    xs.set_global_mesh(mesh)
    model = FSDPv2(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    assert model._mesh is mesh
    assert str(next(model.module.parameters()).device) == "xla:0"
    assert isinstance(model[1], nn.ReLU)  # indexing reaches the Sequential
    assert model.module[0].in_features == 4


def test_auto_wrap_policies_and_callable():
    mesh = fsdp_mesh()
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    model = FSDPv2(Decoder(), mesh=mesh, auto_wrap_policy=policy)
    assert [type(b) for b in model.blocks] == [FSDPv2, FSDPv2]
    assert not isinstance(model.head, FSDPv2) and not isinstance(model.emb, FSDPv2)
    calls = []

    def callable_(m, *args, **kwargs):
        calls.append(sorted(kwargs))
        return m

    model = FSDPv2(Decoder(), mesh=mesh, auto_wrap_policy=policy, auto_wrapper_callable=callable_)
    assert calls == [["mesh", "shard_output"]] * 2
    assert [type(b) for b in model.blocks] == [Block, Block]
    # every parameter of the root is sharded all the same
    assert all(spec(p) != "" for p in model.parameters())
    # Sizes: emb 128, head 144, each Block's mlp 280 (its Linears 144 and
    # 136), attn 288 but a forced leaf (neither entered nor wrapped), so a
    # Block's remainder is 320 (attn and the norms).
    by_size = functools.partial(size_based_auto_wrap_policy, min_num_params=200)
    model = FSDPv2(Decoder(), mesh=mesh, auto_wrap_policy=by_size)
    wrapped = sorted(n.replace("_orig_module.", "") for n, m in model.named_modules()
                     if isinstance(m, FSDPv2) and n)
    assert wrapped == ["blocks.0", "blocks.0.mlp", "blocks.1", "blocks.1.mlp"]


def _train(model, ref, mesh, steps=3, vocab=16):
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.2)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, vocab, (8, 5), generator=gen)
        tgt = torch.randint(0, vocab, (8, 5), generator=gen)
        x = ids.to("xla")
        xs.mark_sharding(x, mesh, ("fsdp", None))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x).reshape(-1, vocab), tgt.to("xla").reshape(-1))
        loss.backward()
        xm.optimizer_step(opt)
        torch_xla.sync()
        ref_opt.zero_grad()
        ref_loss = nn.functional.cross_entropy(ref(ids).reshape(-1, vocab), tgt.reshape(-1))
        ref_loss.backward()
        ref_opt.step()
        losses.append((loss.item(), ref_loss.item()))
    return losses


def test_training_with_checkpointed_layers_matches_cpu():
    torch.manual_seed(0)
    ref = Decoder()
    mesh = fsdp_mesh()
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    model = FSDPv2(copy.deepcopy(ref), mesh=mesh, auto_wrap_policy=policy,
                   auto_wrapper_callable=lambda m, *a, **k: FSDPv2(checkpoint_module(m), *a, **k))
    assert all(isinstance(b, FSDPv2) for b in model.blocks)
    assert "_xla_checkpointed_forward_original" in model.blocks[0].module.__dict__
    losses = _train(model, ref, mesh)
    for got, want in losses:
        assert abs(got - want) < 1e-5, losses
    assert losses[-1][0] < losses[0][0]  # it learns
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-5, atol=1e-5, msg=name)
        assert spec(p) != "{replicated}" and spec(p) != "", name  # still sharded after updates


def test_gradients_come_out_sharded_from_xlas_partitioner():
    # The annotated gradients through XLA's SPMD partitioner (the CPU
    # plugin, xs.run_spmd): each device's output is its shard of the
    # gradient (a reduce-scatter's result shape), the assembled value the
    # CPU gradient.
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 3))
    mesh = fsdp_mesh()
    model = FSDPv2(copy.deepcopy(ref), mesh=mesh)
    x = torch.randn(8, 12)
    xx = x.to("xla")
    xs.mark_sharding(xx, mesh, ("fsdp", None))
    model(xx).sum().backward()
    ref(x).sum().backward()
    values, shards = xs.run_spmd([p.grad for p in model.parameters()], with_shards=True)
    want_shard = [(8, 3), (2,), (3, 2), (1,)]  # (8, 12), (8,), (3, 8), (3,) over 4
    for value, per_device, q, shape in zip(values, shards, ref.parameters(), want_shard):
        torch.testing.assert_close(value, q.grad, rtol=1e-5, atol=1e-6)
        assert [tuple(per_device[d].shape) for d in range(4)] == [shape] * 4


EIGHT = textwrap.dedent("""
    import copy
    import numpy as np, torch, torch.nn as nn
    import torch_xla, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
    import torch_xla.distributed.spmd as xs
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
        SpmdFullyShardedDataParallel as FSDPv2)
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n, 1), ("fsdp", "model"))
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    model = copy.deepcopy(ref)
    model[0] = FSDPv2(model[0], mesh=mesh)
    model = FSDPv2(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    for step in range(3):
        x, y = torch.randn(16, 16), torch.randn(16, 4)
        xx = x.to("xla")
        xs.mark_sharding(xx, mesh, ("fsdp", None))
        opt.zero_grad()
        loss = ((model(xx) - y.to("xla")) ** 2).mean()
        loss.backward()
        xm.optimizer_step(opt)
        torch_xla.sync()
        ref_opt.zero_grad()
        ref_loss = ((ref(x) - y) ** 2).mean()
        ref_loss.backward()
        ref_opt.step()
        print("LOSS", step, abs(loss.item() - ref_loss.item()) < 1e-5)
    print("DEVICES", n)
    print("MAXERR", max(float((p.cpu() - q.detach()).abs().max())
                        for p, q in zip(model.parameters(), ref.parameters())))
    for name, p in model.named_parameters():
        print("SPEC", name, xs.get_sharding_spec(p), xs.get_sharding_spec(p.grad))
""")


def test_training_on_8_devices_matches_cpu(tmp_path):
    script = tmp_path / "fsdp8.py"
    script.write_text(EIGHT)
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="8",
               PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("XLA_USE_SPMD", None)
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert "DEVICES 8" in lines
    assert [ln for ln in lines if ln.startswith("LOSS")] == [f"LOSS {i} True" for i in range(3)]
    assert float(next(ln for ln in lines if ln.startswith("MAXERR")).split()[1]) < 1e-5
    all8 = "0,1,2,3,4,5,6,7"
    want = {
        "_orig_module.0._orig_module.weight": "{devices=[8,1]%s}" % all8,  # (32, 16)
        "_orig_module.0._orig_module.bias": "{devices=[8]%s}" % all8,
        "_orig_module.2.weight": "{devices=[1,8]%s}" % all8,  # (4, 32)
        "_orig_module.2.bias": "{devices=[8]%s}" % all8,  # 4 elements: padded tiles
    }
    got = {ln.split()[1]: ln.split()[2:] for ln in lines if ln.startswith("SPEC")}
    assert got == {k: [v, v] for k, v in want.items()}, p.stdout
