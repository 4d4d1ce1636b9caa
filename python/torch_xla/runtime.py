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


def is_spmd():
    return False


def get_num_cached_compilation_graph():
    """Number of graphs in the in-memory compilation cache."""
    return _C.cached_graphs()
