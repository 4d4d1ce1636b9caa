"""torch_xla.runtime: facts about the PJRT-style runtime."""
from torchtpu import _C, config


def device_type():
    """'CPU' for this backend."""
    return config.device_type()


def using_pjrt():
    return True


def world_size():
    """Number of participating processes (1 without a multi-process launch)."""
    return 1


def global_ordinal():
    return 0


def local_ordinal():
    return 0


def process_index():
    return 0


def process_count():
    return 1


def global_runtime_device_count():
    return config.ensure_runtime()


def addressable_runtime_device_count():
    return config.ensure_runtime()


def addressable_device_count():
    return config.ensure_runtime()


def local_device_count():
    return config.ensure_runtime()


def global_device_count():
    return config.ensure_runtime()


def local_process_count():
    return 1


_spmd = False


def use_spmd(auto=False):
    """Turns on SPMD mode: programs are written for the whole mesh and
    annotated with torch_xla.distributed.spmd.mark_sharding. Here the engine
    keeps computing each program unpartitioned on its device (a sharding
    never changes a value); xs.run_spmd partitions through a PJRT plugin.
    auto=True (XLA's auto-sharding) is not supported."""
    global _spmd
    if auto:
        raise NotImplementedError("use_spmd(auto=True): XLA auto-sharding is not supported")
    _spmd = True


def is_spmd():
    """True after use_spmd()."""
    return _spmd


def initialize_cache(path: str, readonly: bool = False):
    """Keeps tier-1 compiled kernels in `path` across processes (several
    processes may share it); with readonly=True the directory is only read.
    Entries are keyed by graph hash, engine version, compile flags and CPU
    features, written atomically and verified when loaded. Tier-0 graphs
    compile in microseconds and are not persisted."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"initialize_cache expects a directory path, got {path!r}")
    _C.persistent_cache_init(path, bool(readonly))


def get_num_cached_compilation_graph():
    """Number of graphs in the in-memory compilation cache."""
    return _C.cached_graphs()
