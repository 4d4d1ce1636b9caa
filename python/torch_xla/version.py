"""Version of the PyTorch/XLA API this package implements (torch_xla.version).

Contract: __version__ is the PyTorch/XLA release whose Python API torchtpu
serves (2.9.0, the upstream version it follows), with the local label
"+torchtpu<version>" naming the engine underneath. Clients compare it with
2.x thresholds (transformers: >= 2.2, lightning: >= 2.1 and >= 2.5); the
local label sorts after the plain release, so every such check passes as it
would for 2.9.0. The same string is the distribution's version (pyproject.toml
reads it from here; python/torch_xla-*.dist-info repeats it for the source
tree, and tests/python/test_install_compat.py keeps the three equal).

__torch_gitrev__ is the git revision of the PyTorch that is running (the
engine is not compiled against PyTorch, so the running one is the one it
works with). __xla_gitrev__ names the engine that compiles and runs the
graphs where upstream names its OpenXLA revision: torchtpu does not use
OpenXLA.
"""
import torch as _torch

__version__ = "2.9.0+torchtpu0.1.0"
__torchtpu_version__ = "0.1.0"
__torch_gitrev__ = getattr(_torch.version, "git_version", "") or "unknown"
__xla_gitrev__ = "torchtpu-" + __torchtpu_version__
