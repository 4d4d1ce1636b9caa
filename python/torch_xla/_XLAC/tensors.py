"""_XLAC's calls that change which value an xla tensor object holds."""
import torch


def _replace_xla_tensor(self, source):
    """PyTorch/XLA's set_ on xla tensors: self takes source's value (and its
    shape and dtype) and drops its own, which is freed once nothing else
    holds it (DestroyXlaTensor). Returns self. Both must be xla tensors."""
    for name, t in (("self", self), ("source", source)):
        if not isinstance(t, torch.Tensor) or t.device.type != "xla":
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise RuntimeError(f"_replace_xla_tensor: {name} must be an xla tensor, got {where}")
    # Below autograd, as PyTorch/XLA calls its set_ kernel directly.
    with torch.no_grad():
        self.set_(source)
    return self
