"""PyTorch functions `import torch_xla` replaces, as PyTorch/XLA does.

Contract: `_apply_patches()` (called once by torch_xla/__init__.py) puts
`clip_grad_norm_` in `torch.nn.utils` with the original's signature; the original stays reachable as `._orig`.

What differs from the original only for xla parameters:
- no parameter has a gradient: the total norm is a float32 zero on the
  parameters' xla device (PyTorch's own returns `torch.tensor(0.0)` on the
  CPU, which would make a training step read back and upload a value);
- `foreach=True` raises RuntimeError (there is no foreach norm kernel on
  xla; PyTorch/XLA refuses it the same way).
Everything else, and every call without an xla parameter, is PyTorch's own
function, so the values are PyTorch's.
"""
import functools
import inspect

import torch


def _xla_device_of(parameters):
    for p in parameters:
        if isinstance(p, torch.Tensor) and p.device.type == "xla":
            return p.device
    return None


def _patched_clip_grad_norm_(orig):
    @functools.wraps(orig)
    def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                        foreach=None):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        else:
            parameters = list(parameters)  # a generator is read once
        device = _xla_device_of(parameters)
        if device is None:
            return orig(parameters, max_norm, norm_type, error_if_nonfinite, foreach)
        if foreach:
            raise RuntimeError("foreach=True is not supported with XLA")
        if all(p.grad is None for p in parameters):
            return torch.zeros((), dtype=torch.float32, device=device)
        return orig(parameters, max_norm, norm_type, error_if_nonfinite, foreach)

    def params(fn, **kw):
        return [(p.name, p.default) for p in inspect.signature(fn, **kw).parameters.values()]
    if params(clip_grad_norm_, follow_wrapped=False) != params(orig):
        raise RuntimeError(f"Unable to patch {orig}: its signature changed")
    clip_grad_norm_._orig = orig
    return clip_grad_norm_


def _apply_patches():
    nn_utils = torch.nn.utils
    if getattr(nn_utils.clip_grad_norm_, "_orig", None) is not None:
        return  # already patched (a reload of torch_xla)
    patched = _patched_clip_grad_norm_(nn_utils.clip_grad_norm_)
    nn_utils.clip_grad_norm_ = patched
