"""XLA_USE_BF16 / XLA_DOWNCAST_BF16: PyTorch/XLA's deprecated switches that
store float32 (and, for DOWNCAST, float64) tensors as bfloat16 on the
device while PyTorch still sees the wider dtype.

This engine keeps a tensor's dtype on the device, so the switches cannot
be honoured; setting either prints PyTorch/XLA's deprecation line and then
raises RuntimeError with the replacement (autocast, or converting the
model), rather than running silently in float32. Checked on import of
torch_xla."""
import os

_TRUE = ("1", "true", "yes", "on")


def _set(name):
    return os.environ.get(name, "").strip().lower() in _TRUE


def check():
    for name, advice in (("XLA_USE_BF16", "convert your model to bf16 directly"),
                         ("XLA_DOWNCAST_BF16", "downcast your model directly")):
        if _set(name):
            print(f"{name} will be deprecated after the 2.6 release, please {advice}")
            raise RuntimeError(
                f"{name}=1 is not supported by this engine (xla tensors keep their dtype on "
                "the device): use torch.autocast('xla', dtype=torch.bfloat16) or "
                "model.to(torch.bfloat16), and unset the variable")
