"""torch_xla.distributed.fsdp.wrap: auto-wrap policies and the recursive
wrapper PyTorch/XLA's FSDP wrappers (and SpmdFullyShardedDataParallel)
use to wrap submodules.

A policy is called as policy(module=m, recurse=r, unwrapped_params=n):
with recurse=True it answers "descend into m's children?", with
recurse=False "wrap m itself?"; n is the number of parameter elements of
m not yet inside a wrapper. recursive_wrap walks the tree bottom-up with
that protocol and returns (module_or_wrapper, wrapped_element_count)."""
from typing import Any, Callable, Optional, Set, Tuple, Type

import torch.nn as nn


def always_wrap_policy(*args, **kwargs) -> bool:
    """Every submodule becomes its own wrapper."""
    return True


def lambda_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                            lambda_fn: Callable) -> bool:
    """Always descends; wraps a module when lambda_fn(module) is true."""
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                 transformer_layer_cls: Set[Type[nn.Module]]) -> bool:
    """Always descends; wraps instances of the given layer classes (the
    rest stays with the outermost wrapper)."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                min_num_params: int = int(1e8),
                                force_leaf_modules: Optional[Set[Type[nn.Module]]] = None,
                                exclude_wrap_modules: Optional[Set[Type[nn.Module]]] = None
                                ) -> bool:
    """Descends into and wraps modules holding at least min_num_params
    unwrapped elements; never descends into force_leaf_modules, never
    wraps exclude_wrap_modules (defaults on the function's attributes)."""
    leaves = (size_based_auto_wrap_policy.FORCE_LEAF_MODULES
              if force_leaf_modules is None else force_leaf_modules)
    excluded = (size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES
                if exclude_wrap_modules is None else exclude_wrap_modules)
    big_enough = unwrapped_params >= min_num_params
    if recurse:
        return big_enough and not isinstance(module, tuple(leaves))
    return big_enough and not isinstance(module, tuple(excluded))


# Containers have no forward of their own, so they are never wrapped;
# attention's parameters are used outside its submodules' forwards.
size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}


def _wrap(module: nn.Module, wrapper_cls: Callable, **kwargs) -> nn.Module:
    # A module may carry `_wrap_overrides`: keyword arguments that win over
    # the wrapper's shared ones for that module alone.
    overrides = getattr(module, "_wrap_overrides", None)
    if overrides:
        kwargs = {**kwargs, **overrides}
    return wrapper_cls(module, **kwargs)


def recursive_wrap(module: nn.Module, auto_wrap_policy: Callable, wrapper_cls: Callable,
                   ignored_modules: Set[nn.Module], ignored_params: Set[nn.Parameter],
                   only_wrap_children: bool = False, **kwargs: Any) -> Tuple[nn.Module, int]:
    """Wraps module's descendants (and, unless only_wrap_children, module
    itself) that auto_wrap_policy selects in wrapper_cls(child, **kwargs),
    replacing them on their parents. Returns (module or its wrapper, number
    of parameter elements now inside wrappers)."""
    assert auto_wrap_policy is not None, "Must specify auto_wrap_policy."
    assert wrapper_cls is not None, "Must specify wrapper_cls"
    if isinstance(wrapper_cls, type):
        for _, child in module.named_modules():
            if child not in ignored_modules:
                assert not isinstance(child, wrapper_cls)
    count = sum(p.numel() for p in module.parameters() if p not in ignored_params)
    if not auto_wrap_policy(module=module, recurse=True, unwrapped_params=count):
        return module, 0
    wrapped = 0
    for name, child in module.named_children():
        if child in ignored_modules:
            continue
        new_child, n = recursive_wrap(child, auto_wrap_policy, wrapper_cls, ignored_modules,
                                      ignored_params, False, **kwargs)
        setattr(module, name, new_child)
        wrapped += n
    remaining = count - wrapped
    if not only_wrap_children and auto_wrap_policy(module=module, recurse=False,
                                                   unwrapped_params=remaining):
        return _wrap(module, wrapper_cls, **kwargs), count
    return module, wrapped
