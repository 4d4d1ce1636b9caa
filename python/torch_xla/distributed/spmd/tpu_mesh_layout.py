"""Laying a logical mesh over TPU chips: which device sits where.

Contract:
- physical_mesh(device_attributes, devices): the device indices `devices`
  placed at their `coords` (x, y, z): an array of shape max(coords) + 1.
- fold_onto_torus(physical, mesh_shape): the devices of `physical` in the
  shape mesh_shape, each logical axis laid over whole physical axes. The
  logical axes are taken last first (the last is the most communication-
  heavy, PyTorch/XLA's and JAX's convention), each given the first subset
  of still-free physical axes -- most axes first, then in index order --
  whose sizes multiply to its size; the result is the physical mesh with
  its axes transposed into that order. This is the placement PyTorch/XLA
  (after JAX's mesh utilities) computes when no physical axis has to be
  split. When some logical axis fits no subset, the devices are taken in
  physical row-major order instead (PyTorch/XLA then splits physical axes;
  not done here).
"""
import itertools
import math

import numpy as np


def physical_mesh(device_attributes, devices):
    coords = [tuple(device_attributes[d]["coords"]) for d in devices]
    dims = tuple(max(c[i] for c in coords) + 1 for i in range(len(coords[0])))
    out = np.full(dims, -1, dtype=np.int64)
    for c, d in zip(coords, devices):
        out[c] = d
    if (out < 0).any() or out.size != len(devices):
        raise ValueError(f"Device coordinates {coords} do not tile a {dims} physical mesh")
    return out


def fold_onto_torus(physical, mesh_shape):
    free = list(physical.shape)
    assignment = [()] * len(mesh_shape)
    for axis in reversed(range(len(mesh_shape))):
        size = mesh_shape[axis]
        found = None
        for count in range(len(free), 0, -1):
            for combo in itertools.combinations(range(len(free)), count):
                if math.prod(free[i] for i in combo) == size:
                    found = combo
                    break
            if found:
                break
        if found is None:
            if size > 1:
                return physical.reshape(-1).reshape(mesh_shape)
            continue
        assignment[axis] = found
        for i in found:
            free[i] = 0  # taken: no later product can use it
    order = [i for axes in assignment for i in axes]
    order += [i for i in range(physical.ndim) if i not in order]  # size-1 leftovers
    return physical.transpose(order).reshape(mesh_shape)
