"""The dynamo bridge: torch.compile(backend="openxla") on the torchtpu engine.

PyTorch's built-in "openxla" backend (aot_autograd around "openxla_eval")
imports torch_xla.core.dynamo_bridge and calls
extract_compiled_graph(fx_module, args) once per FX graph, then calls the
result with each call's real inputs. The result here is a CompiledGraph:

- First call for an input signature (dtypes, shapes, device, non-tensor
  values): the FX graph runs once on the real xla tensors through the lazy
  engine (the trace), node by node, noting nodes that cannot be traced
  (they fell back to the CPU, read a value to the host, or consume or
  produce non-xla tensors). If every node traced, the engine captures the
  graph (_C.capture: PARAMs over the inputs' buffers become input slots,
  RNG keys become seed slots), compiles it through the shared cache and
  runs it: the trace's outputs are the first call's results.
- Later calls: _C.replay runs the compiled executable on the new inputs'
  buffers and hands back pending output buffers; no op is dispatched in
  Python. Inputs the graph mutated in place are written back.
- A new signature traces again (a new shape; a new value of an int
  argument such as a dynamic size).
- A graph with untraceable nodes is partitioned: maximal traceable
  subgraphs become CompiledGraphs of their own, the rest runs through the
  lazy engine (with its counted CPU fallbacks). PT_XLA_DEBUG=1 or
  XLA_DYNAMO_DEBUG=1 lists the nodes left out.

Counters: DynamoExtractCompiledGraph, DynamoGraphTrace, DynamoGraphReplay,
DynamoPartitionedGraph, DynamoSyncInputExecuteTime (calls whose inputs had
pending work that was synced first). Metric: DynamoTraceTime (each trace,
capture and compile, including the first call's execution being queued).
"""
import itertools
import operator
import os
import sys
import time

import torch
from torch.utils import _pytree as pytree

from torchtpu import _C, bridge, debugging, modes
from torchtpu.lowering.fallback import fallback_names as _fallback_names
from torchtpu.lowering import misc_ops as _rng


def _flag(name):
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


def dynamo_debug():
    return _flag("XLA_DYNAMO_DEBUG")


def _report_fallbacks():
    return dynamo_debug() or modes.debug_enabled()


def _is_xla(x):
    return isinstance(x, torch.Tensor) and x.device.type == "xla"


def _fallback_total():
    return sum((_C.counter_value(n) or 0) for n in _fallback_names())


def _signature(args):
    sig = []
    for a in args:
        if isinstance(a, torch.Tensor):
            sig.append(("T", tuple(a.shape), a.dtype, a.device.type, a.device.index))
        else:
            try:
                hash(a)
                sig.append(("V", type(a), a))
            except TypeError:
                sig.append(("R", type(a), repr(a)))
    return tuple(sig)


class _ReadCounter:
    """Counts host reads (bridge.download) while a trace runs."""

    def __init__(self):
        self.count = 0

    def __call__(self, handle):
        self.count += 1


class _TraceInterpreter(torch.fx.Interpreter):
    """Runs an FX graph once on real xla tensors (lazily) and records the
    nodes that could not become part of one compiled graph."""

    def __init__(self, gm, reads):
        super().__init__(gm)
        self.reads = reads
        self.unsupported = []  # (node, reason)
        self._bad = set()

    def run_node(self, n):
        if n.op not in ("call_function", "call_method", "call_module"):
            return super().run_node(n)
        fb0, rd0 = _fallback_total(), self.reads.count
        result = super().run_node(n)
        reason = None
        if _fallback_total() != fb0:
            reason = "falls back to the CPU"
        elif self.reads.count != rd0:
            reason = "reads a value to the host"
        elif n.target is operator.getitem and any(
                isinstance(a, torch.fx.Node) and a in self._bad for a in n.args):
            reason = "indexes an untraced result"
        else:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            leaves = pytree.tree_leaves((args, kwargs, result))
            if any(isinstance(x, torch.Tensor) and not _is_xla(x) for x in leaves):
                reason = "uses tensors that are not on an xla device"
        if reason:
            self._bad.add(n)
            self.unsupported.append((n, reason))
        return result


def _write_back(arg, value_handle):
    """Makes arg (a user tensor the graph mutated) hold the new value,
    through functionalization so views of it see the change."""
    with torch.no_grad():
        arg.copy_(bridge.wrap_user(value_handle))


class _Captured:
    """One compiled graph for one input signature, replayed per call."""

    __slots__ = ("cap", "xla_idx", "const_args", "template", "out_spec", "mutated",
                 "device", "num_seeds")

    def __init__(self, cap, xla_idx, const_args, template, out_spec, mutated, device):
        self.cap = cap
        self.xla_idx = xla_idx
        self.const_args = const_args
        self.template = template
        self.out_spec = out_spec
        self.mutated = mutated
        self.device = device
        self.num_seeds = cap.num_seeds

    def replay(self, args):
        """The graph's outputs for args, or None if args do not fit."""
        for i, v in self.const_args:
            a = args[i]
            if type(a) is not type(v) or a != v:
                return None
        try:
            hs = [bridge.handle_of(args[i]) for i in self.xla_idx]
        except (RuntimeError, IndexError):
            return None
        seeds = [_rng._next_key(self.device) for _ in range(self.num_seeds)]
        outs = _C.replay(self.cap, hs, seeds)
        if outs is None:
            return None
        _C.counter_add("DynamoGraphReplay", 1)
        for ai, k in self.mutated:
            _write_back(args[ai], outs[k])
        flat = []
        made = {}
        for kind, v in self.template:
            if kind == 0:
                t = made.get(v)
                if t is None:
                    t = made[v] = bridge.wrap_user(outs[v])
                flat.append(t)
            elif kind == 1:
                flat.append(args[v])
            else:
                flat.append(v)
        return pytree.tree_unflatten(flat, self.out_spec)


_graph_ids = itertools.count()


class CompiledGraph:
    """What extract_compiled_graph returns: call it with the FX graph's
    inputs; it traces once per input signature and replays after that."""

    def __init__(self, gm, name=None):
        self.gm = gm
        self.name = name or f"dynamo_graph_{next(_graph_ids)}"
        self.captures = {}
        self.last = None
        self.partitioned = None
        self.unsupported = []

    def __call__(self, *args):
        if self.partitioned is not None:
            return self.partitioned(*args)
        c = self.last
        if c is not None:
            out = c.replay(args)
            if out is not None:
                return out
        key = _signature(args)
        c = self.captures.get(key)
        if c is not None:
            out = c.replay(args)
            if out is not None:
                self.last = c
                return out
        return self._trace(args, key)

    # ------------------------------------------------------------ trace
    def _trace(self, args, key):
        t0 = time.perf_counter_ns()
        try:
            return self._trace_inner(args, key)
        finally:
            _C.metric_add("DynamoTraceTime", 0, float(time.perf_counter_ns() - t0))

    def _trace_inner(self, args, key):
        _C.counter_add("DynamoGraphTrace", 1)
        reads = _ReadCounter()
        with modes.suspend_eager():
            xla_idx = [i for i, a in enumerate(args) if _is_xla(a)]
            handles = [bridge.handle_of(args[i]) for i in xla_idx]
            pending = [h for h in handles if h.pending]
            if pending:
                _C.counter_add("DynamoSyncInputExecuteTime", 1)
                with debugging.cause("torch_xla.sync when dynamo processing input graphs"):
                    _C.sync_tensors(pending)
            # Trace on fresh, non-view tensors over the arguments' values:
            # functionalization computes an op on a view from the view's
            # base, which is not an input of this graph, so tracing on the
            # real arguments could bake a base's current value into the
            # graph as a constant.
            targs = list(args)
            fresh = {}
            for j, i in enumerate(xla_idx):
                t = fresh.get(id(args[i]))
                if t is None:
                    t = fresh[id(args[i])] = bridge.wrap_user(handles[j])
                targs[i] = t
            modes.add_download_listener(reads)
            try:
                interp = _TraceInterpreter(self.gm, reads)
                out = interp.run(*targs)
            finally:
                modes.remove_download_listener(reads)
            mutated = []
            for j, i in enumerate(xla_idx):
                h = bridge.handle_of(targs[i])
                if h is not handles[j]:
                    mutated.append((i, h))
            if interp.unsupported:
                self._partition(interp.unsupported)
            else:
                self._capture(args, targs, key, xla_idx, handles, out, mutated)
            # The trace is this call: its in-place updates reach the arguments.
            for i, h in mutated:
                _write_back(args[i], h)
        return self._untrace(out, args, targs)

    @staticmethod
    def _untrace(out, args, targs):
        """The trace's outputs with the traced stand-ins of arguments
        replaced by the arguments themselves."""
        if not any(a is not t for a, t in zip(args, targs)):
            return out
        back = {id(t): a for a, t in zip(args, targs) if a is not t}
        return pytree.tree_map_only(torch.Tensor, lambda v: back.get(id(v), v), out)

    def _capture(self, args, targs, key, xla_idx, handles, out, mutated):
        flat, spec = pytree.tree_flatten(out)
        by_id = {id(a): i for i, a in enumerate(targs) if isinstance(a, torch.Tensor)}
        cap_outs, template, slot = [], [], {}

        def slot_of(h):
            k = slot.get(id(h))
            if k is None:
                k = slot[id(h)] = len(cap_outs)
                cap_outs.append(h)
            return k

        for v in flat:
            if isinstance(v, torch.Tensor):
                if id(v) in by_id:
                    template.append((1, by_id[id(v)]))
                elif _is_xla(v):
                    template.append((0, slot_of(bridge.handle_of(v))))
                else:
                    # A CPU tensor made inside the graph: nothing to replay it from.
                    self._partition([(None, f"returns a tensor on {v.device}")])
                    return
            else:
                template.append((2, v))
        mut = []
        for i, h in mutated:
            j = xla_idx.index(i)
            if tuple(h.shape) != tuple(handles[j].shape) or h.dtype != handles[j].dtype:
                self._partition([(None, f"changes the shape or dtype of input {i}")])
                return
            mut.append((i, slot_of(h)))
        const_args = [(i, a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor)]
        # PyTorch/XLA's PT_XLA_DEBUG causes for the graph's compilation and
        # its first run (the capture does both).
        with debugging.cause("dynamo is compiling a FX graph to HLO\n"
                             "dynamo is executing a compiled program"):
            cap = _C.capture(handles, cap_outs)
        device = handles[0].device if handles else (cap_outs[0].device if cap_outs else 0)
        c = _Captured(cap, xla_idx, const_args, template, spec, mut, device)
        self.captures[key] = c
        self.last = c
        if dynamo_debug():
            srcs = cap.graph_inputs()
            consts = sum(1 for s, _ in srcs if s == 1)
            print(f"[dynamo_bridge] {self.name}: traced and compiled\n{self.gm.code}\n"
                  f"Number of graph inputs: {cap.num_graph_inputs} ({cap.num_graph_inputs - consts - cap.num_seeds} "
                  f"from {cap.num_inputs} arguments, {consts} constants, {cap.num_seeds} RNG keys)\n"
                  f"Number of graph outputs: {cap.num_graph_outputs} computed of {cap.num_outputs}\n"
                  f"Inputs updated in place: {[i for i, _ in mut]}\nGraph hash: {cap.hash:016x}\n"
                  f"IR:\n{cap.graph_text()}", file=sys.stderr)

    # -------------------------------------------------------- partition
    def _partition(self, unsupported):
        """Splits the graph: traceable pieces compile, the rest runs lazily."""
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
        from torch.fx.passes.operator_support import OperatorSupport

        _C.counter_add("DynamoPartitionedGraph", 1)
        self.unsupported = unsupported
        self.captures.clear()
        self.last = None
        bad = {n for n, _ in unsupported if n is not None}

        class _Support(OperatorSupport):
            def is_node_supported(self, submodules, node):
                return node.op in ("call_function", "call_method", "call_module") and \
                    node not in bad

        if not bad:
            # Nothing to split off (the problem is at the graph's boundary):
            # run the whole graph lazily.
            self.partitioned = self.gm
            parts = 0
        else:
            partitioner = CapabilityBasedPartitioner(self.gm, _Support(),
                                                     allows_single_node_partition=True)
            fused = partitioner.fuse_partitions(partitioner.propose_partitions())
            parts = 0
            for node in list(fused.graph.nodes):
                if node.op != "call_module" or not str(node.target).startswith("fused_"):
                    continue
                sub = CompiledGraph(getattr(fused, node.target), f"{self.name}.{node.target}")
                run = _partition_runner(sub, str(node.target))
                with fused.graph.inserting_after(node):
                    new = fused.graph.call_function(run, node.args, node.kwargs)
                node.replace_all_uses_with(new)
                fused.graph.erase_node(node)
                fused.delete_submodule(node.target)
                parts += 1
            fused.recompile()
            self.partitioned = fused
        if _report_fallbacks():
            listed = "; ".join(
                f"{n.name} ({n.target if n.op != 'call_module' else n.target}): {why}"
                if n is not None else why for n, why in unsupported)
            print(f"[dynamo_bridge] {self.name}: {len(bad)} node(s) run outside compiled "
                  f"graphs, {parts} compiled partition(s). Dynamo fallback ops are: {listed}. "
                  "Please open an issue asking for their lowering.", file=sys.stderr)


def _partition_runner(compiled, name):
    def run(*args):
        return compiled(*args)
    run.__name__ = f"compiled_{name}"
    run.compiled_graph = compiled
    return run


def _register_collective_kernels(gm):
    """The xla kernels of torch.distributed's functional collectives are
    registered by importing their module, which imports torch.distributed
    (too heavy for start-up). A graph holding one (a compiled xm.all_reduce)
    needs them before it first runs."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and getattr(n.target, "namespace", None) == "_c10d_functional":
            import torch_xla.distributed.c10d_xla_kernels  # noqa: F401
            return


def extract_compiled_graph(gm, args):
    """Entry point of PyTorch's openxla backends: the compiled callable for
    FX graph gm, whose first call is expected with args."""
    _C.counter_add("DynamoExtractCompiledGraph", 1)
    _register_collective_kernels(gm)
    if dynamo_debug():
        print(f"[dynamo_bridge] extract_compiled_graph: {len(args)} argument(s)",
              file=sys.stderr)
    return CompiledGraph(gm)


def torchtpu_backend(gm, example_inputs):
    """backend="torchtpu": the same as backend="openxla" (aot_autograd
    forward and backward, each through extract_compiled_graph)."""
    from torch._dynamo.backends.torchxla import openxla
    return openxla(gm, example_inputs)
