"""torch_xla._internal: the runtime probes PyTorch/XLA keeps out of its
public API but that clients import anyway (lightning reads
torch_xla._internal.tpu; launchers use torch_xla._internal.pjrt)."""
