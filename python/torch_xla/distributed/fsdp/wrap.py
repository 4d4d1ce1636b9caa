"""torch_xla.distributed.fsdp.wrap: PyTorch/XLA's auto-wrap policies and
recursive_wrap, which XlaFullyShardedDataParallel(auto_wrap_policy=...)
uses to wrap submodules in their own FSDP instances.

A policy is called as policy(module=m, recurse=bool, unwrapped_params=int):
with recurse=True it answers whether to descend into m's children, with
recurse=False whether to wrap m itself (given the parameters of m that no
child wrap took)."""
from typing import Any, Callable, Optional, Set, Tuple, Type

import torch.nn as nn


def always_wrap_policy(*args, **kwargs) -> bool:
  """Wraps every submodule (and descends everywhere)."""
  return True


def lambda_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                            lambda_fn: Callable) -> bool:
  """Descends everywhere; wraps the modules for which lambda_fn(module) is
  true."""
  return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                 transformer_layer_cls: Set[Type[nn.Module]]) -> bool:
  """Descends everywhere; wraps instances of transformer_layer_cls (the
  rest stays with the outer wrapper)."""
  return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module: nn.Module,
                                recurse: bool,
                                unwrapped_params: int,
                                min_num_params: int = int(1e8),
                                force_leaf_modules: Optional[Set[Type[nn.Module]]] = None,
                                exclude_wrap_modules: Optional[Set[Type[nn.Module]]] = None
                               ) -> bool:
  """Wraps a module once at least min_num_params of its parameters are not
  yet wrapped. Never descends into force_leaf_modules (default
  nn.MultiheadAttention, whose forward reads its parameters directly) and
  never wraps exclude_wrap_modules (default nn.ModuleList/ModuleDict,
  which have no forward)."""
  if force_leaf_modules is None:
    force_leaf_modules = size_based_auto_wrap_policy.FORCE_LEAF_MODULES
  if exclude_wrap_modules is None:
    exclude_wrap_modules = size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES
  if unwrapped_params < min_num_params:
    return False
  kinds = force_leaf_modules if recurse else exclude_wrap_modules
  return not isinstance(module, tuple(kinds))


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}


def _wrap(module: nn.Module, wrapper_cls: Callable, **kwargs) -> nn.Module:
  # A module may carry its own wrapper arguments (_wrap_overrides).
  overrides = getattr(module, '_wrap_overrides', None)
  if overrides:
    kwargs = {**kwargs, **overrides}
  return wrapper_cls(module, **kwargs)


def recursive_wrap(module: nn.Module,
                   auto_wrap_policy: Callable,
                   wrapper_cls: Callable,
                   ignored_modules: Set[nn.Module],
                   ignored_params: Set[nn.Parameter],
                   only_wrap_children: bool = False,
                   **kwargs: Any) -> Tuple[nn.Module, int]:
  """Wraps the submodules of module that auto_wrap_policy selects
  (children first, then module itself with what they left unless
  only_wrap_children) in wrapper_cls(submodule, **kwargs). Returns
  (the module or its wrapper, number of parameters wrapped)."""
  if auto_wrap_policy is None:
    raise ValueError('Must specify auto_wrap_policy.')
  if wrapper_cls is None:
    raise ValueError('Must specify wrapper_cls')
  if isinstance(wrapper_cls, type):
    for name, child in module.named_modules():
      if child not in ignored_modules and isinstance(child, wrapper_cls):
        raise ValueError(f'{name or type(module).__name__} is already wrapped in '
                         f'{wrapper_cls.__name__}')
  ignored_params = set(ignored_params)
  total = sum(p.numel() for p in module.parameters() if p not in ignored_params)
  if not auto_wrap_policy(module=module, recurse=True, unwrapped_params=total):
    return module, 0
  wrapped = 0
  for name, child in list(module.named_children()):
    if child in ignored_modules:
      continue
    new_child, n = recursive_wrap(child, auto_wrap_policy, wrapper_cls, ignored_modules,
                                  ignored_params, **kwargs)
    setattr(module, name, new_child)
    wrapped += n
  if not only_wrap_children and auto_wrap_policy(
      module=module, recurse=False, unwrapped_params=total - wrapped):
    return _wrap(module, wrapper_cls, **kwargs), total
  return module, wrapped
