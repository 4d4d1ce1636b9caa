"""_XLAC's calls on a tensor's device buffer."""
from torchtpu import bridge, _C


def _unsafe_buffer_pointer(input):
    """The address of input's device data (an int), once that data is ready.

    As in PyTorch/XLA, a tensor must hold data: one whose value is still
    pending IR raises RuntimeError ("... with IR that's not DeviceData");
    torch_xla.sync() gives it data. The address stays valid while the
    tensor keeps that value."""
    return _C.buffer_address(bridge.handle_of(input))
