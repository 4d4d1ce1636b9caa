"""Shardings in the HLO text of torch_xla._XLAC._get_xla_tensors_hlo
(python/torch_xla/_XLAC/hlo_text.py): `sharding={...}` on parameters and
on the custom calls the StableHLO emitter writes for annotated values
(target "Sharding"), the manual-region targets, and the per-name
instruction numbering PyTorch/XLA's dumps use. Four virtual devices
(conftest.py), SPMD mode per test."""
import numpy as np
import pytest
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
from torch_xla._XLAC.hlo_text import _sharding_text

pytestmark = pytest.mark.usefixtures("in_spmd_mode")

hlo_of = torch_xla._XLAC._get_xla_tensors_hlo


def mesh_1x4():
    return xs.Mesh(np.arange(4), (1, 4))


def test_annotated_parameter_carries_its_sharding():
    x = torch.arange(8, dtype=torch.float32).reshape(1, 8).to("xla")
    xs.mark_sharding(x, mesh_1x4(), (0, 1))
    hlo = hlo_of([x + 5])
    assert "%p0.1 = f32[1,8]{1,0} parameter(0), sharding={devices=[1,4]0,1,2,3}" in hlo, hlo
    # The scalar is an unannotated input of a partitioned program: the
    # emitted program replicates it, and the text says so.
    assert "%p1.1 = f32[] parameter(1), sharding={replicated}" in hlo, hlo


def test_unsharded_program_has_no_sharding_text():
    hlo = hlo_of([torch.ones(3, device="xla") * 2])
    assert "sharding" not in hlo and "custom-call" not in hlo, hlo
    assert "  %p0.1 = f32[] parameter(0)\n" in hlo, hlo


def test_annotated_intermediate_is_a_sharding_custom_call_numbered_per_name():
    a = torch.randn(1, 128).to("xla") + torch.randn(1, 128).to("xla")
    a = xs.mark_sharding(a, mesh_1x4(), (0, 1))
    hlo = hlo_of([a.global_tensor])
    assert ('%custom-call.1 = f32[1,128]{1,0} custom-call(f32[1,128]{1,0} %add.1), '
            'custom_call_target="Sharding", sharding={devices=[1,4]0,1,2,3}') in hlo, hlo
    a += 0  # the in-place result keeps the annotation
    hlo = hlo_of([a.global_tensor])
    assert "%add.2 = f32[1,128]{1,0} add(f32[1,128]{1,0} %custom-call.1, " in hlo, hlo
    assert ('%custom-call.2 = f32[1,128]{1,0} custom-call(f32[1,128]{1,0} %add.2), '
            'custom_call_target="Sharding", sharding={devices=[1,4]0,1,2,3}') in hlo, hlo
    # every base counts from 1 on its own: the parameters too
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
    assert ('%custom-call.2 = f32[8,2]{1,0} custom-call(f32[8,8]{1,0} %custom-call.1), '
            'custom_call_target="SPMDFullToShardShape", sharding={manual}') in hlo, hlo
    assert ('%custom-call.1 = f32[8,8]{1,0} custom-call(f32[8,8]{1,0} %p0.1), '
            'custom_call_target="Sharding", sharding={devices=[1,4]0,1,2,3}') in hlo, hlo

    y = torch.zeros(8, 8).to("xla") + 1
    yt = xs._mark_manual_sharding(y)
    assert ', sharding={manual}' in hlo_of([yt.global_tensor])
    full = torch_xla._XLAC._spmd_shard_to_full_shape(
        yt.global_tensor, mesh_1x4().get_op_sharding((None, None)), y.shape, y.dtype)
    hlo = hlo_of([full])
    assert 'custom_call_target="SPMDShardToFullShape", sharding={replicated}' in hlo, hlo


def test_sharding_text_normalises_whole_replication_only():
    assert _sharding_text('"{devices=[1,1,4]0,1,2,3 last_tile_dim_replicate}"') == "{replicated}"
    assert _sharding_text("{devices=[1,1]0 last_tile_dim_replicate}") == "{replicated}"
    kept = "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"
    assert _sharding_text(kept) == kept
    assert _sharding_text('"{devices=[4,1]0,1,2,3}"') == "{devices=[4,1]0,1,2,3}"
    assert _sharding_text("{manual}") == "{manual}"


def test_regions_take_no_tuple_numbers():
    a = torch.ones(3, device="xla").sum(0) + torch.ones(3, device="xla").sum(0)
    hlo = hlo_of([a])
    assert "%reduce.2 = f32[] reduce(f32[3]{0} %broadcast.2, f32[] %constant.2), " \
        "dimensions={0}, to_apply=%region.2" in hlo, hlo
    assert "ROOT %tuple.1 = (f32[]) tuple(f32[] %add.3)" in hlo, hlo
