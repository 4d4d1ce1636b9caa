"""Execution modes: eager mode and torch_xla.compile regions.

Lazy mode (the default) records every op and runs nothing until a sync.
Eager mode (torch_xla.experimental.eager_mode(True), or
XLA_USE_EAGER_DEBUG_MODE=1) cuts and queues each op's own graph as soon as
the op is recorded, as PyTorch/XLA's eager mode does; each distinct op
shape compiles once and then hits the cache. A torch_xla.compile region (and
a dynamo trace) suspends eager mode, so its body is traced and compiled as
one graph.

Two hooks connect this module to the engine's Python side, both None (one
global read) when nothing here is active:
- torchtpu.lowering.op_observer(func, result): called after each top-level
  op; eager mode syncs the result, a region with max_different_graphs
  records the op's signature.
- torchtpu.bridge.on_download(handle): called before a value is read to the
  host; a full_graph region refuses a read that would run pending work, and
  the dynamo bridge counts reads to find FX nodes that cannot be traced.
"""
import os
import traceback

from torchtpu import _C, bridge, xla_shapes
import torchtpu.lowering as _lowering


def _env_flag(name):
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


_eager = _env_flag("XLA_USE_EAGER_DEBUG_MODE")
_eager_debug = _eager      # debug mode also waits for each op
_suspended = 0             # >0 inside compile regions and dynamo traces
_regions = []              # active compile regions, innermost last
_download_listeners = []   # callables(handle) run before host reads


# ------------------------------------------------------------ eager mode
def set_eager(enable):
    global _eager
    _eager = bool(enable)
    _update_hooks()


def is_eager():
    return _eager


class suspend_eager:
    """Context: ops are traced lazily (inside compile regions and dynamo
    traces), whatever the eager setting."""

    def __enter__(self):
        global _suspended
        _suspended += 1
        _update_hooks()
        return self

    def __exit__(self, *exc):
        global _suspended
        _suspended -= 1
        _update_hooks()
        return False


def _xla_handles(out, acc):
    if isinstance(out, bridge.XlaTensor):
        acc.append(out._h)
    elif isinstance(out, (list, tuple)):
        for o in out:
            _xla_handles(o, acc)
    return acc


def _eager_run(out):
    """Runs an op's pending results now. The engine samples the compile and
    the execution under EagerOpCompileTime/EagerOpExecuteTime (its eager
    setting, _update_hooks), as PyTorch/XLA does, not CompileTime/ExecuteTime."""
    handles = [h for h in _xla_handles(out, []) if h.pending]
    if handles:
        # As PyTorch/XLA's device lock: an op's graph is queued once the
        # device has finished the previous op's (its tracing still overlaps
        # that execution), so the eager metrics count every earlier op.
        for d in {h.device for h in handles}:
            _C.wait(d)
        _C.sync_tensors(handles, _eager_debug)


def _eager_empty(out):
    # A top-level empty (not one made inside another op's lowering).
    if _lowering._depth[0] == 0:
        _eager_run(bridge.inner_of(out))


def _observe(func, out, updated=()):
    if _suspended:
        for r in _regions:
            if r.session is not None:
                r.session.add(_op_signature(func, out))
        return
    if _eager:
        # The op's updates of its arguments (batch norm's running
        # statistics) run with its results, in the same graph.
        _eager_run((out, updated) if updated else out)


def _update_hooks():
    # PyTorch/XLA prints no PT_XLA_DEBUG analysis for eager ops' graphs.
    _C.debug_set_eager(bool(_eager and not _suspended))
    _C.set_eager_mode(bool(_eager and not _suspended))
    recording = any(r.session is not None for r in _regions)
    want = (_eager and not _suspended) or (recording and _suspended)
    _lowering.op_observer = _observe if want else None
    bridge.on_empty = _eager_empty if (_eager and not _suspended) else None
    need_dl = bool(_download_listeners) or any(r.full_graph for r in _regions)
    bridge.on_download = _on_download if need_dl else None


# ------------------------------------------------------- host reads
# PyTorch/XLA's error when a graph would run where execution is not allowed
# (torch_xla.compile(full_graph=True), _XLAC._set_allow_execution(False)).
UNEXPECTED_EXECUTION = "Unexpected execution happens inside the compiled function, exiting"


def add_download_listener(fn):
    _download_listeners.append(fn)
    _update_hooks()


def remove_download_listener(fn):
    _download_listeners.remove(fn)
    _update_hooks()


def user_frame():
    """The innermost stack frame outside torch, torchtpu and torch_xla:
    (filename, lineno, function, source line)."""
    skip = ("/torch/", "/torchtpu/", "/torch_xla/", "/contextlib.py", "/functools.py")
    for fs in reversed(traceback.extract_stack()):
        f = fs.filename.replace(os.sep, "/")
        if not any(s in f for s in skip):
            return fs.filename, fs.lineno, fs.name, (fs.line or "").strip()
    return "<unknown>", 0, "<unknown>", ""


def _on_download(handle):
    for fn in list(_download_listeners):
        fn(handle)
    if handle.pending:
        for r in _regions:
            if r.full_graph:
                fname, line, func, src = user_frame()
                raise RuntimeError(
                    f"{UNEXPECTED_EXECUTION}\n"
                    f"torch_xla.compile(full_graph=True, name={r.name!r}): `{src}` at "
                    f"{fname}:{line} (in {func}) needs a value computed inside the compiled "
                    "region, which would run the graph before the region ends. Move the value "
                    "read (.item(), print, .cpu(), .tolist()) after the region, or use "
                    "full_graph=False.")


# -------------------------------------------------- compile regions
class GraphCountError(RuntimeError):
    pass


class _Session:
    """Distinct op sequences seen by one compiled function; more than
    max_graphs of them is an error naming the first op that differs (what
    PyTorch/XLA's dynamic shape detector reports)."""

    def __init__(self, max_graphs):
        self.max_graphs = max_graphs
        self.graphs = []

    def begin(self):
        self.seq = []
        self.cands = list(range(len(self.graphs)))
        self.diverged = False

    def _allow_new(self):
        return len(self.graphs) < self.max_graphs

    def _error(self, lines):
        head = f"Maximum number of different graphs allowed per function exceeded: {self.max_graphs}"
        # Newline-terminated, as PyTorch/XLA's detector message is.
        return GraphCountError("\n".join([head] + lines) + "\n")

    def _expected(self, pos):
        nexts = []
        for g in self.cands:
            seq = self.graphs[g]
            v = seq[pos] if len(seq) > pos else "the end of the function"
            if v not in nexts:
                nexts.append(v)
        if len(nexts) == 1:
            return [f"Expected: {nexts[0]}"]
        return ["Expected either of:"] + [f"  - {v}" for v in nexts]

    def add(self, sig):
        pos = len(self.seq)
        self.seq.append(sig)
        if self.diverged:
            return
        keep = [g for g in self.cands if len(self.graphs[g]) > pos and self.graphs[g][pos] == sig]
        if keep:
            self.cands = keep
            return
        if not self._allow_new():
            err = self._error([f"Got: {sig}"] + self._expected(pos))
            self.cands = []
            self.diverged = True
            raise err
        self.diverged = True

    def end(self):
        if not self.seq:
            return
        n = len(self.seq)
        if not self.diverged and any(len(self.graphs[g]) == n for g in self.cands):
            return  # a graph seen before
        if not self.diverged and not self._allow_new():
            raise self._error([f"Reached the end of the function at: {self.seq[-1]}"] +
                              self._expected(n))
        if self.diverged and not self._allow_new():
            return  # already reported while tracing
        self.graphs.append(tuple(self.seq))


_sessions = {}


def _op_signature(func, out):
    """The op as PyTorch/XLA's detector names it (its IR node's text):
    '[] aten::add, xla_shape=f32[10]{0}, dynamic_dims: ()', with
    ', num_outputs=N' and a tuple shape for several outputs."""
    hs = _xla_handles(out, [])
    shapes = [xla_shapes.shape_text(bridge.TT_TO_TORCH[h.dtype], h.shape) for h in hs]
    schema = getattr(func, "_schema", None)
    name = schema.name if schema is not None else str(func)
    if len(hs) > 1:
        name += f", num_outputs={len(hs)}"
    return f"[] {name}, xla_shape={xla_shapes.tuple_text(shapes) if shapes else '()'}, dynamic_dims: ()"


class Region:
    """One entry into a torch_xla.compile region."""

    def __init__(self, name, full_graph, session):
        self.name = name
        self.full_graph = full_graph
        self.session = session


def debug_enabled():
    """PT_XLA_DEBUG / PT_XLA_DEBUG_LEVEL set: print compile analyses."""
    return _env_flag("PT_XLA_DEBUG") or os.environ.get("PT_XLA_DEBUG_LEVEL", "0") not in ("", "0")


def enter_region(name, full_graph, session_key, max_graphs):
    """Starts tracing a torch_xla.compile region lazily (the caller has
    synced pending work). Returns the region for exit_region."""
    session = None
    if max_graphs is not None:
        session = _sessions.get(session_key)
        if session is None or session.max_graphs != max_graphs:
            session = _sessions[session_key] = _Session(max_graphs)
        session.begin()
    region = Region(name, bool(full_graph), session)
    _regions.append(region)
    suspend_eager().__enter__()
    return region


def exit_region(region, ok=True):
    """Ends the region's tracing; with ok, checks its graph count (raising
    GraphCountError naming what differed). The caller then syncs."""
    try:
        if region.session is not None and ok:
            region.session.end()
    finally:
        _regions.remove(region)
        suspend_eager().__exit__(None, None, None)


def active_region():
    return _regions[-1] if _regions else None


def forget_session(key):
    _sessions.pop(key, None)


_update_hooks()
