"""torch_xla.experimental.tpu: where PyTorch/XLA before 2.1 kept the TPU
probes (lightning still imports it for torch_xla < 2.1). The same functions
as torch_xla._internal.tpu, which documents what they answer here."""
from torch_xla._internal.tpu import (  # noqa: F401
    MeshShape, TpuEnv, build_tpu_env_from_vars, configure_one_chip_topology, configure_topology,
    discover_master_worker_ip, get_tpu_env, get_tpu_type, get_worker_ips, num_available_chips,
    num_available_devices, num_expected_global_devices, num_local_processes,
    num_logical_cores_per_chip, num_tpu_workers, process_bounds_size, task_id, version, worker_id)
