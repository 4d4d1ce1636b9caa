"""Switches of the dynamo bridge, as PyTorch/XLA names them.

skip_input_data_check: PyTorch/XLA skips checking that a compiled graph's
inputs are device data (not pending values) when set. This bridge syncs
pending inputs before replaying a graph either way, so the switch is kept
for programs that set it and changes nothing."""
skip_input_data_check = False
