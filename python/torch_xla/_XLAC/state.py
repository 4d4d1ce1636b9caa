"""_XLAC's process-wide switches: matmul precision, buffer donation,
execution allowed, eager mode, IR debug, graph name.

Buffer donation: the per-tensor flag and the alias-with-donor
configuration live in the engine. As in PyTorch/XLA, a sync that donates
(a step's sync, or any sync with the alias-with-donor config on) counts the
marked inputs among the graph's aliases (InputOutputAliasCount) and deletes
their data: the tensors holding it become placeholders (_is_placecholder),
and the execution may reuse the buffer (it does whenever it holds an input
buffer's only reference, src/backends/cpu/backend.c; docs/xlac.md)."""
from torchtpu import _C, bridge, modes

_PRECISIONS = ("default", "high", "highest")
_state = {"mat_mul_precision": "highest", "alias_with_donor": False, "allow_execution": True,
          "ir_debug": False}


def _xla_set_mat_mul_precision(precision):
    """'default' | 'high' | 'highest'. The engine multiplies f32 in f32
    whatever the setting (it is what 'highest' asks for on TPU)."""
    if precision not in _PRECISIONS:
        raise RuntimeError(f"Unknown precision: {precision}")
    _state["mat_mul_precision"] = precision


def _xla_get_mat_mul_precision():
    return _state["mat_mul_precision"]


def _set_buffer_donation(tensor, should_donate):
    """Records should_donate for tensor's value; True when the tensor holds
    device data (PyTorch/XLA's result: False for a pending graph value
    that is not device data)."""
    if not _C.set_donation(bridge.handle_of(tensor), bool(should_donate)):
        return False
    _C.counter_add("XlaSetBufferDonation", 1)
    return True


def _get_buffer_donation(tensor):
    return _C.get_donation(bridge.handle_of(tensor))


def _is_placecholder(tensor):
    """True when tensor's data was donated to a computation and deleted
    (PyTorch/XLA's spelling of the name); reading the tensor then raises
    RuntimeError."""
    return bridge.handle_of(tensor).placeholder


def _xla_set_enable_alias_with_buffer_donor_config(enable_user_config_alias=False, device=""):
    _state["alias_with_donor"] = bool(enable_user_config_alias)
    _C.set_alias_with_donor(_state["alias_with_donor"])


def _xla_get_enable_alias_with_buffer_donor_config(device=""):
    return _state["alias_with_donor"]


def _refuse_execution(handle):
    if handle.pending and not _state["allow_execution"]:
        # PyTorch/XLA's wording first: programs and its tests match it.
        raise RuntimeError(f"{modes.UNEXPECTED_EXECUTION}\nA value computed by the pending "
                           "graph was read while execution is disabled "
                           "(torch_xla._XLAC._set_allow_execution(False))")


def _set_allow_execution(allow_execution):
    """False: reading a value that needs the pending graph to run raises
    RuntimeError (as torch_xla.compile(full_graph=True) regions do)."""
    allow = bool(allow_execution)
    if allow == _state["allow_execution"]:
        return
    _state["allow_execution"] = allow
    if allow:
        modes.remove_download_listener(_refuse_execution)
    else:
        modes.add_download_listener(_refuse_execution)


def _get_allow_execution():
    return _state["allow_execution"]


def _set_use_eager_mode(use_eager_mode):
    modes.set_eager(bool(use_eager_mode))


def _get_use_eager_mode():
    return modes.is_eager()


def _set_ir_debug(ir_debug):
    from torchtpu import debugging
    debugging.configure(ir_debug=bool(ir_debug))
    _state["ir_debug"] = bool(ir_debug)


def _get_ir_debug():
    from torchtpu import debugging
    return bool(debugging.config().get("ir_debug", _state["ir_debug"]))


def _set_current_graph_name(name):
    _C.set_graph_name(name or None)


def _get_current_graph_name():
    return _C.graph_name() or ""
