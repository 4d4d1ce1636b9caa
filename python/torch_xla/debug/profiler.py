"""torch_xla.debug.profiler (xp): host-side trace annotations and trace
capture, recorded by the engine's trace service (src/services/trace.c).

One timeline holds the engine's own spans (BuildGraph, Compile,
SyncTensorsGraph on the host thread; Execute on the device worker threads
"xla:N"; TransferToDevice / TransferFromDevice) and the regions annotated
with Trace / StepTrace / trace_me. The capture is written as Chrome trace
JSON, which Perfetto (ui.perfetto.dev), chrome://tracing and TensorBoard's
profile plugin open.

Differences from PyTorch/XLA (docs/debugging.md): the output is Chrome
trace JSON instead of an XPlane protobuf; start_server does not open a gRPC
server, and trace() captures only servers started in the same process (the
usual `trace_detached('localhost:9012', ...)` pattern works).
"""
import datetime
import functools
import gzip
import json
import os
import socket
import threading
import time
from typing import Union

import torch_xla
from torchtpu import _C

_TRACER_MARKED_STEP: bool = False
_thread_state = threading.local()


def set_tracer_marked_step(value: bool):
    global _TRACER_MARKED_STEP
    _TRACER_MARKED_STEP = value


def get_tracer_marked_step() -> bool:
    return _TRACER_MARKED_STEP


def _name_thread():
    if not getattr(_thread_state, "named", False):
        _C.trace_set_thread_name("python " + threading.current_thread().name)
        _thread_state.named = True


def _args_json(kwargs):
    if not kwargs:
        return None
    return json.dumps({k: v for k, v in kwargs.items() if not k.startswith("_")}, default=str)


# ------------------------------------------------------------ scopes
# Trace regions are also named scopes, as in PyTorch/XLA: each entry is
# numbered per name ('conv1.1', 'conv1.2', ...), and torch_xla.sync()
# inside an open Trace raises RuntimeError, because a graph cut there would
# split the scope (StepTrace closes its scope before its own sync).
_scope_counts = {}
_scope_lock = threading.Lock()


def _scopes():
    stack = getattr(_thread_state, "scopes", None)
    if stack is None:
        stack = _thread_state.scopes = []
    return stack


def _push_scope(name):
    with _scope_lock:
        n = _scope_counts.get(name, 0) + 1
        _scope_counts[name] = n
    _scopes().append(f"{name}.{n}")


def _pop_scope():
    stack = _scopes()
    if stack:
        stack.pop()


def check_scope_empty():
    """Raises RuntimeError when this thread is inside a Trace (called at
    the end of torch_xla.sync())."""
    stack = _scopes()
    if stack:
        raise RuntimeError(f"Expecting scope to be empty but it is {'/'.join(stack)}")


# ------------------------------------------------------------ annotations
class Trace(object):
    """Context manager that produces a trace event for profiling.

    Example usage:
    ```python
    with xp.Trace('fwd_context'):
      model(input)
      torch_xla.sync()
    ```
    Keyword arguments become the span's args in the trace.
    """

    _category = "user"

    def __init__(self, name: str, **kwargs):
        self.name = name
        self.kwargs = kwargs

    def __enter__(self):
        if _C.trace_active():
            _name_thread()
        _C.trace_begin(self.name, self._category, _args_json(self.kwargs))
        _push_scope(self.name)
        self._scoped = True
        return self

    def __exit__(self, type, value, traceback):
        if getattr(self, "_scoped", False):
            _pop_scope()
            self._scoped = False
        _C.trace_end()
        return False


class StepTrace(Trace):
    """Context manager that produces a step trace event for profiling, and
    cuts the graph (torch_xla.sync()) when the step's region ends.

    Example usage:
    ```python
    for step, (input, label) in enumerate(loader):
      with xp.StepTrace('train_step', step_num=step):
        model(input)
        ...
    ```
    """

    _category = "step"

    def __init__(self, name: str, **kwargs):
        super().__init__(name, **kwargs)

    def __enter__(self):
        set_tracer_marked_step(True)
        return super().__enter__()

    def __exit__(self, type, value, traceback):
        if getattr(self, "_scoped", False):
            _pop_scope()  # the step's own sync must not see its scope
            self._scoped = False
        try:
            torch_xla.sync()
        finally:
            super().__exit__(type, value, traceback)
        return False


def trace_me(scope: str):
    """Decorator: runs the function inside Trace(scope)."""

    def decorator_trace_me(func):

        @functools.wraps(func)
        def wrapper_trace_me(*args, **kwargs):
            with Trace(scope):
                return func(*args, **kwargs)

        return wrapper_trace_me

    return decorator_trace_me


# ---------------------------------------------------------------- capture
def _write_capture(log_dir):
    """Writes the recorded spans into log_dir in TensorBoard's profile
    layout: <log_dir>/plugins/profile/<run>/<host>.trace.json.gz. Returns
    the file's path."""
    run = datetime.datetime.now().strftime("%Y_%m_%d_%H_%M_%S")
    run_dir = os.path.join(os.fspath(log_dir), "plugins", "profile", run)
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, f"{socket.gethostname()}.trace.json.gz")
    data = _C.trace_json().encode()
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(data)
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, path)
    return path


class _ProfileState:

    def __init__(self):
        self.log_dir = None
        self.lock = threading.Lock()


_profile_state = _ProfileState()


def start_trace(log_dir: Union[os.PathLike, str]) -> None:
    """Starts a profiler trace: compile, execute, transfer spans from the
    engine and Trace/StepTrace regions. Use stop_trace() to end it and save
    it under log_dir. Only one trace may be collected at a time; a
    RuntimeError is raised if start_trace() is called while another trace
    is running."""
    with _profile_state.lock:
        if _profile_state.log_dir is not None or _C.trace_active():
            raise RuntimeError("Profile has already been started. "
                               "Only one profile may be run at a time.")
        _name_thread()
        _C.trace_start()
        _profile_state.log_dir = os.fspath(log_dir)


def stop_trace() -> str:
    """Stops the running trace and writes it to the log_dir given to
    start_trace(). Returns the path of the written file (PyTorch/XLA returns
    None). Raises a RuntimeError if no trace was started."""
    with _profile_state.lock:
        if _profile_state.log_dir is None:
            raise RuntimeError("No profile started")
        log_dir = _profile_state.log_dir
        _profile_state.log_dir = None
        _C.trace_stop()
        return _write_capture(log_dir)


# ------------------------------------------------------- profiler servers
_servers = {}
_servers_lock = threading.Lock()


class ProfilerServer(object):
    """What start_server returns: marks this process as traceable on port
    by trace() calls made in this process. Stops when closed or collected."""

    def __init__(self, port: int):
        self.port = port

    def close(self):
        with _servers_lock:
            if _servers.get(self.port) is self:
                del _servers[self.port]

    def __del__(self):
        self.close()


def start_server(port: int, only_on_master: bool = True) -> object:
    """Starts a profiler "server" for this process on port.

    torchtpu has no gRPC profiler service: the returned ProfilerServer lets
    trace() / trace_detached() calls made from this same process capture it
    (TensorBoard's remote capture is not available). RuntimeError if the port
    is invalid or already used by another server of this process."""
    import torch_xla.core.xla_model as xm
    if only_on_master and not xm.is_master_ordinal():
        return None
    if not isinstance(port, int) or not 0 < port < 65536:
        raise RuntimeError(f"invalid profiler server port {port!r}")
    with _servers_lock:
        if port in _servers:
            raise RuntimeError(f"a profiler server is already running on port {port}")
        server = ProfilerServer(port)
        _servers[port] = server
    return server


def _local_port(addr):
    host, _, port = addr.strip().rpartition(":")
    local = {"localhost", "127.0.0.1", "::1", "[::1]", "", socket.gethostname()}
    try:
        return int(port) if host in local else None
    except ValueError:
        return None


def trace(service_addr: str,
          logdir: str,
          duration_ms: int = 1000,
          num_tracing_attempts: int = 3,
          host_tracer_level: int = 2,
          device_tracer_level: int = 1,
          delay_ms: int = 0,
          timeout_s: int = 120,
          interval_s: int = 5):
    """Captures a trace of this process for duration_ms and writes it under
    logdir (TensorBoard layout). service_addr must name a server started with
    start_server() in this process (e.g. "localhost:9012"); remote capture is
    not supported. Blocks until done; returns the written file's path."""
    ports = [_local_port(a) for a in service_addr.split(",") if a.strip()]
    with _servers_lock:
        missing = [a for a, p in zip(service_addr.split(","), ports) if p not in _servers]
    if not ports or missing:
        raise RuntimeError(
            f"No profiler server of this process at {', '.join(missing) or service_addr!r}: "
            "torchtpu captures traces in-process only (call xp.start_server(port) in the "
            "traced process and xp.trace / xp.trace_detached from a thread there)")
    if delay_ms:
        time.sleep(delay_ms / 1000.0)
    start_trace(logdir)
    try:
        time.sleep(duration_ms / 1000.0)
    finally:
        path = stop_trace()
    return path


def trace_detached(*args, **kwargs):
    """Runs trace() in a background thread (see trace for the arguments)."""
    thread = threading.Thread(target=trace, args=args, kwargs=kwargs, daemon=True)
    thread.start()
    return thread
