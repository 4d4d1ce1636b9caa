"""torch_xla.distributed.fsdp.xla_fully_sharded_data_parallel: PyTorch/XLA's
XlaFullyShardedDataParallel (ZeRO-3 over the replicas of torch_xla.launch).

Contract:
- At construction the wrapped module's parameters (those not already owned
  by a nested FSDP instance) are split into shards: one per parameter, or
  with flatten_parameters=True one flat vector for the trainable and one
  for the frozen ones. Each shard is the flattened tensor padded to a
  multiple of world_size * _shard_size_multiple (or, with
  shard_param_on_dim_0, padded on dim 0 to a multiple of world_size), and
  this replica keeps slice `rank` of it as an fp32 nn.Parameter registered
  on the wrapper (name `_fsdp_shard` + the original path, dots replaced by
  _FSDP_SHARD_SEPARATOR_). Those shards are all model.parameters() yields,
  so an optimizer built afterwards holds 1/world_size of the state.
- The original parameter objects stay on the module as plain attributes
  (`full_params`, each with `_sharded_param` and `_has_full_param`) whose
  data is one element; they are not parameters any more.
- forward() all-gathers the shards (in compute_dtype) into fresh full
  tensors, sets them as the module's attributes, and runs the module. The
  gather is one autograd function per shard whose backward reduce-scatters
  the full gradient (mean over the replicas; fp32 when fp32_reduce_scatter)
  into the shard's .grad. With reshard_after_forward (not on the root while
  disable_reshard_on_root) the full tensors are dropped when forward
  returns: the tensors autograd saves that are a full parameter (or its 2D
  transpose) are saved as a reference and all-gathered again when backward
  needs them (once per shard per backward). Otherwise they are dropped when
  the backward pass ends (or at once under no_grad).
- Every replica must call forward/backward in the same order: the gathers
  and scatters are collectives matched by order (docs/collectives.md).
- Use optimizer.step(), not xm.optimizer_step(): the shard gradients are
  already reduced.
"""
import contextlib
from enum import Enum, auto
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla import runtime as xr
from torch_xla.distributed.fsdp.utils import apply_xla_patch_to_nn_linear
from torch_xla.distributed.fsdp.wrap import recursive_wrap

FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
_SEPARATOR = "_FSDP_SHARD_SEPARATOR_"


class TrainingState(Enum):
  """Where an FSDP instance is in a step."""
  IDLE = auto()
  FORWARD = auto()
  BACKWARD_PRE = auto()
  BACKWARD_POST = auto()


class _ParamSlot:
  """Where one original parameter lives in its shard group: the module
  attributes it fills (several for tied parameters), its record (the
  original parameter object), and its offset/shape in the group."""

  def __init__(self, record, places, offset, shape):
    self.record = record
    self.places = places  # [(module, attribute name)]
    self.offset = offset
    self.shape = shape
    self.numel = 1
    for d in shape:
      self.numel *= d


class _ShardGroup:
  """One sharded tensor and the parameters it holds."""

  def __init__(self, shard, slots, dim0):
    self.shard = shard
    self.slots = slots
    self.dim0 = dim0  # sharded on dim 0 of one parameter (not flattened)
    self.unsynced_grad = None  # full gradient summed under no_sync()


class _Regather:
  """What the pack hook saves in place of a full parameter."""
  __slots__ = ('group', 'pos', 'transposed')

  def __init__(self, group, pos, transposed):
    self.group, self.pos, self.transposed = group, pos, transposed


class _GatherShard(torch.autograd.Function):
  """shard -> the full parameters of its group (all-gather); backward
  reduce-scatters their gradients into the shard's gradient."""

  @staticmethod
  def forward(ctx, owner, index, shard):
    ctx.owner, ctx.index = owner, index
    return tuple(owner._materialize(index, shard))

  @staticmethod
  def backward(ctx, *grads):
    return None, None, ctx.owner._reduce_scatter_grads(ctx.index, grads)


class XlaFullyShardedDataParallel(nn.Module):
  """Shards a module's parameters, gradients and optimizer state over the
  replicas (docs/fsdp.md). Arguments as PyTorch/XLA's; see the module
  docstring for what happens in forward and backward."""

  def __init__(self,
               module: nn.Module,
               reshard_after_forward: bool = True,
               flatten_parameters: bool = False,
               execute_sharding_on_init: bool = True,
               optimization_barrier_in_forward: bool = True,
               optimization_barrier_in_backward: bool = True,
               sync_on_finalization: bool = False,
               disable_reshard_on_root: bool = True,
               compute_dtype: Optional[torch.dtype] = None,
               buffer_dtype: Optional[torch.dtype] = None,
               fp32_reduce_scatter: bool = False,
               sharding_groups: Optional[List[List[int]]] = None,
               sharding_rank: Optional[int] = None,
               sharding_world_size: Optional[int] = None,
               shard_param_on_dim_0: bool = False,
               pin_layout_in_collective_ops: bool = True,
               reduce_scatter_bucket_size_mb: Optional[int] = 0,
               coalesce_all_gather_ops: bool = False,
               auto_wrap_policy: Optional[Callable] = None,
               auto_wrapper_callable: Optional[Callable] = None,
               param_init_fn: Optional[Callable[[nn.Module], None]] = None,
               _shard_size_multiple: int = 128,
               _use_xla_patched_linear: bool = True,
               _debug_dummy_forward_pass: bool = False,
               _debug_msg: str = "xla_fsdp",
               _debug_print: bool = False,
               _debug_dummy_all_gather_op: bool = False,
               _debug_dummy_all_reduce_op: bool = False,
               _debug_dummy_reduce_scatter_op: bool = False,
               _debug_dummy_optimization_barrier_op: bool = False,
               mark_step_on_finalization: Optional[bool] = None):
    if isinstance(module, XlaFullyShardedDataParallel):
      raise RuntimeError(
          "Cannot wrap a module that is already wrapped with FSDP. For nested FSDP, "
          "first wrap the inner child modules before wrapping the outer parent module.")
    forward_fn = getattr(type(module), 'forward', None)
    if forward_fn is None or forward_fn is nn.Module.forward:
      raise RuntimeError(
          "The module wrapped by FSDP *must define a `forward` method and call it "
          "during the module's forward pass for FSDP to work correctly.* Hence, do not "
          "wrap `nn.ModuleList` or `nn.ModuleDict` with FSDP.")
    if compute_dtype is not None and compute_dtype not in FLOAT_DTYPES:
      raise ValueError(f"compute_dtype must be one of {FLOAT_DTYPES}, not {compute_dtype}")
    if buffer_dtype is not None and buffer_dtype not in FLOAT_DTYPES:
      raise ValueError(f"buffer_dtype must be one of {FLOAT_DTYPES}, not {buffer_dtype}")
    if sharding_groups is not None and (sharding_rank is None or sharding_world_size is None):
      raise ValueError("sharding_rank and sharding_world_size must be provided when "
                       "sharding_groups is specified")
    if mark_step_on_finalization is not None:
      # The name PyTorch/XLA used before sync_on_finalization.
      sync_on_finalization = bool(mark_step_on_finalization)
    super().__init__()

    if auto_wrap_policy is not None:
      for name, sub in module.named_modules():
        if isinstance(sub, XlaFullyShardedDataParallel):
          raise ValueError(f"Expected {name} to NOT be FullyShardedDataParallel "
                           "if using an `auto_wrap_policy`")
      child_kwargs = dict(
          reshard_after_forward=reshard_after_forward,
          flatten_parameters=flatten_parameters,
          execute_sharding_on_init=execute_sharding_on_init,
          optimization_barrier_in_forward=optimization_barrier_in_forward,
          optimization_barrier_in_backward=optimization_barrier_in_backward,
          sync_on_finalization=sync_on_finalization,
          disable_reshard_on_root=disable_reshard_on_root,
          compute_dtype=compute_dtype,
          buffer_dtype=buffer_dtype,
          fp32_reduce_scatter=fp32_reduce_scatter,
          sharding_groups=sharding_groups,
          sharding_rank=sharding_rank,
          sharding_world_size=sharding_world_size,
          shard_param_on_dim_0=shard_param_on_dim_0,
          pin_layout_in_collective_ops=pin_layout_in_collective_ops,
          param_init_fn=param_init_fn,
          _shard_size_multiple=_shard_size_multiple,
          _use_xla_patched_linear=_use_xla_patched_linear)
      recursive_wrap(module, auto_wrap_policy, auto_wrapper_callable or XlaFullyShardedDataParallel,
                     ignored_modules=set(), ignored_params=set(), only_wrap_children=True,
                     **child_kwargs)

    self.reshard_after_forward = self._orig_reshard_after_forward = reshard_after_forward
    self.disable_reshard_on_root = disable_reshard_on_root
    self.flatten_parameters = flatten_parameters
    self.optimization_barrier_in_forward = optimization_barrier_in_forward
    self.optimization_barrier_in_backward = optimization_barrier_in_backward
    self.sync_on_finalization = sync_on_finalization
    self.compute_dtype = compute_dtype or torch.float32
    self.buffer_dtype = buffer_dtype or self.compute_dtype
    self.fp32_reduce_scatter = fp32_reduce_scatter
    self._shard_param_on_dim_0 = shard_param_on_dim_0 and not flatten_parameters
    self._shard_size_multiple = 1 if self._shard_param_on_dim_0 else _shard_size_multiple
    self._use_xla_patched_linear = _use_xla_patched_linear
    self.sharding_groups = sharding_groups
    if sharding_groups is None:
      self.rank, self.world_size = xr.global_ordinal(), xr.world_size()
    else:
      self.rank, self.world_size = sharding_rank, sharding_world_size
    self.pin_layout = pin_layout_in_collective_ops
    self.coalesce_all_gather_ops = coalesce_all_gather_ops
    self.reduce_scatter_bucket_size_mb = reduce_scatter_bucket_size_mb
    self.gradient_predivide_factor = self._get_gradient_predivide_factor(self.world_size)
    self.gradient_postdivide_factor = self.world_size / self.gradient_predivide_factor
    self._debug_msg = _debug_msg
    self._debug_print = _debug_print

    if param_init_fn is not None:
      param_init_fn(module)
    elif any(p.is_meta for p in module.parameters()):
      for sub in module.modules():
        if hasattr(sub, 'reset_parameters') and not isinstance(sub, XlaFullyShardedDataParallel):
          sub.to_empty(device='cpu', recurse=False)
          sub.reset_parameters()
    if self._use_xla_patched_linear:
      module = apply_xla_patch_to_nn_linear(module)

    self.xla_device = torch_xla.device()
    self._fsdp_wrapped_module = module
    self._shard_parameters_(module)
    self._cast_buffers(self.buffer_dtype)

    self._is_root: Optional[bool] = None
    self._root: Optional["XlaFullyShardedDataParallel"] = None
    self.training_state = TrainingState.IDLE
    self.has_full_params = False
    self._full_ids: Dict[int, tuple] = {}
    self._regathered: Dict[int, list] = {}
    self._final_callback_queued = False
    self._backward_prepared = False
    self._require_backward_grad_sync = True
    if execute_sharding_on_init:
      torch_xla.sync()

  # ------------------------------------------------------------ sharding
  @staticmethod
  def _get_gradient_predivide_factor(world_size: int) -> float:
    factor = 1
    while world_size % factor == 0 and world_size / factor > factor:
      factor *= 2
    return float(factor)

  def set_gradient_divide_factors(self, pre: float, post: float, recursive: bool) -> None:
    """Gradients are divided by pre before and by post after the sum over
    the replicas (the defaults multiply to world_size: a mean)."""
    if recursive:
      for m in self.modules():
        if isinstance(m, XlaFullyShardedDataParallel) and m is not self:
          m.set_gradient_divide_factors(pre, post, False)
    self.gradient_predivide_factor = pre
    self.gradient_postdivide_factor = post

  def _pad(self, tensor: torch.Tensor) -> torch.Tensor:
    """tensor flattened (or, with shard_param_on_dim_0, as is) and padded
    with zeros to a whole number of shards."""
    multiple = self.world_size * self._shard_size_multiple
    if self._shard_param_on_dim_0 and tensor.dim() > 0:
      extra = (-tensor.size(0)) % self.world_size
      return F.pad(tensor, [0, 0] * (tensor.dim() - 1) + [0, extra]) if extra else tensor
    tensor = tensor.reshape(-1)
    extra = (-tensor.numel()) % multiple
    return F.pad(tensor, [0, extra]) if extra else tensor

  def _local_shard(self, padded: torch.Tensor) -> torch.Tensor:
    size = padded.size(0) // self.world_size
    return padded[self.rank * size:(self.rank + 1) * size].clone()

  @torch.no_grad()
  def _shard_parameters_(self, module: nn.Module) -> None:
    # Parameters in visiting order, each once (tied ones keep every place).
    places: Dict[nn.Parameter, list] = {}
    order = []
    for mname, m in module.named_modules():
      for n, p in list(m._parameters.items()):
        if p is None or hasattr(p, '_is_sharded'):
          continue
        if p.dtype != torch.float32:
          raise TypeError("only fp32 parameters are supported")
        if p not in places:
          places[p] = []
          order.append((f"{mname}.{n}" if mname else n, p))
        places[p].append((m, n))
    prefix = "_fsdp_wrapped_module."
    specs = []  # (orig_name, [(name, param)])
    if self.flatten_parameters:
      trainable = [(n, p) for n, p in order if p.requires_grad]
      frozen = [(n, p) for n, p in order if not p.requires_grad]
      for members in (trainable, frozen):
        if members:
          specs.append((f"{prefix}flat_param_{len(specs)}", members))
    else:
      specs = [(prefix + n, [(n, p)]) for n, p in order]

    self.full_params = []
    self._groups: List[_ShardGroup] = []
    self._flat_metadata: List[tuple] = []
    for orig_name, members in specs:
      if self.flatten_parameters:
        full = torch.cat([p.detach().reshape(-1) for _, p in members])
      else:
        full = members[0][1].detach()
      shard_data = self._local_shard(self._pad(full))
      if shard_data.device != self.xla_device:
        shard_data = shard_data.to(self.xla_device)
      requires_grad = members[0][1].requires_grad
      shard = nn.Parameter(shard_data, requires_grad=requires_grad)
      shard._is_sharded = True
      shard._orig_size = full.size()
      shard._orig_name = orig_name
      shard._name = f"_fsdp_shard.{orig_name}".replace(".", _SEPARATOR)
      self.register_parameter(shard._name, shard)
      slots, offset = [], 0
      for _, p in members:
        slot = _ParamSlot(p, places[p], offset, tuple(p.shape))
        offset += slot.numel
        slots.append(slot)
      if self.flatten_parameters:
        self._flat_metadata.append(([n for n, _ in members], [tuple(p.shape) for _, p in members],
                                    [p.numel() for _, p in members]))
      self._groups.append(_ShardGroup(shard, slots, self._shard_param_on_dim_0))
      for slot in slots:
        p = slot.record
        # The original parameter becomes a record: its storage goes.
        p.data = p.new_zeros(1)
        p._sharded_param = shard
        p._has_full_param = False
        self.full_params.append(p)
        for m, n in slot.places:
          m._parameters.pop(n, None)
          object.__setattr__(m, n, p)

  @property
  def sharded_params(self) -> List[nn.Parameter]:
    return [g.shard for g in self._groups]

  @torch.no_grad()
  def _cast_buffers(self, dtype: Optional[torch.dtype] = None, memo=None) -> None:
    """Moves this instance's buffers (not a nested instance's) to the
    device, floating ones cast to dtype (original dtype kept in
    buf._orig_dtype for the checkpoint metadata)."""
    memo = set() if memo is None else memo
    for m in self._own_modules():
      if m in memo:
        continue
      memo.add(m)
      for name, buf in list(m._buffers.items()):
        if buf is None:
          continue
        new = buf
        if torch.is_floating_point(buf) and buf.dtype != (dtype or self.buffer_dtype):
          new = buf.to(dtype or self.buffer_dtype)
          new._orig_dtype = buf.dtype
        if new.device != self.xla_device:
          orig = getattr(new, '_orig_dtype', None)
          new = new.to(self.xla_device)
          if orig is not None:
            new._orig_dtype = orig
        m._buffers[name] = new

  def _own_modules(self):
    """The wrapped module's submodules, not descending into nested FSDP."""
    stack = [self._fsdp_wrapped_module]
    while stack:
      m = stack.pop()
      yield m
      for child in m.children():
        if not isinstance(child, XlaFullyShardedDataParallel):
          stack.append(child)

  # ------------------------------------------------------------ gather / scatter
  def _all_gather(self, shard: torch.Tensor) -> torch.Tensor:
    x = shard.to(self.compute_dtype) if shard.dtype != self.compute_dtype else shard
    if self.world_size == 1 and self.sharding_groups is None:
      return x
    return xm.all_gather(x, dim=0, groups=self.sharding_groups, pin_layout=self.pin_layout)

  def _materialize(self, index: int, shard: torch.Tensor) -> List[torch.Tensor]:
    """The full parameters of group index, each its own tensor (not a view
    of the gathered vector: autograd saves them by identity)."""
    group = self._groups[index]
    full = self._all_gather(shard)
    out = []
    for slot in group.slots:
      if group.dim0:
        t = full[:slot.shape[0]] if slot.shape else full[:1].reshape(())
      else:
        t = full.narrow(0, slot.offset, slot.numel).view(slot.shape)
      out.append(t.clone())
    return out

  def _reduce_scatter_grads(self, index: int, grads) -> torch.Tensor:
    group = self._groups[index]
    if self.optimization_barrier_in_backward:
      xm.optimization_barrier_([g for g in grads if g is not None])
    parts = []
    for slot, g in zip(group.slots, grads):
      if g is None:
        g = torch.zeros(slot.shape, dtype=self.compute_dtype, device=self.xla_device)
      parts.append(g if group.dim0 else g.reshape(-1))
    full = parts[0] if len(parts) == 1 else torch.cat(parts)
    if self.fp32_reduce_scatter and full.dtype != torch.float32:
      full = full.to(torch.float32)
    full = self._pad(full)
    if group.unsynced_grad is not None:
      full = full + group.unsynced_grad.to(full.dtype)
      group.unsynced_grad = None
    root = self._root or self
    root._queue_final_callback()
    if not self._require_backward_grad_sync:
      # Under no_sync(): keep the full gradient for the next synced pass.
      group.unsynced_grad = full.detach()
      self._release_group(index)
      self._regathered.pop(index, None)
      return None
    scale = 1.0 / (self.gradient_predivide_factor * self.gradient_postdivide_factor)
    if self.world_size == 1 and self.sharding_groups is None:
      reduced = full * scale
    else:
      reduced = xm.reduce_scatter(xm.REDUCE_SUM, full, scale=scale, scatter_dim=0,
                                  shard_count=self.world_size, groups=self.sharding_groups,
                                  pin_layout=self.pin_layout)
    self._release_group(index)
    self._regathered.pop(index, None)
    return reduced.to(group.shard.dtype)

  # ------------------------------------------------------------ full parameters
  def _gather_full_params(self) -> None:
    grad = torch.is_grad_enabled()
    for index, group in enumerate(self._groups):
      if grad and group.shard.requires_grad:
        fulls = _GatherShard.apply(self, index, group.shard)
      else:
        with torch.no_grad():
          fulls = self._materialize(index, group.shard)
      for pos, (slot, t) in enumerate(zip(group.slots, fulls)):
        for m, n in slot.places:
          object.__setattr__(m, n, t)
        slot.record._has_full_param = True
        self._full_ids[id(t)] = (index, pos, t)
    self.has_full_params = True

  def _release_group(self, index: int) -> None:
    for slot in self._groups[index].slots:
      for m, n in slot.places:
        object.__setattr__(m, n, slot.record)
      slot.record._has_full_param = False
    for key in [k for k, v in self._full_ids.items() if v[0] == index]:
      del self._full_ids[key]
    self.has_full_params = any(s.record._has_full_param for g in self._groups for s in g.slots)

  def _release_full_params(self) -> None:
    for index in range(len(self._groups)):
      self._release_group(index)
    self._full_ids.clear()
    self.has_full_params = False

  def _pack(self, t: torch.Tensor):
    entry = self._full_ids.get(id(t))
    if entry is not None and entry[2] is t:
      return _Regather(entry[0], entry[1], False)
    base = getattr(t, '_base', None)
    if base is not None:
      entry = self._full_ids.get(id(base))
      if entry is not None and entry[2] is base and t.grad_fn is not None:
        kind = type(t.grad_fn).__name__
        if kind in ('TBackward0', 'TransposeBackward0') and base.dim() == 2:
          return _Regather(entry[0], entry[1], True)
    return t

  def _unpack(self, packed):
    if not isinstance(packed, _Regather):
      return packed
    fulls = self._regathered.get(packed.group)
    if fulls is None:
      with torch.no_grad():
        fulls = self._materialize(packed.group, self._groups[packed.group].shard)
      self._regathered[packed.group] = fulls
    t = fulls[packed.pos]
    return t.t() if packed.transposed else t

  # ------------------------------------------------------------ root / finalization
  def _lazy_init(self) -> None:
    if self._is_root is not None:
      return
    self._is_root = True
    # object.__setattr__: a module attribute would register the root as a
    # submodule of itself.
    object.__setattr__(self, '_root', self)
    for m in self.modules():
      if isinstance(m, XlaFullyShardedDataParallel) and m is not self:
        m._is_root = False
        object.__setattr__(m, '_root', self)
    if self.disable_reshard_on_root:
      self.reshard_after_forward = False

  def _queue_final_callback(self) -> None:
    if self._final_callback_queued:
      return
    self._final_callback_queued = True
    torch.autograd.Variable._execution_engine.queue_callback(self._finalize_backward)

  def _finalize_backward(self) -> None:
    self._final_callback_queued = False
    for m in self.modules():
      if isinstance(m, XlaFullyShardedDataParallel):
        m._release_full_params()
        m._regathered.clear()
        m._backward_prepared = False
        m.training_state = TrainingState.IDLE
    if self.sync_on_finalization:
      torch_xla.sync()

  def forward(self, *args: Any, **kwargs: Any) -> Any:
    self._lazy_init()
    self.training_state = TrainingState.FORWARD
    if self.compute_dtype != torch.float32:
      cast = lambda t: t.to(self.compute_dtype) if isinstance(
          t, torch.Tensor) and torch.is_floating_point(t) else t
      args = tuple(cast(a) for a in args)
      kwargs = {k: cast(v) for k, v in kwargs.items()}
    if self.optimization_barrier_in_forward:
      xm.optimization_barrier_([a for a in args if isinstance(a, torch.Tensor)])
    self._gather_full_params()
    reshard = self.reshard_after_forward and torch.is_grad_enabled()
    try:
      if reshard:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
          out = self._fsdp_wrapped_module(*args, **kwargs)
      else:
        out = self._fsdp_wrapped_module(*args, **kwargs)
    except BaseException:
      self._release_full_params()
      self.training_state = TrainingState.IDLE
      raise
    if reshard or not torch.is_grad_enabled():
      self._release_full_params()
    if reshard:
      self._register_pre_backward_hooks(out)
    self.training_state = TrainingState.IDLE
    return out

  def _register_pre_backward_hooks(self, out: Any) -> None:
    """When backward reaches this unit's outputs, the full parameters are
    gathered again and set on the module: a forward that backward runs
    again (checkpoint_module) reads its parameters there, and the
    saved-tensor hooks reuse the same gather."""
    tensors = []

    def collect(x):
      if isinstance(x, torch.Tensor):
        if x.requires_grad:
          tensors.append(x)
      elif isinstance(x, (list, tuple)):
        for y in x:
          collect(y)
      elif isinstance(x, dict):
        for y in x.values():
          collect(y)

    collect(out)
    for t in tensors:
      t.register_hook(self._pre_backward_hook)

  def _pre_backward_hook(self, grad: torch.Tensor) -> None:
    if self._backward_prepared:
      return
    self._backward_prepared = True
    self.training_state = TrainingState.BACKWARD_PRE
    if self.optimization_barrier_in_backward:
      xm.optimization_barrier_([grad])
    with torch.enable_grad():
      self._gather_full_params()
    for index, group in enumerate(self._groups):
      self._regathered[index] = [
          getattr(*slot.places[0]).detach() for slot in group.slots
      ]

  # ------------------------------------------------------------ public helpers
  @property
  def module(self) -> nn.Module:
    """The wrapped module (as DDP's .module)."""
    return self._fsdp_wrapped_module

  def __getattr__(self, name: str) -> Any:
    try:
      return super().__getattr__(name)
    except AttributeError:
      if name == '_fsdp_wrapped_module':
        raise
      return getattr(self._fsdp_wrapped_module, name)

  def __getitem__(self, key: int) -> nn.Module:
    return self._fsdp_wrapped_module.__getitem__(key)

  @contextlib.contextmanager
  def no_sync(self):
    """Backward passes inside skip the reduce-scatter: each unit sums its
    full gradients (full size, on every replica) until the first backward
    pass outside, which reduce-scatters the sum. Root only."""
    self._lazy_init()
    if not self._is_root:
      raise AssertionError("no_sync on inner FSDP is not supported")
    units = [m for m in self.modules() if isinstance(m, XlaFullyShardedDataParallel)]
    saved = [m._require_backward_grad_sync for m in units]
    for m in units:
      m._require_backward_grad_sync = False
    try:
      yield
    finally:
      for m, flag in zip(units, saved):
        m._require_backward_grad_sync = flag

  @property
  def params_with_grad(self) -> List[nn.Parameter]:
    return [p for p in self.parameters() if p.grad is not None]

  def extra_repr(self) -> str:
    return (f"world_size={self.world_size}, rank={self.rank}, "
            f"compute_dtype={self.compute_dtype}, buffer_dtype={self.buffer_dtype}, "
            f"flatten_parameters={self.flatten_parameters}, "
            f"reshard_after_forward={self.reshard_after_forward}, "
            f"sharding_groups={self.sharding_groups}")

  @torch.no_grad()
  def clip_grad_norm_(self, max_norm, norm_type=2.0, groups=None) -> torch.Tensor:
    """Scales every shard gradient so the norm of the whole (unsharded)
    gradient is at most max_norm; returns that norm. Root only; every
    replica must call it."""
    if self._is_root is False:
      raise AssertionError("clip_grad_norm should only be called on the root (parent) instance")
    max_norm, norm_type = float(max_norm), float(norm_type)
    grads = [p.grad.detach() for p in self.params_with_grad]
    zero = torch.zeros((), device=self.xla_device)
    if norm_type == float('inf'):
      local = torch.stack([g.abs().max() for g in grads]).max() if grads else zero
      total = xm.all_reduce(xm.REDUCE_MAX, local, groups=groups)
    else:
      local = sum((g.float().abs().pow(norm_type).sum() for g in grads), zero)
      total = xm.all_reduce(xm.REDUCE_SUM, local, groups=groups)**(1.0 / norm_type)
    coef = torch.clip(max_norm / (total + 1e-6), 0.0, 1.0)
    for g in grads:
      g.mul_(coef.to(g.dtype))
    return total

  def get_original_names_and_sharded_parameters(self):
    """[(original parameter name, shard)] over this instance and the
    nested ones, names as the unwrapped module's."""
    out = []
    for mname, m in self.named_modules():
      if isinstance(m, XlaFullyShardedDataParallel):
        prefix = f"{mname}." if mname else ""
        for p in m.sharded_params:
          out.append(((prefix + p._orig_name).replace("_fsdp_wrapped_module.", ""), p))
    return out

  def get_shard_metadata(self) -> Dict[str, Any]:
    """What consolidate_sharded_model_checkpoints needs besides each
    rank's state_dict(): per instance the shards' original names and
    sizes, the flat parameters' layouts, buffers' original dtypes."""
    shard_info, flatten_info, buffer_info = {}, {}, {}
    for mname, m in self.named_modules(remove_duplicate=False):
      if not isinstance(m, XlaFullyShardedDataParallel):
        continue
      shard_info[mname] = {
          p._name: {"_orig_size": p._orig_size, "_orig_name": p._orig_name}
          for p in m.sharded_params
      }
      if m.flatten_parameters:
        for g, meta in zip(m._groups, m._flat_metadata):
          key = f"{mname}.{g.shard._orig_name}" if mname else g.shard._orig_name
          flatten_info[key] = meta
    for name, buf in self.named_buffers():
      if buf is not None and hasattr(buf, "_orig_dtype"):
        buffer_info[name] = {"_orig_dtype": buf._orig_dtype}
    return {
        "shard_info": shard_info,
        "flatten_info": flatten_info,
        "buffer_info": buffer_info,
        "world_size": self.world_size,
        "rank": self.rank,
    }
