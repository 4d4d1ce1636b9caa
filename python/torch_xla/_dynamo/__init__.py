"""torch_xla._dynamo: where PyTorch/XLA keeps its dynamo bridge (the
`openxla` torch.compile backend's entry points; torch_xla.core.dynamo_bridge
is the same module under its older path), its switches (`config`) and the
torchax-based `dynamo_backend2`."""
import torch_xla._dynamo.config as config  # noqa: F401
