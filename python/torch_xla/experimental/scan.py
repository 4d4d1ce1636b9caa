"""torch_xla.experimental.scan: jax.lax.scan for PyTorch (PyTorch/XLA's
scan(), same signature and results).

scan(fn, init, xs) applies fn over the leading dimension of xs while
threading a carry:

    carry = init
    for i in range(len(xs)):
      carry, y_i = fn(carry, xs[i])
    return carry, stack(y_0, y_1, ...)

with init, xs and the ys being PyTrees (the leaves of xs sliced together,
the leaves of the ys stacked; None leaves stay None).

How this engine runs it: as PyTorch/XLA does, fn is traced once with
AOTAutograd (on empty xla tensors, so nothing runs) into a forward and a
backward graph, split by partition_fn (value_and_grad_partitioned);
is_fn_pure=True caches the pair per fn and step structure
(_SCAN_COMPUTATION_CACHE), so fn runs only while tracing. PyTorch/XLA then
emits one XLA While loop; this engine's IR has no loop, so the forward
graph is recorded once per iteration into the lazy graph (the graph grows
with the length), and an autograd.Function runs the backward graph once
per iteration in reverse. It saves the stacked activations and xs itself,
not copies of its slices. Values, gradients and random numbers are those
of the loop above. fn must be functional: an xla tensor it uses that is not
one of its arguments meets the trace's fake tensors and raises
AssertionError, as in PyTorch/XLA.
"""
from typing import Callable, Optional, Sequence, Tuple, TypeVar

import torch
from torch.utils._pytree import PyTree, tree_flatten, tree_iter, tree_map, tree_unflatten

try:
  from functorch.compile import default_partition  # noqa: F401  (PyTorch/XLA's default)
except ImportError:  # functorch ships with torch; keep scan importable regardless
  default_partition = None

Carry = TypeVar('Carry')
X = TypeVar('X')
Y = TypeVar('Y')

# fn -> {step structure key: (forward, alias_input, backward)}, filled for
# is_fn_pure calls (value_and_grad_partitioned).
_SCAN_COMPUTATION_CACHE = {}


def _remove_none(s: Sequence[Optional[torch.Tensor]]):
  """(the non-None items of s, a function putting the Nones back into a
  sequence of those items)."""
  mask = [v is None for v in s]
  kept = [v for v in s if v is not None]

  def add_back_nones(values):
    it = iter(values)
    return [None if is_none else next(it) for is_none in mask]

  return kept, add_back_nones


def tree_flatten_none(pytree: PyTree):
  """(the leaves of pytree without the None leaves, a function that
  rebuilds pytree, Nones included, from such a list)."""
  flat, spec = tree_flatten(pytree)
  kept, add_none = _remove_none(flat)

  def unflatten(values):
    return tree_unflatten(add_none(values), spec)

  return kept, unflatten


def _leading_length(xs) -> int:
  length = None
  for leaf in tree_iter(xs):
    n = len(leaf)
    if length is None:
      length = n
    elif n != length:
      raise ValueError(
          'The leaves of the `xs` input PyTree must have the same leading dimension '
          f'size. Got {length} and {n}')
  if length is None:
    raise ValueError(f'`xs` {xs} is an empty PyTree.')
  return length


def _graph_catcher():
  """(an AOTAutograd compiler that keeps the graph it is given, a getter)."""
  from functorch.compile import make_boxed_func
  kept = []

  def compiler(gm, example_inputs):
    kept.append(gm)
    return make_boxed_func(gm)

  return compiler, lambda: kept[-1]


def _second_level_key(partition_fn, carry, x):
  """What a traced fn's graphs depend on besides fn: the partitioner and the
  structure, shapes and dtypes of one step's carry and x."""
  carry_flat, carry_spec = tree_flatten(carry)
  x_flat, x_spec = tree_flatten(x)
  return (id(partition_fn), tuple((tuple(v.shape), v.dtype) for v in carry_flat),
          tuple((tuple(v.shape), v.dtype, v.requires_grad) for v in x_flat), carry_spec,
          x_spec)


def value_and_grad_partitioned(fn, init, xs, partition_fn=default_partition,
                               is_fn_pure: bool = True):
  """Traces one step of fn (carry, x) -> (new_carry, y) with AOTAutograd and
  returns (forward, alias_input, backward):

    forward(carry, x) -> (new_carry, (y, partial_activations))
    alias_input(partial_activations, x) -> activations
    backward(grad_new_carry, (grad_y, activations)) -> (grad_carry, grad_x)

  activations are the tensors the backward graph needs (a flat tuple);
  partial_activations leave out those that are leaves of x itself, which
  alias_input puts back (so scan keeps xs instead of a stacked copy).
  partition_fn splits the joint graph (default_partition keeps activations,
  min_cut_rematerialization_partition recomputes cheap ones). With
  is_fn_pure the three functions are cached per fn and step structure in
  _SCAN_COMPUTATION_CACHE, so fn is traced once. The graphs are traced on
  empty xla tensors (nothing is computed); the carry's floating leaves are
  traced as requiring grad, so gradients flow from one step to the next."""
  from functorch.compile import aot_function

  def blank(v, requires_grad=True):
    # Integer leaves (a counter in the carry) cannot require grad.
    differentiable = v.is_floating_point() or v.is_complex()
    return torch.empty_like(v, requires_grad=requires_grad and differentiable)

  carry_t = tree_map(blank, init)
  x_t = tree_map(lambda v: blank(v[0], v.requires_grad), xs)
  key = _second_level_key(partition_fn, carry_t, x_t)
  if is_fn_pure and key in _SCAN_COMPUTATION_CACHE.get(fn, {}):
    return _SCAN_COMPUTATION_CACHE[fn][key]

  # AOTAutograd returns an output that is an input outside its graphs;
  # a copy keeps every output inside them.
  def fn_copying_inputs(carry, x):
    inputs = {id(v) for v in tree_iter((carry, x))}
    return tree_map(lambda v: v.clone() if id(v) in inputs else v, fn(carry, x))

  fw_compiler, fw_graph = _graph_catcher()
  bw_compiler, bw_graph = _graph_catcher()
  with torch.enable_grad():
    traced = aot_function(fn_copying_inputs, fw_compiler=fw_compiler,
                          bw_compiler=bw_compiler, partition_fn=partition_fn)
    out = traced(carry_t, x_t)
    # The forward graph returns every leaf of fn's output (None ones too),
    # then the activations.
    out_flat, out_spec = tree_flatten(out)
    diff = [v for v in out_flat if v is not None and v.requires_grad]
    if diff:  # else nothing is differentiable (integer loops): no backward graph
      torch.autograd.backward(diff, [torch.ones_like(v) for v in diff])
  fwd, bwd = fw_graph(), (bw_graph() if diff else None)
  # The functions below keep no traced tensor alive (a cached one would be
  # computed at every sync): only structure and which outputs take a tangent.
  num_out = len(out_flat)
  takes_tangent = [v is not None and v.requires_grad for v in out_flat]
  carry_leaves = len(tree_flatten(carry_t)[0])
  x_leaves, x_spec = len(tree_flatten(x_t)[0]), tree_flatten(x_t)[1]
  carry_spec = tree_flatten(carry_t)[1]
  del out, out_flat, diff, carry_t, x_t, traced

  # Activations that are placeholders of x: alias_input takes them from x.
  placeholders = [n for n in fwd.graph.nodes if n.op == 'placeholder']
  x_index = {placeholders[carry_leaves + j]: j for j in range(x_leaves)}
  out_node = next(n for n in fwd.graph.nodes if n.op == 'output')
  act_nodes = list(out_node.args[0])[num_out:]
  aliased = {i: x_index[nd] for i, nd in enumerate(act_nodes) if nd in x_index}

  def forward(carry, x):
    res = fwd(*tree_flatten(carry)[0], *tree_flatten(x)[0])
    new_carry, y = tree_unflatten(list(res[:num_out]), out_spec)
    acts = [a for i, a in enumerate(res[num_out:]) if i not in aliased]
    return new_carry, (y, acts)

  def alias_input(partial_activations, x):
    x_flat = tree_flatten(x)[0]
    it = iter(partial_activations)
    return tuple(x_flat[aliased[i]] if i in aliased else next(it)
                 for i in range(len(act_nodes)))

  def backward(grad_carry, grad_y_and_activations):
    grad_y, activations = grad_y_and_activations
    if bwd is None:
      return (tree_unflatten([None] * carry_leaves, carry_spec),
              tree_unflatten([None] * x_leaves, x_spec))
    tangents = [g for g, t in zip(tree_flatten((grad_carry, grad_y))[0], takes_tangent) if t]
    grads = list(bwd(*activations, *tangents))
    grad_in = grads[:carry_leaves + x_leaves]
    return (tree_unflatten(grad_in[:carry_leaves], carry_spec),
            tree_unflatten(grad_in[carry_leaves:], x_spec))

  result = (forward, alias_input, backward)
  if is_fn_pure:
    _SCAN_COMPUTATION_CACHE.setdefault(fn, {})[key] = result
  return result


def _stack(leaves_per_step):
  """[step][leaf] -> [leaf] stacked along a new leading dim (None stays)."""
  return [None if col[0] is None else torch.stack(list(col), dim=0)
          for col in zip(*leaves_per_step)]


class _Scan(torch.autograd.Function):
  """The unrolled loop of forward() steps; backward runs backward() steps
  in reverse. Saves the stacked partial activations and xs itself (not
  copies of its slices). plan.out receives the outputs' structure."""

  @staticmethod
  def forward(ctx, plan, *flat):
    carry = tree_unflatten(list(flat[:plan.n_carry]), plan.carry_spec)
    xs_flat = list(flat[plan.n_carry:])
    ys, acts = [], []
    for i in range(plan.length):
      carry, (y, a) = plan.forward(carry, tree_unflatten([v[i] for v in xs_flat],
                                                         plan.xs_spec))
      y_flat, plan.y_unflatten = tree_flatten_none(y)
      ys.append(y_flat)
      acts.append(a)
    acts_stacked = _stack(acts) if acts[0] else []
    carry_flat, plan.carry_out_spec = tree_flatten(carry)
    ctx.plan, ctx.n_acts, ctx.n_carry_out = plan, len(acts_stacked), len(carry_flat)
    ctx.save_for_backward(*acts_stacked, *xs_flat)
    return (*carry_flat, *_stack(ys))

  @staticmethod
  def backward(ctx, *grads):
    plan = ctx.plan
    saved = ctx.saved_tensors
    acts_stacked, xs_flat = saved[:ctx.n_acts], saved[ctx.n_acts:]
    grad_carry = tree_unflatten(list(grads[:ctx.n_carry_out]), plan.carry_out_spec)
    grad_ys = grads[ctx.n_carry_out:]
    grad_xs = [None] * plan.length
    for i in reversed(range(plan.length)):
      x_i = tree_unflatten([v[i] for v in xs_flat], plan.xs_spec)
      acts = plan.alias_input([a[i] for a in acts_stacked], x_i)
      grad_y = plan.y_unflatten([g[i] for g in grad_ys])
      grad_carry, grad_x = plan.backward(grad_carry, (grad_y, acts))
      grad_xs[i] = tree_flatten(grad_x)[0]
    return (None, *tree_flatten(grad_carry)[0], *_stack(grad_xs))


class _Plan:
  """What _Scan.apply needs besides tensors (autograd.Function arguments
  other than tensors pass through untouched)."""

  def __init__(self, forward, alias_input, backward, carry_spec, n_carry, xs_spec, length):
    self.forward, self.alias_input, self.backward = forward, alias_input, backward
    self.carry_spec, self.n_carry, self.xs_spec, self.length = (carry_spec, n_carry, xs_spec,
                                                                length)
    self.y_unflatten = self.carry_out_spec = None


def scan(fn: Callable[[Carry, X], Tuple[Carry, Y]],
         init: Carry,
         xs: X,
         partition_fn=default_partition,
         is_fn_pure: bool = False) -> Tuple[Carry, Y]:
  """(final carry, stacked ys) of fn scanned over xs' leading dimension;
  see the module docstring. Raises ValueError when fn is not callable, xs
  has no leaves or its leaves differ in length."""
  if not callable(fn):
    raise ValueError(f'`fn` {fn} must be callable.')
  length = _leading_length(xs)
  if length == 0:
    return init, None
  forward, alias_input, backward = value_and_grad_partitioned(
      fn, init, xs, partition_fn=partition_fn, is_fn_pure=is_fn_pure)
  carry_flat, carry_spec = tree_flatten(init)
  xs_flat, xs_spec = tree_flatten(xs)
  plan = _Plan(forward, alias_input, backward, carry_spec, len(carry_flat), xs_spec, length)
  out = _Scan.apply(plan, *carry_flat, *xs_flat)
  n = plan.carry_out_spec.num_leaves
  return (tree_unflatten(list(out[:n]), plan.carry_out_spec), plan.y_unflatten(list(out[n:])))
