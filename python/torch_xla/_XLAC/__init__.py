"""torch_xla._XLAC: the names of PyTorch/XLA's C++ extension module, served
by this engine (docs/xlac.md lists them and what differs).

PyTorch/XLA's Python modules, tests and user code call these directly
(torch_xla._XLAC._get_xla_tensors_hlo([t]), ...); each has PyTorch/XLA's
name, arguments and result type. A name that is not here raises
AttributeError, as it would on any module.
"""
from torch_xla._XLAC.backend import _init_xla_lazy_backend  # noqa: F401
from torch_xla._XLAC.buffers import _unsafe_buffer_pointer  # noqa: F401
from torch_xla._XLAC.devices import (  # noqa: F401
    _get_git_revs, _get_xla_tensor_dimension_size, _init_computation_client,
    _xla_computation_cache_is_initialized, _xla_device_kind, _xla_get_all_devices,
    _xla_get_all_runtime_devices, _xla_get_cpu_tensors, _xla_get_default_device,
    _xla_get_default_device_ordinal, _xla_get_device_ordinal, _xla_get_devices,
    _xla_get_num_cached_compilation_graph, _xla_get_num_processes, _xla_get_process_index,
    _xla_get_replication_devices, _xla_get_replication_devices_count, _xla_get_runtime_devices,
    _xla_memory_info, _xla_num_devices, _xla_num_global_devices, _xla_num_runtime_devices,
    _xla_real_devices, _xla_runtime_is_initialized, _xla_set_default_device,
    _xla_set_replication_devices, _xla_step_marker, _xla_sync_multi, _xla_tensors_from_aten,
    _xla_wait_device_ops, _xla_warm_up_cache)
from torch_xla._XLAC.graph import (  # noqa: F401
    _check_tensor_need_materialization, _get_graph_hash, _get_stablehlo,
    _get_xla_tensor_debug_info, _get_xla_tensor_shape_type, _get_xla_tensors_dot,
    _get_xla_tensors_hlo, _get_xla_tensors_text, _xla_get_tensor_id)
from torch_xla._XLAC.metrics import (  # noqa: F401
    _clear_xla_counters, _clear_xla_metrics, _get_executed_fallback_ops, _short_xla_metrics_report,
    _xla_counter_names, _xla_counter_value, _xla_increment_counter, _xla_metric_data,
    _xla_metric_names, _xla_metrics_report)
from torch_xla._XLAC.preemption import (  # noqa: F401
    _activate_preemption_sync_manager, _deactivate_preemption_sync_manager,
    _ensure_xla_coordinator_initialized, _sync_point_reached)
from torch_xla._XLAC.sharding import (  # noqa: F401
    OpSharding, _get_local_shards, _get_xla_sharding_spec, _get_xla_sharding_specs,
    _get_xla_sharding_type, _xla_clear_sharding, _xla_mark_sharding)
from torch_xla._XLAC.sharding import (  # noqa: F401
    _get_local_shard_replica_and_indices, _global_tensor_from_cpu_shards, _load_local_shards,
    _spmd_full_to_shard_shape, _spmd_shard_to_full_shape, _xla_annotate_custom_sharding,
    _xla_get_auto_sharding)
from torch_xla._XLAC.state import (  # noqa: F401
    _get_allow_execution, _get_buffer_donation, _get_current_graph_name, _get_ir_debug,
    _get_use_eager_mode, _is_placecholder, _set_allow_execution, _set_buffer_donation, _set_current_graph_name,
    _set_ir_debug, _set_use_eager_mode, _xla_get_enable_alias_with_buffer_donor_config,
    _xla_get_mat_mul_precision, _xla_set_enable_alias_with_buffer_donor_config,
    _xla_set_mat_mul_precision)
from torch_xla._XLAC.tensors import _replace_xla_tensor  # noqa: F401
from torch_xla.amp.syncfree._functional import (  # noqa: F401
    adam_optimizer_step_ as _xla_adam_optimizer_step_,
    sgd_optimizer_step_ as _xla_sgd_optimizer_step_)
from torch_xla._XLAC.collectives import (  # noqa: F401,E402
    _xla_spmd_all_reduce, _xla_spmd_reduce_scatter)
