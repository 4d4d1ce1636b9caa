"""torch_xla._XLAC: PyTorch/XLA's extension-module calls over this engine."""
import numpy as np
import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met

X = torch_xla._XLAC


def test_module_and_unknown_names():
    import torch_xla._XLAC as mod
    assert mod is X
    with pytest.raises(AttributeError, match="_no_such_call"):
        X._no_such_call


def test_graph_text_and_hlo(dev):
    a = torch.randn(3, 4).to(dev)
    b = torch.randn(4, 2).to(dev)
    out = (a @ b).relu().sum(1)
    text = X._get_xla_tensors_text([out])
    assert text.startswith("IR {") and "ROOT=0" in text
    hlo = X._get_xla_tensors_hlo([out])
    assert hlo.startswith("HloModule IrToHlo.")
    assert "ENTRY %IrToHlo." in hlo
    # parameters numbered as PyTorch/XLA's lowering meets its device data:
    # post order from the root, the last operand first (b before a)
    assert "%p0.1 = f32[4,2]{1,0} parameter(0)" in hlo
    assert "%p1.1 = f32[3,4]{1,0} parameter(1)" in hlo
    assert " dot(" in hlo and "lhs_contracting_dims={2}" in hlo
    # the sum's computation is the one PyTorch/XLA's helpers build
    assert "%AddComputation.1 (x.1: f32[], y.1: f32[]) -> f32[] {" in hlo
    assert "reduce(f32[3,2]{1,0}" in hlo and "dimensions={1}, to_apply=%AddComputation.1" in hlo
    assert "ROOT %tuple." in hlo and "(f32[3]{0}) tuple(f32[3]{0}" in hlo
    assert "digraph" in X._get_xla_tensors_dot([out])
    # nothing ran
    assert X._check_tensor_need_materialization([out]) == [True]


def test_graph_hash_follows_structure(dev):
    a = torch.randn(3).to(dev)
    h1 = X._get_graph_hash([a * 2])
    h2 = X._get_graph_hash([a * 3])  # same graph, other scalar value
    h3 = X._get_graph_hash([a + 2])
    assert isinstance(h1, bytes) and len(h1) == 8
    assert h1 == h2 and h1 != h3


def test_debug_info_and_tensor_id(dev):
    t = torch.randn(2, 3).to(dev)
    info = X._get_xla_tensor_debug_info(t)
    assert info.startswith("XLATensor {\nTensorID: ")
    assert "XLA Shape: f32[2,3]\n" in info and "IR: None\n" in info
    assert "Data Device: CPU:0" in info and info.endswith("}\n")
    u = t + 1
    assert "IR: [] aten::add, xla_shape=f32[2,3]{1,0}, dynamic_dims: ()\n" in \
        X._get_xla_tensor_debug_info(u)
    assert X._get_xla_tensor_debug_info(torch.ones(2)) == "Not a XLATensor\n"
    ident = X._xla_get_tensor_id(t)
    assert ident == X._xla_get_tensor_id(t) and ident != X._xla_get_tensor_id(u)
    assert X._get_xla_tensor_shape_type(t) == "f32"


def test_devices():
    n = torch_xla.device_count()
    assert X._xla_runtime_is_initialized()
    assert X._xla_get_all_devices() == [f"CPU:{i}" for i in range(n)]
    assert X._xla_real_devices([f"xla:{n - 1}"]) == [f"CPU:{n - 1}"]
    assert X._xla_get_default_device() == "xla:0"
    X._xla_set_default_device("xla:1")
    try:
        assert X._xla_get_default_device_ordinal() == 1
        assert torch_xla.device() == torch.device("xla", 1)
    finally:
        X._xla_set_default_device("xla:0")
    with pytest.raises(RuntimeError, match="Invalid device"):
        X._xla_get_device_ordinal("TPU:0")
    info = X._xla_memory_info("xla:0")
    assert set(info) == {"bytes_used", "bytes_limit", "peak_bytes_used"}
    assert X._xla_get_replication_devices_count() == 0


def test_sync_multi_and_tensors_from_aten(dev):
    cpu = [torch.ones(2, requires_grad=True), torch.arange(3)]
    xs = X._xla_tensors_from_aten(cpu, ["xla:0", "xla:1"])
    assert [x.device for x in xs] == [torch.device("xla", 0), torch.device("xla", 1)]
    assert xs[0].requires_grad and not xs[1].requires_grad
    y = xs[0] * 4
    X._xla_sync_multi([y], ["xla:0"], wait=True)
    assert X._check_tensor_need_materialization([y]) == [False]
    assert y.cpu().tolist() == [4.0, 4.0]
    with pytest.raises(RuntimeError, match="2 tensors but 1 devices"):
        X._xla_tensors_from_aten(cpu, ["xla:0"])


def test_metrics_calls(clean_metrics):
    X._xla_increment_counter("CreateXlaTensor", 3)
    assert X._xla_counter_value("CreateXlaTensor") == 3
    assert "CreateXlaTensor" in X._xla_metrics_report()
    X._clear_xla_counters()
    assert X._xla_counter_value("CreateXlaTensor") is None
    torch.ones(2).to("xla")
    assert "TensorToData" in X._xla_metric_names()
    assert X._xla_metric_data("TensorToData")[0] == 1
    X._clear_xla_metrics()
    assert X._xla_metric_data("TensorToData") is None


def test_state_switches(dev):
    assert X._xla_get_mat_mul_precision() == "highest"
    X._xla_set_mat_mul_precision("default")
    assert X._xla_get_mat_mul_precision() == "default"
    X._xla_set_mat_mul_precision("highest")
    with pytest.raises(RuntimeError, match="Unknown precision"):
        X._xla_set_mat_mul_precision("fast")

    t = torch.ones(3).to(dev)
    assert X._get_buffer_donation(t) is False
    assert X._set_buffer_donation(t, True) is True
    assert X._get_buffer_donation(t) is True
    assert X._set_buffer_donation(t + 1, True) is False  # a pending value
    X._xla_set_enable_alias_with_buffer_donor_config(True)
    assert X._xla_get_enable_alias_with_buffer_donor_config() is True
    X._xla_set_enable_alias_with_buffer_donor_config(False)

    assert X._get_use_eager_mode() is False
    X._set_use_eager_mode(True)
    try:
        assert torch_xla.experimental.is_eager_mode()
    finally:
        X._set_use_eager_mode(False)


def test_allow_execution(dev):
    v = torch.ones(2).to(dev) + 1
    X._set_allow_execution(False)
    try:
        assert X._get_allow_execution() is False
        with pytest.raises(RuntimeError, match="Unexpected execution happens inside the compiled function, exiting"):
            v.cpu()
    finally:
        X._set_allow_execution(True)
    assert v.cpu().tolist() == [2.0, 2.0]


def test_sharding_calls(dev, in_spmd_mode):
    t = torch.arange(8.).reshape(4, 2).to(dev)
    tiled = X.OpSharding(np.arange(4).reshape(2, 2).tolist(), [], [], 3)
    X._xla_mark_sharding(t, tiled)
    assert X._get_xla_sharding_spec(t) == "{devices=[2,2]0,1,2,3}"
    assert X._get_xla_sharding_type(t) == 3
    shards = X._get_local_shards([t])[0]
    assert [d for _, d in shards] == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    assert shards[3][0].tolist() == [[5.0], [7.0]]  # rows 2..3, column 1
    X._xla_clear_sharding(t)
    assert X._get_xla_sharding_spec(t) == "" and X._get_xla_sharding_type(t) is None
    partial = X.OpSharding([], [[0], [1]], [[0, 1], [2, 3]], 5)
    X._xla_mark_sharding(t, partial)
    assert X._get_xla_sharding_spec(t) == "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
    with pytest.raises(RuntimeError, match="not sharded"):
        X._get_local_shards([torch.zeros(2).to(dev)])
    with pytest.raises(NotImplementedError, match="TUPLE"):
        X.OpSharding([], [], [], 2)


def test_syncfree_optimizer_steps(dev):
    p = torch.ones(3).to(dev)
    buf = torch.zeros(3).to(dev)
    step = torch.tensor(0.0).to(dev)
    g = torch.full((3,), 2.0).to(dev)
    X._xla_sgd_optimizer_step_(torch.tensor(1.0).to(dev), step, p, buf, g, 0.0, 0.9, 0.1, 0.0,
                               False, False)
    assert p.cpu().tolist() == [1.0] * 3 and step.item() == 0.0
    X._xla_sgd_optimizer_step_(torch.tensor(0.0).to(dev), step, p, buf, g, 0.0, 0.9, 0.1, 0.0,
                               False, False)
    torch.testing.assert_close(p.cpu(), torch.full((3,), 0.8))
    assert step.item() == 1.0 and buf.cpu().tolist() == [2.0] * 3


def test_env_switches_refused_or_warned():
    import os
    import subprocess
    import sys
    env = dict(os.environ, XLA_DISABLE_FUNCTIONALIZATION="1", PJRT_DEVICE="CPU")
    r = subprocess.run([sys.executable, "-c", "import torch_xla"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0
    assert "RuntimeError: XLA_DISABLE_FUNCTIONALIZATION=1 is not supported" in r.stderr
    code = ("import warnings, torch, torch_xla\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    torch_xla._XLAC._get_xla_tensors_hlo([torch.ones(2, device='xla') + 1])\n"
            "print([str(x.message)[:30] for x in w])\n")
    env = dict(os.environ, XLA_HLO_DEBUG="1", PJRT_DEVICE="CPU")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert "['XLA_HLO_DEBUG=1: HLO text here']" in r.stdout, r.stderr
