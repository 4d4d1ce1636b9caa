"""Pictures of a sharding: visualize_sharding, visualize_tensor_sharding.

Contract (PyTorch/XLA's torch_xla.distributed.spmd.debugging):
visualize_sharding(sharding, use_color=True, scale=1., min_width=9,
max_width=80) reads an HloSharding string ('{devices=[2,4]0,...}',
'{devices=[4,1,2]... last_tile_dim_replicate}', '{replicated}' or '')
and prints, with `rich`, a table of its first two tile dims: one cell per
tile naming the device ('CPU 3') or, when replicated, the device list
('CPU [0, 1]'). It prints "Visualizing <sharding> (showing up to the first
two dimensions)" first and returns the rich Table. A one-dim tiling is
drawn as one row (PyTorch/XLA refuses it). Text it cannot read is a
ValueError. visualize_tensor_sharding(t, **kw) does it for t's annotation
(an XLAShardedTensor or an annotated xla tensor). construct_v1_sharding_str(t)
is t's sharding string (always the V1 form here: the engine writes no
V2 iota tile assignments).
"""
import math
import os

import torch_xla.core.xla_env_vars as xenv


def _rich():
    try:
        import rich.align
        import rich.box
        import rich.console
        import rich.padding
        import rich.style
        import rich.table
    except ImportError as e:  # pragma: no cover - rich is in requirements.txt
        raise ValueError("`visualize_sharding` requires `rich` to be installed.") from e
    return rich


def _cells(sharding):
    """{(row, col): device or list of devices}, rows, cols."""
    import torch_xla.runtime as xr
    if sharding in ("", "{replicated}"):
        return {(0, 0): list(range(xr.global_runtime_device_count()))}, 1, 1
    bad = ValueError(f"sharding {sharding} is not organized as expected")
    if not (sharding.startswith("{devices=[") and sharding.endswith("}")):
        raise bad
    body = sharding[len("{devices=["):-1]
    partial = body.endswith(" last_tile_dim_replicate")
    if partial:
        body = body[:-len(" last_tile_dim_replicate")]
    try:
        dims_text, devices_text = body.split("]", 1)
        dims = [int(d) for d in dims_text.split(",")]
        devices = [int(d) for d in devices_text.split(",")]
    except ValueError:
        raise bad from None
    depth = dims[-1] if partial else 1
    tile = dims[:-1] if partial else dims
    rows, cols = (1, tile[0]) if len(tile) == 1 else (tile[0], tile[1])
    if len(devices) != math.prod(dims) or len(set(devices)) != len(devices):
        raise bad
    cells = {}
    # Beyond the first two tile dims, a cell shows the first tile of each.
    per_cell = len(devices) // (rows * cols)
    for i in range(rows * cols):
        group = devices[i * per_cell:(i * per_cell) + depth]
        cells[(i // cols, i % cols)] = group if partial else group[0]
    return cells, rows, cols


def visualize_sharding(sharding, use_color=True, scale=1., min_width=9, max_width=80):
    rich = _rich()
    cells, rows, cols = _cells(sharding)
    print(f"Visualizing {sharding} (showing up to the first two dimensions)")
    console = rich.console.Console(width=max_width)
    use_color = use_color and console.color_system is not None
    kind = os.environ.get(xenv.PJRT_DEVICE, "")
    table = rich.table.Table(show_header=False, show_lines=not use_color, padding=0,
                             highlight=not use_color, pad_edge=False,
                             box=rich.box.SQUARE if not use_color else None)
    for r in range(rows):
        table.add_row(*[
            rich.padding.Padding(
                rich.align.Align(f"{kind} {cells[r, c]}", "center", vertical="middle"),
                (1, 1, 1, 1), style=rich.style.Style(bgcolor=None, color=None))
            for c in range(cols)])
    console.print(table, end="\n\n")
    return table


def construct_v1_sharding_str(t):
    from torch_xla.distributed.spmd import annotations
    return annotations.get_sharding_spec(t)


def visualize_tensor_sharding(t, **kwargs):
    return visualize_sharding(construct_v1_sharding_str(t), **kwargs)
