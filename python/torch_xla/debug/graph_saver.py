"""torch_xla.debug.graph_saver: writes the pending graph of some tensors to
a file, as PyTorch/XLA's save_tensors_graph does.

SAVE_GRAPH_FMT picks the format: 'text' (the engine's IR listing, default),
'dot' (Graphviz) or 'hlo' (here StableHLO text: the engine lowers to
StableHLO, not to HLO protos). Files are named
<name>-<thread id>-<n>.<fmt>, n counting calls per thread and name.
"""
import collections
import os
import threading

_SAVE_GRAPH_LOCK = threading.Lock()
_SAVE_GRAPH_IDS = collections.defaultdict(dict)


def _graph_text(tensors, fmt):
  from torchtpu import _C, bridge
  if fmt == 'text':
    return _C.graph_dump([bridge.handle_of(t) for t in tensors], 0)
  if fmt == 'dot':
    return _C.graph_dump([bridge.handle_of(t) for t in tensors], 1)
  if fmt == 'hlo':
    import torch_xla.core.xla_model as xm
    return xm.get_stablehlo(list(tensors))
  raise RuntimeError('Invalid save graph format: {}'.format(fmt))


def save_tensors_graph(save_dir, name, tensors):
  """Writes the graph computing tensors into save_dir; returns nothing."""
  fmt = os.environ.get('SAVE_GRAPH_FMT', 'text')
  graph = _graph_text(tensors, fmt)
  tid = threading.current_thread().ident
  with _SAVE_GRAPH_LOCK:
    per_thread = _SAVE_GRAPH_IDS[tid]
    n = per_thread.get(name, 0)
    per_thread[name] = n + 1
  with open(os.path.join(save_dir, '{}-{}-{}.{}'.format(name, tid, n, fmt)), 'w') as fd:
    fd.write(graph)
