"""torch_xla.experimental.custom_kernel: PyTorch/XLA's custom kernels.

Most of PyTorch/XLA's module is Pallas kernels (flash/paged/ragged
attention, grouped matmul) compiled for TPU by JAX; those need a TPU and
JAX and are not provided here. The static-shape helpers that are plain
tensor code are.
"""
import torch


def repeat_with_fixed_output_size(input: torch.Tensor, repeats: torch.Tensor,
                                  total_repeat_length: int):
  """torch.repeat_interleave(input, repeats) with a static output length:
  cut to total_repeat_length, or padded with input's last element when the
  repeats add up to less. 1-d input and repeats only (AssertionError
  otherwise, as in PyTorch/XLA). No data-dependent shape, so no graph
  break: output position j takes the element whose cumulative repeat
  range contains j."""
  assert input.dim() == 1
  assert repeats.dim() == 1
  ends = torch.cumsum(repeats, dim=0)  # element i covers [ends[i-1], ends[i])
  positions = torch.arange(total_repeat_length, device=input.device, dtype=ends.dtype)
  index = (ends.unsqueeze(0) <= positions.unsqueeze(1)).sum(dim=1)
  index = torch.clamp(index, max=input.size(0) - 1)  # past the end: the last element
  return input[index]
