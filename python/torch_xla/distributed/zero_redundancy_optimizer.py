"""torch_xla.distributed.zero_redundancy_optimizer: PyTorch/XLA's
ZeroRedundancyOptimizer (ZeRO-1) over the replicas of torch_xla.launch.

Contract: every replica keeps the full parameters and computes full
gradients; the optimizer state lives on shards. Each parameter is padded on
dim 0 to a multiple of the sharding group size and this replica owns chunk
`local_rank` of it, kept as an nn.Parameter of optimizer_dtype (the
"master weight") that the wrapped optimizer_class(**defaults) steps. step():
gradients are reduce-scattered (mean over the group) into the shards,
optionally clipped by their global norm (grad_clipping, max_norm; norm 2
over every shard via all_reduce), the base optimizer steps, and the updated
shards are all-gathered back into the full parameters. Only parameters
with a gradient take part. param_groups (lr, ...) are copied to the base
optimizer before each step and back after it, so schedulers work on this
object. Every replica must call step() together (collectives).
"""
import copy
import logging
from typing import Any, Dict, Iterator, List, Optional, Type

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.optim import Optimizer

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla import runtime as xr


class ZeroRedundancyOptimizer(Optimizer):
  """Wraps optimizer_class so that each replica holds 1/N of its state
  (see the module docstring; arguments as PyTorch/XLA's)."""

  def __init__(self,
               params: Iterator[Tensor],
               optimizer_class: Type[Optimizer],
               optimizer_dtype: Optional[Any] = None,
               grad_clipping: bool = True,
               max_norm: Optional[float] = None,
               pin_layout: bool = True,
               sharding_groups: Optional[Any] = None,
               grad_norm_groups: Optional[Any] = None,
               lazy_init: bool = False,
               bucket_cap_mb_all_gather: int = 0,
               bucket_cap_mb_reduce_scatter: int = 0,
               use_grad_acc_hook: bool = False,
               save_master_weights: bool = False,
               higher_cc_precision: bool = False,
               **defaults: Any):
    if not save_master_weights:
      logging.warning(
          'Not saving master weights may have accuracy issues when resuming training!')
    super().__init__(params, defaults)
    # The replicas taking part (PyTorch/XLA reads global_device_count(),
    # the same number there; here a process outside a launch is one
    # replica whatever its device count).
    self.global_world_size = xr.world_size()
    self.global_rank = xr.global_ordinal()
    self._sharding_groups = ([list(range(self.global_world_size))]
                             if sharding_groups is None else sharding_groups)
    self._grad_norm_groups = grad_norm_groups
    self.optimizer_class = optimizer_class
    self.defaults = defaults
    self.optimizer_dtype = optimizer_dtype if optimizer_dtype is not None else torch.float32
    self.grad_clipping = grad_clipping
    self.max_norm = max_norm if max_norm is not None else 1.0
    self.pin_layout = pin_layout
    self.bucket_cap_mb_all_gather = bucket_cap_mb_all_gather
    self.bucket_cap_mb_reduce_scatter = bucket_cap_mb_reduce_scatter
    self.coalesce_cc_all_gather = bucket_cap_mb_all_gather > 0
    self.coalesce_cc_reduce_scatter = bucket_cap_mb_reduce_scatter > 0
    self.save_master_weights = save_master_weights
    self.higher_cc_precision = higher_cc_precision
    self.use_grad_acc_hook = use_grad_acc_hook
    self.grad_accs = []
    self.grad_acc_hooks = []
    self._grad_norm = None
    self.inited = False
    if not lazy_init:
      self.init_zero()

  # ------------------------------------------------------------ setup
  def init_zero(self):
    """Shards the parameters and builds the base optimizer on the shards
    (called by __init__ unless lazy_init)."""
    self.remove_hooks()
    self.local_world_size = len(self.sharding_groups[0])
    self.local_rank = None
    for group in self.sharding_groups:
      group = list(group)
      if self.global_rank in group:
        self.local_rank = group.index(self.global_rank)
    if self.local_rank is None:
      raise ValueError(f"Current rank {self.global_rank} is missing from the sharding_groups "
                       f"{self.sharding_groups}")
    self.base_optimizer = self.optimizer_class(self._shard_parameters(), **self.defaults)
    self._sync_param_groups(self.param_groups, self.base_optimizer.param_groups)
    self.inited = True

  @property
  def grad_norm(self):
    """The global gradient norm of the last clipping step (None before)."""
    return self._grad_norm

  @property
  def sharding_groups(self):
    return self._sharding_groups

  @sharding_groups.setter
  def sharding_groups(self, new_sharding_groups):
    if self.inited:
      raise AssertionError("already inited, cannot change sharding_groups")
    self._sharding_groups = new_sharding_groups

  @staticmethod
  def _sync_param_groups(src: List[Dict[Any, Any]], dst: List[Dict[Any, Any]]) -> None:
    """Copies every group setting but 'params' from src to dst."""
    if len(src) != len(dst):
      raise AssertionError("Mismatch between number of source and destination parameter groups")
    for s, d in zip(src, dst):
      for key, value in s.items():
        if key != 'params':
          d[key] = value

  def _pad_to_world_size(self, tensor: Tensor, world_size: int) -> Tensor:
    extra = (-tensor.size(0)) % world_size
    return F.pad(tensor, [0, 0] * (tensor.dim() - 1) + [0, extra]) if extra else tensor

  def _shard_tensor(self, tensor: Tensor) -> Tensor:
    padded = self._pad_to_world_size(tensor, self.local_world_size)
    return padded.chunk(self.local_world_size)[self.local_rank]

  def _shard_parameters(self):
    self.device = None
    all_params = []
    for group in self.param_groups:
      for p in group['params']:
        if self.device is None:
          self.device = p.device
        elif self.device != p.device:
          raise AssertionError("Params should on the same device.")
        all_params.append(p)
    if self.device is None or self.device.type != 'xla':
      raise AssertionError("ZeroRedundancyOptimizer needs parameters on an xla device")
    xm.unlazy(all_params)
    sharded_groups = []
    for group in self.param_groups:
      shards = []
      for p in group['params']:
        # Sliced on the host: the device never holds a padded copy.
        data = self._shard_tensor(p.detach().cpu()).clone()
        shard = nn.Parameter(data.to(self.optimizer_dtype).to(self.device),
                             requires_grad=p.requires_grad)
        if self.use_grad_acc_hook:
          self._register_hook(p, shard)
        shards.append(shard)
      sharded = copy.copy(group)
      sharded['params'] = shards
      sharded_groups.append(sharded)
    return sharded_groups

  def _make_param_hook(self, param, shard):

    def hook(*unused):
      # Gradients accumulate in optimizer_dtype in shard.main_grad (full
      # shape), and param.grad is dropped.
      if param.grad is None:
        return
      if not hasattr(shard, 'main_grad'):
        shard.main_grad = torch.zeros(param.shape, dtype=self.optimizer_dtype,
                                      device=self.device)
        param.main_grad = shard.main_grad
      shard.main_grad.add_(param.grad.detach().to(self.optimizer_dtype))
      param.grad = None

    return hook

  def _register_hook(self, param, shard):
    acc = param.expand_as(param).grad_fn.next_functions[0][0]
    self.grad_acc_hooks.append(acc.register_hook(self._make_param_hook(param, shard)))
    self.grad_accs.append(acc)

  def remove_hooks(self):
    for h in self.grad_acc_hooks:
      h.remove()
    self.grad_acc_hooks = []
    self.grad_accs = []

  # ------------------------------------------------------------ step
  def _pairs(self):
    """(full parameter, shard) of every parameter taking part in a step."""
    for group, sharded in zip(self.param_groups, self.base_optimizer.param_groups):
      for p, shard in zip(group['params'], sharded['params']):
        if p.grad is not None or (self.use_grad_acc_hook and hasattr(shard, 'main_grad')):
          yield p, shard

  def _get_sharding_scheme(self, kwargs):
    if "sharding_scheme" in kwargs:
      return kwargs["sharding_scheme"]
    return [{
        "scale_factor": 1.0,
        "sharding_group": self.sharding_groups,
        "group_size": self.local_world_size,
    }]

  def _reduce_gradients(self, **kwargs):
    scheme = self._get_sharding_scheme(kwargs)
    self._sync_param_groups(self.param_groups, self.base_optimizer.param_groups)
    pairs = list(self._pairs())
    grads = []
    for p, shard in pairs:
      g = shard.main_grad if self.use_grad_acc_hook else p.grad
      g = self._pad_to_world_size(g, self.local_world_size)
      if self.higher_cc_precision:
        g = g.to(self.optimizer_dtype)
      grads.append(g)
    for step in scheme:
      kw = dict(scale=step['scale_factor'] / step['group_size'], scatter_dim=0,
                shard_count=step['group_size'], pin_layout=self.pin_layout,
                groups=step['sharding_group'])
      if self.coalesce_cc_reduce_scatter:
        grads = xm.reduce_scatter_bucketized(xm.REDUCE_SUM, grads,
                                             bucket_cap_mb=self.bucket_cap_mb_reduce_scatter,
                                             **kw)
      else:
        grads = [xm.reduce_scatter(xm.REDUCE_SUM, g, **kw) for g in grads]
    for (p, shard), g in zip(pairs, grads):
      shard.grad = g.to(self.optimizer_dtype) if g.dtype != self.optimizer_dtype else g

  @torch.no_grad()
  def _calc_grad_norm(self, norm_type: float = 2.0) -> Tensor:
    if norm_type != 2.0:
      raise RuntimeError(f"only norm type 2 is supported, getting {norm_type}")
    total = torch.zeros([], dtype=self.optimizer_dtype, device=self.device)
    for group in self.base_optimizer.param_groups:
      for p in group['params']:
        if p.grad is not None:
          g = p.grad.detach()
          total += (g * g).sum()
    xm.all_reduce(xm.REDUCE_SUM, [total], groups=self._sharding_groups,
                  pin_layout=self.pin_layout)
    if self._grad_norm_groups is not None:
      xm.all_reduce(xm.REDUCE_SUM, [total], groups=self._grad_norm_groups,
                    pin_layout=self.pin_layout)
    return torch.pow(total, 1.0 / norm_type)

  @torch.no_grad()
  def _clip_grad_norm(self, max_norm: float, norm_type: float = 2.0) -> None:
    self._grad_norm = self._calc_grad_norm(float(norm_type))
    coef = torch.clamp(float(max_norm) / (self._grad_norm + 1e-6), max=1.0)
    for group in self.base_optimizer.param_groups:
      for p in group['params']:
        if p.grad is not None:
          p.grad.detach().mul_(coef)

  def _update_parameters(self, **kwargs):
    scheme = self._get_sharding_scheme(kwargs)
    kwargs.pop("sharding_scheme", None)
    self.base_optimizer.step(closure=None, **kwargs)
    self.base_optimizer.zero_grad(set_to_none=True)
    self.allgather_weights_and_update_full_parameter(scheme)
    self._sync_param_groups(self.base_optimizer.param_groups, self.param_groups)

  @torch.no_grad()
  def step(self, closure=None, **kwargs):
    """Reduce-scatters the gradients, clips, steps the shards and gathers
    the parameters back; returns closure()'s loss when given."""
    if not self.inited:
      raise AssertionError("must call init_zero() first")
    loss = None
    if closure is not None:
      with torch.enable_grad():
        loss = closure()
    self._reduce_gradients(**kwargs)
    if self.grad_clipping:
      self._clip_grad_norm(max_norm=self.max_norm)
    self._update_parameters(**kwargs)
    return loss

  @torch.no_grad()
  def allgather_weights_and_update_full_parameter(self, sharding_scheme=None):
    """Copies the all-gathered shards into the full parameters."""
    if sharding_scheme is None:
      sharding_scheme = self._get_sharding_scheme({})
    pairs = list(self._pairs())
    data = [shard.detach().to(p.dtype) for p, shard in pairs]
    for step in reversed(sharding_scheme):
      if self.coalesce_cc_all_gather:
        data = xm.all_gather_bucketized(data, dim=0, groups=step['sharding_group'],
                                        pin_layout=self.pin_layout,
                                        bucket_cap_mb=self.bucket_cap_mb_all_gather)
      else:
        data = [xm.all_gather(d, dim=0, groups=step['sharding_group'], pin_layout=self.pin_layout)
                for d in data]
    for (p, _), full in zip(pairs, data):
      # In place on the parameter itself (under no_grad): through p.data the
      # engine would keep the parameter's previous buffer alive as well.
      p.copy_(full[:p.size(0)])

  def zero_grad(self, set_to_none: bool = False):
    super().zero_grad(set_to_none=set_to_none)
    if self.use_grad_acc_hook:
      for group in self.base_optimizer.param_groups:
        for shard in group['params']:
          if hasattr(shard, 'main_grad'):
            shard.main_grad.zero_()

  # ------------------------------------------------------------ checkpoints
  def state_dict(self):
    """This optimizer's state_dict plus 'base_state' (the shards' state),
    'shape_info' and, with save_master_weights, 'sharded_master_weights'."""
    sd = super().state_dict()
    sd['base_state'] = self.base_optimizer.state_dict()['state']
    sd['shape_info'] = self.get_shape_info()
    if self.save_master_weights:
      shards = [s for g in self.base_optimizer.param_groups for s in g['params']]
      sd['sharded_master_weights'] = {i: s.data for i, s in enumerate(shards)}
    return sd

  def load_state_dict(self, state_dict):
    state_dict = copy.deepcopy(state_dict)
    base_state = state_dict.pop('base_state')
    master = state_dict.pop('sharded_master_weights', None)
    state_dict.pop('shape_info', None)
    super().load_state_dict(state_dict)
    self.init_zero()  # fresh shards of the current parameters
    base = self.base_optimizer.state_dict()
    base['state'] = base_state
    base['param_groups'] = state_dict['param_groups']
    self.base_optimizer.load_state_dict(base)
    if master is None:
      return
    for group, sharded, loaded in zip(self.param_groups, self.base_optimizer.param_groups,
                                      state_dict['param_groups']):
      for p, shard, idx in zip(group['params'], sharded['params'], loaded['params']):
        with torch.no_grad():
          shard.copy_(master[idx].to(shard.device))
        # Marks the parameter as taking part in the gather below.
        if self.use_grad_acc_hook:
          shard.main_grad = torch.zeros(p.shape, dtype=self.optimizer_dtype, device=self.device)
          p.main_grad = shard.main_grad
        else:
          p.grad = torch.zeros_like(p.data)
    torch_xla.sync()
    self.allgather_weights_and_update_full_parameter()
    torch_xla.sync()

  def get_shape_info(self):
    """{index: shape} of the full parameters in param_groups order."""
    params = [p for g in self.param_groups for p in g['params']]
    return {i: p.shape for i, p in enumerate(params)}
