"""Device lowerings of the two ops torch.amp.GradScaler runs every step,
so loss scaling never leaves the device (without them both take the
counted CPU fallback, which reads the gradients to the host each step).

Both are written with aten ops on the engine's tensors (they come back
through dispatch, as decompositions do) and follow PyTorch's CUDA kernels:

  _amp_foreach_non_finite_check_and_unscale(grads, found_inf, inv_scale)
      every gradient times inv_scale; found_inf becomes 1.0 if any
      gradient holds an inf or NaN, else keeps its value.
  _amp_update_scale(scale, growth_tracker, found_inf, growth, backoff, interval)
      found_inf: scale *= backoff, tracker = 0; else tracker + 1, and when
      that reaches interval the scale grows (if still finite), tracker = 0.
"""
import torch

from torchtpu.lowering.core import lowers

aten = torch.ops.aten


@lowers(aten._amp_foreach_non_finite_check_and_unscale.default)
def _non_finite_check_and_unscale(grads, found_inf, inv_scale):
    if not grads:
        return [], aten.clone.default(found_inf)
    bad = [aten.logical_not.default(aten.all.default(aten.isfinite.default(g))) for g in grads]
    any_bad = aten.any.default(aten.stack.default(bad))
    one = aten.ones_like.default(found_inf)
    found = aten.where.self(any_bad, one, found_inf)
    scaled = [aten._to_copy.default(aten.mul.Tensor(aten._to_copy.default(g, dtype=torch.float32),
                                                   inv_scale), dtype=g.dtype) for g in grads]
    return scaled, found


@lowers(aten._amp_update_scale.default)
def _update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                  growth_interval):
    found = aten.gt.Scalar(found_inf, 0)
    successful = aten.add.Tensor(growth_tracker, 1)
    grow = aten.logical_and.default(aten.logical_not.default(found),
                                    aten.eq.Scalar(successful, growth_interval))
    grown = aten.mul.Tensor(scale, growth_factor)
    grown = aten.where.self(aten.isfinite.default(grown), grown, scale)
    new_scale = aten.where.self(found, aten.mul.Tensor(scale, backoff_factor),
                                aten.where.self(grow, grown, scale))
    zero = aten.zeros_like.default(growth_tracker)
    new_tracker = aten.where.self(aten.logical_or.default(found, grow), zero, successful)
    return new_scale, new_tracker
