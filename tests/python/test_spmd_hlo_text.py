"""Shardings in the HLO text of torch_xla._XLAC._get_xla_tensors_hlo
(python/torch_xla/_XLAC/hlo_text.py): `sharding={...}` on parameters and
on the custom calls the StableHLO emitter writes for annotated values
(target "Sharding"), the manual-region targets, and names, parameter
numbers and computation ids as PyTorch/XLA's lowering and XLA's XlaBuilder
give them. Four virtual devices (conftest.py), SPMD mode per test."""
import numpy as np
import pytest
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
from torch_xla._XLAC.hlo_text import _Uniquer, _sharding_text, to_hlo_text

pytestmark = pytest.mark.usefixtures("in_spmd_mode")

hlo_of = torch_xla._XLAC._get_xla_tensors_hlo


def mesh_1x4():
    return xs.Mesh(np.arange(4), (1, 4))


def test_annotated_parameter_carries_its_sharding():
    x = torch.arange(8, dtype=torch.float32).reshape(1, 8).to("xla")
    xs.mark_sharding(x, mesh_1x4(), (0, 1))
    hlo = hlo_of([x + 5])
    # Parameters are numbered as PyTorch/XLA's lowering meets device data
    # (post order, the last operand first): the scalar 5 is parameter 0.
    assert "%p1.1 = f32[1,8]{1,0} parameter(1), sharding={devices=[1,4]0,1,2,3}" in hlo, hlo
    # The scalar is an unannotated input of a partitioned program: the
    # emitted program replicates it, and the text says so.
    assert "%p0.1 = f32[] parameter(0), sharding={replicated}" in hlo, hlo
    assert "entry_computation_layout={(f32[], f32[1,8]{1,0})->(f32[1,8]{1,0})}" in hlo, hlo


def test_unsharded_program_has_no_sharding_text():
    hlo = hlo_of([torch.ones(3, device="xla") * 2])
    assert "sharding" not in hlo and "custom-call" not in hlo, hlo
    assert "  %p0.1 = f32[] parameter(0)\n" in hlo, hlo


def test_annotated_intermediate_is_a_sharding_custom_call_numbered_as_xla():
    a = torch.randn(1, 128).to("xla") + torch.randn(1, 128).to("xla")
    a = xs.mark_sharding(a, mesh_1x4(), (0, 1))
    hlo = hlo_of([a.global_tensor])
    # one add, one custom call: each is <opcode>.1
    assert ('%custom-call.1 = f32[1,128]{1,0} custom-call(f32[1,128]{1,0} %add.1), '
            'custom_call_target="Sharding", sharding={devices=[1,4]0,1,2,3}') in hlo, hlo
    a += 0  # the in-place result keeps the annotation
    hlo = hlo_of([a.global_tensor])
    # XlaBuilder puts each name through its uniquer twice (when the
    # instruction is made, when the computation is built): the k-th of n
    # instructions of one opcode is opcode.(n+k-1).
    assert ('%custom-call.2 = f32[1,128]{1,0} custom-call(f32[1,128]{1,0} %add.2), '
            'custom_call_target="Sharding"') in hlo, hlo
    assert "%add.3 = f32[1,128]{1,0} add(f32[1,128]{1,0} %custom-call.2, " \
        "f32[1,128]{1,0} %broadcast.1)" in hlo, hlo
    assert ('%custom-call.3 = f32[1,128]{1,0} custom-call(f32[1,128]{1,0} %add.3), '
            'custom_call_target="Sharding"') in hlo, hlo
    # parameters: p<number>, each name once, so .1
    assert "%p0.1 = " in hlo and "%p1.1 = " in hlo and "%p2.1 = " in hlo, hlo
    assert "ROOT %tuple.1 = " in hlo, hlo


def test_partial_replication_on_a_3d_mesh():
    t = torch.randn(16, 16).to("xla")
    xs.mark_sharding(t, xs.Mesh(np.arange(4), (2, 2, 1)), (2, 1))
    assert "parameter(0), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}" in \
        hlo_of([t])


def test_manual_region_targets():
    x = torch.zeros(8, 8).to("xla")
    xt = xs.mark_sharding(x, mesh_1x4(), (0, 1))
    xx = torch_xla._XLAC._spmd_full_to_shard_shape(xt.global_tensor)
    hlo = hlo_of([xx])
    # The parameter carries the sharding: SPMDFullToShardShape reads it
    # directly, and carries the {manual} annotation itself (PyTorch/XLA's
    # form: one custom call).
    assert ('%custom-call.1 = f32[8,2]{1,0} custom-call(f32[8,8]{1,0} %p0.1), '
            'custom_call_target="SPMDFullToShardShape", sharding={manual}') in hlo, hlo
    assert "Sharding\"" not in hlo and "custom-call.2" not in hlo, hlo

    y = torch.zeros(8, 8).to("xla") + 1
    yt = xs._mark_manual_sharding(y)
    assert ', sharding={manual}' in hlo_of([yt.global_tensor])
    full = torch_xla._XLAC._spmd_shard_to_full_shape(
        yt.global_tensor, mesh_1x4().get_op_sharding((None, None)), y.shape, y.dtype)
    hlo = hlo_of([full])
    # the {manual} annotation, then the target: two custom calls
    assert ('%custom-call.2 = f32[8,8]{1,0} custom-call(f32[8,8]{1,0} %add.1), '
            'custom_call_target="Sharding", sharding={manual}') in hlo, hlo
    assert ('%custom-call.3 = f32[8,8]{1,0} custom-call(f32[8,8]{1,0} %custom-call.2), '
            'custom_call_target="SPMDShardToFullShape", sharding={replicated}') in hlo, hlo


def test_sharding_text_normalises_whole_replication_only():
    assert _sharding_text('"{devices=[1,1,4]0,1,2,3 last_tile_dim_replicate}"') == "{replicated}"
    assert _sharding_text("{devices=[1,1]0 last_tile_dim_replicate}") == "{replicated}"
    kept = "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"
    assert _sharding_text(kept) == kept
    assert _sharding_text('"{devices=[4,1]0,1,2,3}"') == "{devices=[4,1]0,1,2,3}"
    assert _sharding_text("{manual}") == "{manual}"


def test_reduction_computations_are_imported_as_xla_builder_does():
    a = torch.ones(3, device="xla").sum(0) + torch.ones(3, device="xla").sum(0)
    hlo = hlo_of([a])
    # Each sum's computation is PyTorch/XLA's AddComputation (arguments x,
    # y), built by a builder of its own and imported into the graph's when
    # its reduce is made: its names go through the graph's uniquer (x.1,
    # then x.0: id 1 is taken) and it takes the next computation id; the
    # graph's computation the one after (IrToHlo.3).
    assert "%AddComputation.1 (x.1: f32[], y.1: f32[]) -> f32[] {" in hlo, hlo
    assert "ROOT %add.1 = f32[] add(f32[] %x.1, f32[] %y.1)" in hlo, hlo
    assert "%AddComputation.2 (x.0: f32[], y.0: f32[]) -> f32[] {" in hlo, hlo
    assert hlo.startswith("HloModule IrToHlo.3, ") and "ENTRY %IrToHlo.3 (" in hlo, hlo
    assert "%reduce.2 = f32[] reduce(f32[3]{0} %broadcast.2, f32[] %constant.2), " \
        "dimensions={0}, to_apply=%AddComputation.1" in hlo, hlo
    # the imported add.1 and add.0 come first: the graph's own add is add.3
    assert "%add.3 = f32[] add(f32[] %reduce.3, f32[] %reduce.2)" in hlo, hlo
    assert "ROOT %tuple.1 = (f32[]) tuple(f32[] %add.3)" in hlo, hlo


def test_name_uniquer_follows_xla():
    u = _Uniquer()
    assert [u.get("add"), u.get("add"), u.get("add")] == ["add", "add.1", "add.2"]
    # a second pass over those names: each id is taken, the next free ones
    assert [u.get("add"), u.get("add.1"), u.get("add.2")] == ["add.3", "add.4", "add.5"]
    # a suffix asks for that id; given out, the root's next free one (0 keeps
    # its suffix when asked with one)
    assert [u.get("x.7"), u.get("x.7"), u.get("x.0"), u.get("x")] == ["x.7", "x.0", "x.1", "x.2"]


_TWO_ADDS = """module @m {
  func.func @main(%arg0: tensor<2xf32>, %arg1: tensor<f32>) -> tensor<2xf32> {
    %0 = "stablehlo.broadcast_in_dim"(%arg1) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>
    %1 = "stablehlo.add"(%arg0, %0) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %2 = "stablehlo.add"(%1, %1) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    return %2 : tensor<2xf32>
  }
}
"""


def test_two_pass_numbering_and_parameter_order_from_text():
    hlo = to_hlo_text(_TWO_ADDS)
    # The scalar is met first (last operand first): parameter 0.
    assert "%p0.1 = f32[] parameter(0)" in hlo and "%p1.1 = f32[2]{0} parameter(1)" in hlo, hlo
    assert "%broadcast.1 = f32[2]{0} broadcast(f32[] %p0.1)" in hlo, hlo
    assert "%add.2 = f32[2]{0} add(f32[2]{0} %p1.1, f32[2]{0} %broadcast.1)" in hlo, hlo
    assert "%add.3 = f32[2]{0} add(f32[2]{0} %add.2, f32[2]{0} %add.2)" in hlo, hlo
    assert "entry_computation_layout={(f32[], f32[2]{0})->(f32[2]{0})}" in hlo, hlo
