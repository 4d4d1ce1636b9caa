"""Debugging switches of the engine, from Python.

The C debug service (src/services/debug.c) reads PyTorch/XLA's variables
once, at start-up:

  PT_XLA_DEBUG_LEVEL=1|2, PT_XLA_DEBUG, PT_XLA_DEBUG_FILE,
  PT_XLA_DEBUG_MAX_FRAME   compilation / execution analysis blocks
  XLA_SAVE_TENSORS_FILE, XLA_SAVE_TENSORS_FMT=text|dot   graph log
  XLA_IR_DEBUG=1           Python frames on IR nodes (location=... in dumps)
  TORCHTPU_DUMP_DIR=dir    one file per compile stage (IR after build, after
                           each pass, generated C)

This module changes them at run time (configure), names graphs
(graph_name), overrides the cause printed for a region (cause), returns the
last recompilation explanation (last_recompile), and records Chrome/Perfetto
traces (start_trace / stop_trace). docs/debugging.md has the formats.
"""
import contextlib
import json
import os
import sysconfig

import torch

from torchtpu import _C

_FORMATS = {"text": 0, "dot": 1}


def install():
    """Tells the engine which Python frames are library code. Called once by
    torchtpu.config.ensure_runtime before the runtime starts.

    Analysis blocks hide torchtpu's own frames (PyTorch/XLA's equivalent code
    is C++, so its frames never show); IR node locations also hide PyTorch's
    dispatch machinery so that location= points at the model's code."""
    torchtpu_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    import torch_xla
    torch_xla_dir = os.path.dirname(os.path.abspath(torch_xla.__file__)) + os.sep
    stdlib = sysconfig.get_paths()["stdlib"] + os.sep
    skip_ir = [torchtpu_dir, torch_dir + "_", torch_dir + "utils" + os.sep + "_",
               torch_dir + "autograd" + os.sep, torch_dir + "overrides.py",
               torch_dir + "functional.py", stdlib]
    library = [torchtpu_dir, torch_dir, torch_xla_dir, stdlib, "<frozen "]
    _C.debug_set_frame_filters([torchtpu_dir], skip_ir, library)


def config():
    """The current debug configuration as a dict (level, max_frames,
    local_rank, ir_debug, save_tensors_fmt, debug_file, save_tensors_file,
    dump_dir)."""
    return _C.debug_config()


def configure(**changes):
    """Changes debug settings for the rest of the process, e.g.
    configure(level=2, debug_file='/tmp/debug.txt'). Unnamed settings keep
    their values; None turns a file/dir setting off."""
    cfg = _C.debug_config()
    unknown = set(changes) - set(cfg)
    if unknown:
        raise TypeError(f"unknown debug setting(s) {sorted(unknown)}; known: {sorted(cfg)}")
    cfg.update(changes)
    fmt = cfg["save_tensors_fmt"]
    if fmt not in _FORMATS:
        raise ValueError(f"save_tensors_fmt must be 'text' or 'dot', got {fmt!r} "
                         "(this engine has no HLO)")
    _C.debug_configure(int(cfg["level"]), int(cfg["max_frames"]), int(cfg["local_rank"]),
                       bool(cfg["ir_debug"]), _FORMATS[fmt], cfg["debug_file"],
                       cfg["save_tensors_file"], cfg["dump_dir"])


def configure_from_env():
    """Re-reads the environment variables (after os.environ changes)."""
    _C.debug_configure_from_env()


@contextlib.contextmanager
def settings(**changes):
    """configure(**changes) for the body of a with statement only."""
    before = _C.debug_config()
    configure(**changes)
    try:
        yield
    finally:
        configure(**before)


@contextlib.contextmanager
def graph_name(name):
    """Names the graphs this thread cuts inside the body ("Graph Name:" in
    the analysis; recompilations are then tracked per name rather than per
    call site). torch_xla.compile(name=...) uses the same mechanism."""
    before = _C.graph_name()
    _C.set_graph_name(name)
    try:
        yield
    finally:
        _C.set_graph_name(before)


@contextlib.contextmanager
def cause(text):
    """Prints text as the compilation/execution cause of the graphs this
    thread cuts inside the body, instead of the cause derived from the
    Python frames (e.g. 'dynamo is executing a compiled program')."""
    _C.debug_set_cause(text)
    try:
        yield
    finally:
        _C.debug_set_cause(None)


def last_recompile():
    """The explanation printed for the most recent recompilation (which
    input's shape or dtype, or which attribute differs from the graph
    compiled before at the same call site), or None. Needs
    PT_XLA_DEBUG_LEVEL >= 1 (the explanation is made with the analysis)."""
    return _C.debug_last_recompile()


def dump(graph_hash, stage, text, ext="txt"):
    """Writes one stage dump to TORCHTPU_DUMP_DIR (no-op when unset)."""
    _C.debug_dump(int(graph_hash), stage, ext, text)


# ------------------------------------------------------------------ traces
def start_trace():
    """Starts recording spans (compile, execute, transfers, and Trace /
    StepTrace regions) in the engine. RuntimeError if already recording."""
    _name_this_thread()
    _C.trace_start()


def stop_trace(path=None):
    """Stops recording. With path, writes the Chrome trace JSON there
    (atomically) and returns path; without, returns the trace as a dict."""
    _C.trace_stop()
    if path is None:
        return json.loads(_C.trace_json())
    _C.trace_write(os.fspath(path))
    return path


def trace_active():
    return _C.trace_active()


def chrome_trace():
    """The spans recorded by the current or last session, as a dict in
    Chrome trace format ({'traceEvents': [...]})."""
    return json.loads(_C.trace_json())


def write_chrome_trace(path):
    """Writes the current or last session's spans to path (atomic)."""
    _C.trace_write(os.fspath(path))
    return path


def _name_this_thread():
    import threading
    t = threading.current_thread()
    _C.trace_set_thread_name("python " + t.name)
