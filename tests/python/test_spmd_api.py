"""torch_xla.distributed.spmd's Python API (issue 30): PartitionSpec,
mark_sharding of modules, XLAShardedTensor and its local shards (compared
with slicing the CPU value), SPMD switching, the Mesh extras, gradients,
shard_as, the DTensor-style entry points, input sharding of loaders and
the sharding picture. The seed's snippet and the switching refusal run in
fresh interpreters with 8 devices (the device count is fixed at start)."""
import io
import os
import subprocess
import sys
import textwrap
import types
from contextlib import redirect_stdout

import numpy as np
import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch_xla.distributed.spmd import Mesh, PartitionSpec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Each test runs in SPMD mode and leaves the mode as it found it (conftest.py).
pytestmark = pytest.mark.usefixtures("in_spmd_mode")


def mesh22():
    return Mesh(np.arange(4), (2, 2), ("x", "y"))


def _xla(t):
    return t.to("xla")


# ------------------------------------------------------------ PartitionSpec
def test_partition_spec_is_a_tuple_accepted_everywhere():
    p = PartitionSpec("x", None)
    assert isinstance(p, tuple) and p == ("x", None) and hash(p) == hash(("x", None))
    assert repr(p) == "PartitionSpec('x', None)" and repr(PartitionSpec("x")) == "PartitionSpec('x')"
    assert PartitionSpec(("x", "y"), None)[0] == ("x", "y")
    mesh = mesh22()
    # The mesh caches OpShardings by spec: a PartitionSpec and its tuple share one.
    assert mesh.get_op_sharding(PartitionSpec("x", None)) is mesh.get_op_sharding(("x", None))
    a, b = _xla(torch.zeros(4, 4)), _xla(torch.zeros(4, 4))
    xs.mark_sharding(a, mesh, PartitionSpec("x", None))
    xs.mark_sharding(b, mesh, ("x", None))
    assert xs.get_sharding_spec(a) == xs.get_sharding_spec(b) == \
        "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
    spec = xs.ShardingSpec(mesh, PartitionSpec(None, ("x", "y")))
    c = _xla(torch.zeros(2, 8))
    spec.apply(c)
    assert xs.get_sharding_spec(c) == "{devices=[1,4]0,1,2,3}"


def test_partition_spec_refusals():
    with pytest.raises(ValueError, match="nested tuples"):
        PartitionSpec((("x",),))
    with pytest.raises(ValueError, match="not supported in partition spec"):
        PartitionSpec(1.5)
    t = _xla(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="Axis name z is not defined in the given mesh"):
        xs.mark_sharding(t, mesh22(), PartitionSpec("z", None))


# -------------------------------------------------------------- local shards
def _check_shards(value, xt, expect):
    """expect: per device (indices as (start, stop) pairs or Ellipsis, replica_id)."""
    shards = xt.local_shards
    assert len(shards) == len(expect)
    for d, (shard, (idx, replica)) in enumerate(zip(shards, expect)):
        assert shard.shard_device == f"CPU:{d}" and shard.replica_id == replica
        assert shard.data.device == torch.device("cpu") and shard.data.dtype == value.dtype
        if idx is Ellipsis:
            assert shard.indices is Ellipsis
            torch.testing.assert_close(shard.data, value, rtol=0, atol=0)
            continue
        assert shard.indices == [slice(a, b, 1) for a, b in idx]
        piece = value[tuple(slice(a, b) for a, b in idx)]
        torch.testing.assert_close(shard.unpadded_data, piece, rtol=0, atol=0)
        # The padding beyond the piece is zeros.
        pad = shard.data.clone()
        pad[tuple(slice(0, b - a) for a, b in idx)] = 0
        assert torch.count_nonzero(pad) == 0
    return shards


def test_tiled_local_shards_pad_to_ceil():
    value = torch.arange(1, 16, dtype=torch.float32).reshape(5, 3)
    xt = xs.mark_sharding(_xla(value), mesh22(), ("x", "y"))
    # rows: ceil(5/2)=3 -> [0,3) [3,5); cols: ceil(3/2)=2 -> [0,2) [2,3)
    shards = _check_shards(value, xt, [
        ([(0, 3), (0, 2)], 0), ([(0, 3), (2, 3)], 0),
        ([(3, 5), (0, 2)], 0), ([(3, 5), (2, 3)], 0)])
    assert all(tuple(s.data.shape) == (3, 2) for s in shards)
    assert xt.sharding_type == xs.ShardingType.TILED
    assert xt.sharding_spec == "{devices=[2,2]0,1,2,3}"


def test_empty_tail_shards_and_permuted_mesh():
    value = torch.arange(5, dtype=torch.int64) + 10
    mesh = Mesh([3, 2, 1, 0], (4,), ("d",))
    xt = xs.mark_sharding(_xla(value), mesh, ("d",))
    # ceil(5/4)=2; tile k is held by device 3-k: device 0 holds [6, 8) -> [5, 5)
    shards = _check_shards(value, xt, [
        ([(5, 5)], 0), ([(4, 5)], 0), ([(2, 4)], 0), ([(0, 2)], 0)])
    assert shards[0].data.tolist() == [0, 0] and shards[1].data.tolist() == [14, 0]


def test_partial_and_replicated_replica_ids():
    value = torch.randn(4, 6)
    xt = xs.mark_sharding(_xla(value), mesh22(), (None, "y"))
    assert xt.sharding_type == xs.ShardingType.PARTIAL
    # device d sits at mesh (d // 2, d % 2): columns by d % 2, replica d // 2
    _check_shards(value, xt, [([(0, 4), (0, 3)], 0), ([(0, 4), (3, 6)], 0),
                              ([(0, 4), (0, 3)], 1), ([(0, 4), (3, 6)], 1)])
    xs.clear_sharding(xt)
    xr_t = xs.mark_sharding(_xla(value), mesh22(), (None, None))
    assert xr_t.sharding_type == xs.ShardingType.REPLICATED
    _check_shards(value, xr_t, [(Ellipsis, d) for d in range(4)])


def test_tuple_axes_shard_one_dim_over_both():
    value = torch.arange(8.)
    xt = xs.mark_sharding(_xla(value), mesh22(), (("y", "x"),))
    # axes (y, x): the tile order walks y major -> devices 0, 2, 1, 3
    assert xt.sharding_spec == "{devices=[4]0,2,1,3}"
    _check_shards(value, xt, [([(0, 2)], 0), ([(4, 6)], 0), ([(2, 4)], 0), ([(6, 8)], 0)])


def test_load_local_shards_round_trip_and_refusals():
    value = torch.arange(1, 10, dtype=torch.float32)
    xt = xs.mark_sharding(_xla(value), Mesh(np.arange(4), (4,)), (0,))
    shards = xt.local_shards
    for s in shards:
        s.data *= -1
    xt.load_local_shards_(shards)
    torch.testing.assert_close(xt.global_tensor.cpu(), -value)
    assert xt.sharding_spec == "{devices=[4]0,1,2,3}"  # still sharded
    with pytest.raises(RuntimeError, match="devices"):
        xt.load_local_shards_(shards[:-1])
    for s in shards:
        s.data = torch.zeros(2 * s.data.shape[0])
    with pytest.raises(RuntimeError, match="does not match the sharding's shard shape"):
        xt.load_local_shards_(shards)
    rt = xs.mark_sharding(_xla(value), Mesh(np.arange(4), (4,)), (None,))
    with pytest.raises(RuntimeError, match="requires a tiled sharding"):
        rt.load_local_shards_(rt.local_shards)


def test_global_tensor_from_cpu_shards():
    from_shards = torch_xla._XLAC._global_tensor_from_cpu_shards
    op = Mesh(np.arange(4), (4,)).get_op_sharding((0,))
    shards = [torch.tensor([2 * i, 2 * i + 1]) for i in range(4)]
    assert from_shards(shards, op).cpu().tolist() == list(range(8))
    assert from_shards(shards, op, torch.Size((7,))).cpu().tolist() == list(range(7))
    # shards are ceil(dim / 4) = 2 long: 5..8 fit, 4 would need shards of 1
    assert from_shards(shards, op, torch.Size((5,))).cpu().tolist() == list(range(5))
    for bad in [(9,), (4,), (1, 8)]:
        with pytest.raises(RuntimeError, match="does not fit shards"):
            from_shards(shards, op, torch.Size(bad))
    with pytest.raises(RuntimeError, match="one per device"):
        from_shards(shards[:3], op)


# ------------------------------------------------------- re-marking, modules
def test_remarking_needs_clear_sharding():
    t = _xla(torch.zeros(4, 4))
    xs.mark_sharding(t, mesh22(), ("x", "y"))
    xs.mark_sharding(t, mesh22(), ("x", "y"))  # the same sharding again: fine
    with pytest.raises(RuntimeError, match=r"Existing annotation must be cleared first: "
                                           r"\{devices=\[2,2\]0,1,2,3\}"):
        xs.mark_sharding(t, mesh22(), ("y", "x"))
    assert xs.get_sharding_spec(t) == "{devices=[2,2]0,1,2,3}"
    # annotate_custom_sharding replaces without the check
    xs.annotate_custom_sharding(t, mesh22(), ("y", "x"))
    assert xs.get_sharding_spec(t) == "{devices=[2,2]0,2,1,3}"
    assert xs.clear_sharding(t) is t and xs.get_sharding_spec(t) == ""
    xs.mark_sharding(t, mesh22(), (None, None))
    xs.mark_sharding(t, mesh22(), ("x", None))  # over a replicated one: fine
    assert "last_tile_dim_replicate" in xs.get_sharding_spec(t)


def test_mark_sharding_of_a_module():
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 4)).to("xla")
    xs.mark_sharding(model[2].bias, Mesh(np.arange(4), (4,)), (0,))
    mesh = Mesh(np.arange(4), (4,), ("data",))
    assert xs.mark_sharding(model, mesh, PartitionSpec("data", None)) is model
    specs = {n: xs.get_sharding_spec(p) for n, p in model.named_parameters()}
    assert specs == {"0.weight": "{devices=[4,1]0,1,2,3}", "0.bias": "{replicated}",
                     "2.weight": "{devices=[4,1]0,1,2,3}", "2.bias": "{devices=[4]0,1,2,3}"}
    assert all(type(p) is torch.nn.Parameter for p in model.parameters())
    with pytest.raises(xs.SpmdSpecError, match=r"parameters have ranks \[1, 2\]"):
        xs.mark_sharding(model, mesh, ("data", None, None))
    with pytest.raises(ValueError, match="not defined in the given mesh"):
        xs.mark_sharding(model, mesh, ("model", None))
    with pytest.raises(TypeError, match="parameter 'weight' expects a tensor on an xla device"):
        xs.mark_sharding(torch.nn.Linear(2, 2), mesh, ("data", None))


# -------------------------------------------------------------- SPMD switching
def test_spmd_mode_presents_one_virtual_device():
    xr._spmd = False
    os.environ.pop("XLA_USE_SPMD")
    assert not xr.is_spmd()
    assert xm.get_xla_supported_devices() == ["xla:0", "xla:1", "xla:2", "xla:3"]
    assert xr.global_device_count() == xr.addressable_device_count() == 4
    xr.use_spmd()
    assert xr.is_spmd() and os.environ["XLA_USE_SPMD"] == "1"
    assert xm.get_xla_supported_devices() == ["xla:0"]
    assert xr.global_device_count() == xr.addressable_device_count() == 1
    assert xr.global_runtime_device_count() == 4 and xr.world_size() == 1


SWITCHING = textwrap.dedent(r"""
    import numpy as np, torch, torch_xla
    import torch_xla.runtime as xr
    import torch_xla.distributed.spmd as xs
    a = torch.ones(2, device="xla:0")
    b = torch.ones(2).to("xla:3")
    try:
        xs.mark_sharding(a, xs.Mesh(np.arange(8), (8,)), (0,))
    except RuntimeError as e:
        print("REFUSED", xr.is_spmd(), e)
    del b
    xs.mark_sharding(a, xs.Mesh(np.arange(8), (8,)), (0,))
    print("SWITCHED", xr.is_spmd(), xs.get_sharding_spec(a))
""")

SEED = textwrap.dedent(r"""
    import numpy as np, torch, torch_xla
    import torch_xla.runtime as xr
    import torch_xla.distributed.spmd as xs
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 2)).to("xla")
    from torch_xla.distributed.spmd import Mesh, mark_sharding, PartitionSpec
    mesh = Mesh(np.arange(8), (8,), axis_names=("data",))
    mark_sharding(model, mesh, PartitionSpec("data", None))
    print("SPMD", xr.is_spmd(), xr.global_runtime_device_count())
    for n, p in model.named_parameters():
        print("PARAM", n, xs.get_sharding_spec(p))
    x = torch.randn(12, 16)
    xt = mark_sharding(x.to("xla"), mesh, PartitionSpec("data", None))
    rows = [(s.indices[0].start, s.indices[0].stop, tuple(s.data.shape)) for s in xt.local_shards]
    print("ROWS", rows)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    out = model(xt)
    print("OUT", type(out).__name__, float((out.global_tensor.cpu() - ref(x)).abs().max()))
""")


def _run(tmp_path, name, text, devices=8):
    script = tmp_path / f"{name}.py"
    script.write_text(text)
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices),
               PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("XLA_USE_SPMD", None)
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_switching_refused_after_other_devices_then_allowed(tmp_path):
    out = _run(tmp_path, "switching", SWITCHING)
    assert ("REFUSED False mark_sharding: SPMD mode is off and this program already placed "
            "data on xla:3.") in out, out
    assert "call torch_xla.runtime.use_spmd() at the start of the program" in out
    assert "SWITCHED True {devices=[8]0,1,2,3,4,5,6,7}" in out, out


def test_seed_snippet_on_8_devices(tmp_path):
    out = _run(tmp_path, "seed", SEED)
    lines = out.splitlines()
    assert "SPMD True 8" in lines, out
    assert [ln for ln in lines if ln.startswith("PARAM")] == [
        "PARAM 0.weight {devices=[8,1]0,1,2,3,4,5,6,7}", "PARAM 0.bias {replicated}",
        "PARAM 2.weight {devices=[8,1]0,1,2,3,4,5,6,7}", "PARAM 2.bias {replicated}"]
    # 12 rows over 8: ceil = 2, so devices 6 and 7 hold only padding
    want = [(min(2 * d, 12), min(2 * d + 2, 12), (2, 16)) for d in range(8)]
    assert f"ROWS {want}" in lines, out
    out_line = next(ln for ln in lines if ln.startswith("OUT"))
    assert out_line.split()[1] == "XLAShardedTensor" and float(out_line.split()[2]) < 1e-5


# ----------------------------------------------------------- XLAShardedTensor
def test_sharded_tensor_is_a_dtensor_and_computes_like_its_global_tensor():
    x = torch.randn(4, 6)
    xt = xs.mark_sharding(_xla(x), mesh22(), ("x", None))
    assert isinstance(xt, DTensor) and isinstance(xt, xs.XLAShardedTensor)
    assert xt.shape == (4, 6) and xt.dtype == torch.float32 and xt.device.type == "xla"
    lin = torch.nn.Linear(6, 3)
    out = lin.to("xla")(xt)
    assert isinstance(out, xs.XLAShardedTensor) and "XLAShardedTensor" in repr(out)
    torch.testing.assert_close(out.global_tensor.cpu(), lin.cpu()(x))
    leaf = xs.XLAShardedTensor(_xla(x), requires_grad=True)
    (leaf * leaf).sum().backward()
    assert leaf.grad is not None and leaf.grad.shape == (4, 6)
    torch.testing.assert_close(leaf.grad.cpu() if not isinstance(leaf.grad, xs.XLAShardedTensor)
                               else leaf.grad.global_tensor.cpu(), 2 * x)
    assert xs.wrap_if_sharded(xt.global_tensor).sharding_spec == xt.sharding_spec
    plain = _xla(x)
    assert xs.wrap_if_sharded(plain) is plain


# ------------------------------------------------------------- Mesh extras
def test_mesh_text_round_trip_op_sharding_cache_and_hybrid_mesh():
    mesh = Mesh(np.array([1, 0, 3, 2]), (2, 2), ("a", "b"))
    assert str(mesh) == "{'device_ids': [1, 0, 3, 2], 'mesh_shape': (2, 2), 'axis_names': ('a', 'b')}"
    again = Mesh.from_str(str(mesh))
    assert again == mesh and again.get_logical_mesh().tolist() == [[1, 0], [3, 2]]
    assert Mesh.from_str("not a mesh") is None and Mesh.from_str("{'device_ids': [0]}") is None
    met.clear_counters()
    op = mesh.get_op_sharding(("a", None))
    assert mesh.get_op_sharding(("a", None)) is op and op.type == int(xs.ShardingType.PARTIAL)
    assert met.counter_value("CreateOpSharding") == 1
    hm = xs.HybridMesh(ici_mesh_shape=(2, 2), axis_names=("a", "b"))
    assert hm.get_logical_mesh().tolist() == [[0, 1], [2, 3]] and hm.dcn_mesh_shape == (1, 1)
    with pytest.raises(ValueError, match="Invalid dcn_mesh_shape for single slice mesh"):
        xs.HybridMesh(ici_mesh_shape=(2, 1), dcn_mesh_shape=(1, 2))


# ---------------------------------------------------- gradients and pairing
def test_mark_sharding_with_gradients_annotates_the_gradient():
    x = torch.arange(8., device="xla").requires_grad_()
    mesh = Mesh(np.arange(4), (4,))
    y = xs.mark_sharding_with_gradients(x, mesh, (0,))
    assert xs.get_sharding_spec(x) == "" and xs.get_sharding_spec(y) == "{devices=[4]0,1,2,3}"
    (y * y).sum().backward()
    assert xs.get_sharding_spec(x.grad) == "{devices=[4]0,1,2,3}"
    torch.testing.assert_close(x.grad.cpu(), 2 * torch.arange(8.))


def test_shard_as_pairs_annotations():
    mesh = Mesh(np.arange(4), (4,))
    a, b = _xla(torch.zeros(8)), _xla(torch.ones(8))
    xs.mark_sharding(a, mesh, (0,))
    ra, rb = xs.shard_as({"k": a}, {"k": b})
    assert ra["k"] is a and rb["k"] is b
    assert xs.get_sharding_spec(b) == xs.get_sharding_spec(a) == "{devices=[4]0,1,2,3}"
    c = _xla(torch.zeros(8))
    xs.mark_sharding(c, Mesh([3, 2, 1, 0], (4,)), (0,))
    with pytest.raises(RuntimeError, match="already sharded differently"):
        xs.shard_as(a, c)
    with pytest.raises(AssertionError, match="same structure"):
        xs.shard_as([a], (a,))


def test_backward_optimization_barrier_keeps_gradients():
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 3)
    m = torch.nn.Linear(4, 3).to("xla")
    m.load_state_dict({k: v.to("xla") for k, v in ref.state_dict().items()})
    calls = []
    import torch_xla.distributed.spmd.gradient_sharding as gs
    orig = xm.optimization_barrier_
    xm.optimization_barrier_ = lambda ts: calls.append(len(ts)) or orig(ts)
    try:
        xs.apply_backward_optimization_barrier(m)
        x = torch.randn(5, 4)
        m(x.to("xla").requires_grad_()).sum().backward()
    finally:
        xm.optimization_barrier_ = orig
    ref(x).sum().backward()
    assert calls == [3]  # weight.grad, bias.grad and the input's gradient
    torch.testing.assert_close(m.weight.grad.cpu(), ref.weight.grad)
    assert gs.apply_backward_optimization_barrier is xs.apply_backward_optimization_barrier


# ------------------------------------------------- DTensor-style entry points
def test_xla_distribute_tensor_and_module():
    dmesh = types.SimpleNamespace(mesh=torch.arange(4).reshape(2, 2), mesh_dim_names=("x", "y"),
                                  device_type="xla")
    t = torch.randn(4, 4)
    xt = xs.xla_distribute_tensor(t, dmesh, [Shard(1), Replicate()])
    assert isinstance(xt, xs.XLAShardedTensor) and xr.is_spmd()
    assert xt.sharding_spec == "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}"
    torch.testing.assert_close(xt.global_tensor.cpu(), t)
    with pytest.raises(AssertionError, match="clear_sharding"):
        xs.xla_distribute_tensor(xt, dmesh, [Shard(0), Replicate()])
    seen = []
    model = torch.nn.Sequential(torch.nn.Linear(4, 4)).to("xla")

    def partition_fn(name, sub, mesh):
        seen.append(name)
        if isinstance(sub, torch.nn.Linear):
            xs.mark_sharding(sub.weight, mesh22(), ("x", None))

    def input_fn(mod, inputs, mesh):
        seen.append(("input", mesh is dmesh))

    assert xs.xla_distribute_module(model, dmesh, partition_fn, input_fn=input_fn) is model
    model(_xla(torch.zeros(1, 4)))
    assert seen == ["", "0", ("input", True)]
    assert "last_tile_dim_replicate" in xs.get_sharding_spec(model[0].weight)
    with pytest.raises(ValueError, match="should take in 3 arguments, but got 1"):
        xs.xla_distribute_module(model, dmesh, input_fn=lambda a: a)


# ----------------------------------------------------------- input sharding
def test_mp_device_loader_input_sharding():
    mesh = Mesh(np.arange(4), (4,), ("data",))
    batches = [(torch.randn(8, 3), torch.arange(8)) for _ in range(2)]
    loader = pl.MpDeviceLoader(batches, "xla:0",
                               input_sharding=xs.ShardingSpec(mesh, ("data", None)))
    got = list(loader)
    assert len(got) == 2
    for (x, y), (cx, cy) in zip(got, batches):
        assert xs.get_sharding_spec(x) == "{devices=[4,1]0,1,2,3}"
        # rank 1: the rank-2 spec does not apply, so y is loaded as data
        # without a sharding, replicated (PyTorch/XLA's virtual device)
        assert xs.get_sharding_spec(y) == "{replicated}"
        torch.testing.assert_close(x.cpu(), cx)
    dict_batches = [{"x": torch.randn(8, 3), "y": torch.arange(8)}]
    shardings = {"x": xs.ShardingSpec(mesh, ("data", None)),
                 "y": xs.ShardingSpec(mesh, ("data",), minibatch=True)}
    (b,) = list(pl.MpDeviceLoader(dict_batches, "xla:0", input_sharding=shardings))
    assert xs.get_sharding_spec(b["y"]) == "{devices=[4]0,1,2,3}"
    with pytest.raises(KeyError, match=r"Keys: \['y'\] are missing from input_sharding"):
        list(pl.MpDeviceLoader(dict_batches, "xla:0", input_sharding={"x": shardings["x"]}))
    with pytest.raises(RuntimeError, match="divisible by local runtime device count"):
        list(pl.MpDeviceLoader([{"y": torch.arange(6)}], "xla:0",
                               input_sharding={"y": shardings["y"]}))
    # a batch that is a lone tensor is loaded as that tensor (not a list)
    (t,) = list(pl.MpDeviceLoader([torch.randn(8, 3)], "xla:0",
                                  input_sharding=xs.ShardingSpec(mesh, ("data", None))))
    assert isinstance(t, torch.Tensor) and xs.get_sharding_spec(t) == "{devices=[4,1]0,1,2,3}"


# ------------------------------------------------------------- the picture
def test_visualize_tensor_sharding_table():
    import rich.console
    from torch_xla.distributed.spmd.debugging import visualize_tensor_sharding
    t = _xla(torch.zeros(4, 4))
    xs.mark_sharding(t, mesh22(), ("x", None))
    buf = io.StringIO()
    with redirect_stdout(buf):
        table = visualize_tensor_sharding(t, use_color=False)
    assert buf.getvalue().startswith(
        "Visualizing {devices=[2,1,2]0,1,2,3 last_tile_dim_replicate} (showing up to the "
        "first two dimensions)")
    console = rich.console.Console(width=80, color_system=None)
    with console.capture() as cap:
        console.print(table)
    cells = [ln.strip(" │") for ln in cap.get().splitlines() if "CPU" in ln]
    assert cells == ["CPU [0, 1]", "CPU [2, 3]"]
    with pytest.raises(ValueError, match="is not organized as expected"):
        visualize_tensor_sharding.__globals__["visualize_sharding"]("{devices=[2]0}")


# ------------------------------------------------- manual regions via _XLAC
def test_manual_region_through_xlac_calls():
    mesh = Mesh(np.arange(1), (1, 1))  # the own backend runs one-device manual regions
    x = _xla(torch.arange(6.).reshape(3, 2))
    with pytest.raises(RuntimeError, match="has no sharding annotation"):
        torch_xla._XLAC._spmd_full_to_shard_shape(x)
    with pytest.raises(RuntimeError, match="device data tensor cannot be marked"):
        xs._mark_manual_sharding(x)
    xt = xs.mark_sharding(x, mesh, (0, 1))
    shard = torch_xla._XLAC._spmd_full_to_shard_shape(xt.global_tensor)
    assert xs.get_sharding_spec(shard) == "{manual}" and tuple(shard.shape) == (3, 2)
    with pytest.raises(RuntimeError, match="must carry a \\{manual\\} sharding"):
        torch_xla._XLAC._spmd_shard_to_full_shape(x, mesh.get_op_sharding((0, 1)), x.shape,
                                                  x.dtype)
    marked = xs._mark_manual_sharding(shard * 2)
    assert marked.sharding_type == xs.ShardingType.MANUAL
    full = torch_xla._XLAC._spmd_shard_to_full_shape(
        marked.global_tensor, mesh.get_op_sharding((0, 1)), x.shape, x.dtype)
    assert full.cpu().tolist() == (2 * torch.arange(6.).reshape(3, 2)).tolist()


def test_mark_sharding_function_traces_as_one_operator():
    from functorch.compile import aot_function, make_boxed_func
    from torch_xla.distributed.spmd.xla_sharding import MarkShardingFunction
    mesh = Mesh(np.arange(4), (4,))
    graphs = []

    def capture(gm, _):
        graphs.append(gm.code)
        return make_boxed_func(gm)

    def fn(x):
        return MarkShardingFunction.apply(torch.sin(x), mesh, (0,)) + 42

    cpu = torch.randn(8)
    x = cpu.to("xla").requires_grad_(True)
    y = aot_function(fn, capture)(x)
    y.sum().backward()
    assert len(graphs) == 2
    for code in graphs:  # forward and backward each hold the annotation
        assert "torch.ops.xla.aot_mark_sharding.default(" in code
        assert "'mesh_shape': (4,)" in code and "'(0,)'" in code
    torch.testing.assert_close(y.cpu(), torch.sin(cpu) + 42)
    torch.testing.assert_close(x.grad.cpu(), torch.cos(cpu))


# ----------------------------------------------------------- HybridMesh
def test_torus_folding_lays_logical_axes_over_whole_physical_axes():
    from torch_xla.distributed.spmd.tpu_mesh_layout import fold_onto_torus, physical_mesh
    attrs = [{"coords": c} for c in ([0, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 0])]
    phys = physical_mesh(attrs, [0, 1, 2, 3])
    assert phys.tolist() == [[[2], [0]], [[1], [3]]]
    # the last logical axis takes physical x (with the size-1 z), the first y
    assert fold_onto_torus(phys, (2, 2)).tolist() == [[2, 1], [0, 3]]
    assert fold_onto_torus(np.arange(8).reshape(4, 2, 1), (2, 4)).tolist() == \
        [[0, 2, 4, 6], [1, 3, 5, 7]]
    # 2 fits no product of (4, 1, 1): devices in physical order
    assert fold_onto_torus(np.arange(4).reshape(4, 1, 1), (2, 2)).tolist() == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="do not tile"):
        physical_mesh([{"coords": [0, 0, 0]}, {"coords": [2, 0, 0]}], [0, 1])


def test_hybrid_mesh_across_slices(monkeypatch):
    attrs = [{"name": f"CPU:{i}", "slice_index": i % 2, "coords": [0, 0, 0]} for i in (3, 1, 2, 0)]
    monkeypatch.setattr(xr, "global_runtime_device_attributes", lambda: [dict(a) for a in attrs])
    mesh = xs.HybridMesh(ici_mesh_shape=(1, 2), dcn_mesh_shape=(2, 1), axis_names=("s", "d"))
    # slice 0 holds devices 0 and 2, slice 1 devices 1 and 3; slices stack along dcn axis 0
    assert mesh.get_logical_mesh().tolist() == [[0, 2], [1, 3]]
    assert mesh.shape() == {"s": 2, "d": 2}
    with pytest.raises(ValueError, match="Provide dcn_mesh_shape to create a mesh for multislice"):
        xs.HybridMesh(ici_mesh_shape=(2, 2))
    with pytest.raises(ValueError, match="Number of slices 2 must equal the product of"):
        xs.HybridMesh(ici_mesh_shape=(1, 1), dcn_mesh_shape=(4, 1))


def test_sharded_tensor_placements_and_redistribute():
    from torch.distributed.tensor import Partial
    xt = xs.mark_sharding(_xla(torch.randn(4, 6)), mesh22(), ("x", None))
    assert xt.placements == (Shard(0), Replicate())
    assert tuple(xt._spec.mesh.mesh.shape) == (2, 2) and xt._spec.tensor_meta.shape == (4, 6)
    both = xs.mark_sharding(_xla(torch.randn(8)), mesh22(), (("x", "y"),))
    assert both.placements == (Shard(0), Shard(0))
    copy = xt.redistribute(mesh22(), [Replicate(), Shard(1)], async_op=True)
    assert copy.sharding_spec == "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"
    assert xt.sharding_spec == "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"  # untouched
    assert copy.placements == (Replicate(), Shard(1))
    torch.testing.assert_close(copy.global_tensor.cpu(), xt.global_tensor.cpu())
    moved = xt.redistribute(mesh22(), [Shard(1), Shard(0)])
    assert moved.global_tensor is xt.global_tensor and xt.sharding_spec == "{devices=[2,2]0,2,1,3}"
    with pytest.raises(ValueError, match=r"Number of placements \(1\) must match mesh dimensions"):
        xt.redistribute(mesh22(), [Replicate()])
    with pytest.raises(NotImplementedError, match="Partial placement"):
        xt.redistribute(mesh22(), [Partial(), Replicate()])
    with pytest.raises(IndexError, match="Shard dimension 2 is out of bounds"):
        xt.redistribute(mesh22(), [Shard(2), Replicate()])
    with pytest.raises(ValueError, match="Placements not available"):
        xs.XLAShardedTensor(_xla(torch.zeros(2))).placements
