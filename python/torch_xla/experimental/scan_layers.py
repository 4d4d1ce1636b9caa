"""torch_xla.experimental.scan_layers: run a stack of identically
structured layers with scan (PyTorch/XLA's scan_layers()).

scan_layers(layers, x) equals nn.Sequential(*layers)(x): each layer's
parameters and buffers are stacked and scanned over with one functional
call of the first layer's structure, so a structural mismatch between
layers raises ValueError as in PyTorch/XLA. Gradients reach every layer's
own parameters (the stacking is differentiable).
"""
from typing import Iterable, Mapping, Sequence

import torch
import torch.nn as nn

from torch_xla.experimental.scan import default_partition, scan


def _extract_weights_and_buffers(module: nn.Module):
  return dict(module.named_parameters()), dict(module.named_buffers())


def _ensure_same_structure(dicts: Sequence[Mapping[str, torch.Tensor]]):
  first = dicts[0]
  for d in dicts[1:]:
    if set(d.keys()) != set(first.keys()):
      raise ValueError(
          f'Layers have different parameter or buffer names: {sorted(first)} vs. {sorted(d)}')
    for k in first:
      if d[k].shape != first[k].shape or d[k].dtype != first[k].dtype:
        raise ValueError(
            f'Layers have different shapes or dtypes for {k!r}: '
            f'{tuple(first[k].shape)} {first[k].dtype} vs. {tuple(d[k].shape)} {d[k].dtype}')


def scan_layers(layers: Iterable[torch.nn.Module],
                input_data,
                partition_fn=default_partition,
                is_layer_pure=False):
  """The output of the layers applied in order to input_data (see the
  module docstring). An empty layers returns input_data unchanged."""
  layers = list(layers)
  if not layers:
    return input_data
  params, buffers = zip(*(_extract_weights_and_buffers(layer) for layer in layers))
  _ensure_same_structure(params)
  _ensure_same_structure(buffers)
  stacked = {}
  for group in (params, buffers):
    for k in group[0]:
      stacked[k] = torch.stack([g[k] for g in group], dim=0)
  template = layers[0]

  def one_layer(carry, weights):
    return torch.func.functional_call(template, weights, (carry,), strict=True), None

  final, _ = scan(one_layer, input_data, stacked, partition_fn=partition_fn,
                  is_fn_pure=is_layer_pure)
  return final
