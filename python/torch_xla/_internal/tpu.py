"""torch_xla._internal.tpu: what the host offers in TPUs, for code that asks
before starting the runtime (lightning's XLAAccelerator.auto_device_count and
is_available, launchers counting processes).

Contract (answers are about this runtime, not about hardware it cannot use):
- TPU chips: none. The engine computes on the host CPU and drives no TPU
  chip, so num_available_chips() is 0 on every host, a Cloud TPU VM included
  (counting chips there would make a client start processes for devices
  that never appear).
- XLA devices: num_available_devices() is the number of xla devices the
  runtime will open, read from the environment without starting it:
  PJRT_DEVICE=CPU gives CPU_NUM_DEVICES (default 1), PJRT_DEVICE=LIBRARY at
  least 1 (the plugin's count is known only once it is opened), and with
  PJRT_DEVICE unset 0, as PyTorch/XLA answers on a host without TPUs (the
  runtime still defaults to CPU when a program asks for an xla device).
  Any other PJRT_DEVICE value gives 0: the runtime would refuse it, and a
  client only probing must not fail (installing torch_xla must not break a
  program that does not use it).
- TPU metadata (get_tpu_env, version, get_tpu_type, worker_id): only from
  the TPU_* variables PyTorch/XLA reads with TPU_SKIP_MDS_QUERY set; no
  metadata server is queried, so without them EnvironmentError, the error
  PyTorch/XLA raises when the metadata cannot be had.
"""
import functools
import operator
import os
import re
from typing import List, NamedTuple, Optional, TypedDict


class TpuEnv(TypedDict):
    ACCELERATOR_TYPE: str
    TPU_PROCESS_BOUNDS: str
    TPU_CHIPS_PER_PROCESS_BOUNDS: str
    WORKER_ID: int


class MeshShape(NamedTuple):
    """A TPU mesh shape such as '2,2,1'."""
    x: int
    y: int
    z: int

    @classmethod
    def from_string(cls, mesh: str):
        dims = tuple(int(d) for d in mesh.split(','))
        if len(dims) != 3:
            raise ValueError("Mesh shape '{}' should be length 3".format(mesh))
        return MeshShape(*dims)

    @property
    def size(self) -> int:
        return functools.reduce(operator.mul, self)

    def __mul__(self, other):
        return MeshShape(*(a * b for a, b in zip(self, other)))


def _env(name, default=None):
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def process_bounds_size() -> Optional[int]:
    """Processes across all TPU hosts per TPU_PROCESS_BOUNDS, None if unset."""
    bounds = _env('TPU_PROCESS_BOUNDS')
    return MeshShape.from_string(bounds).size if bounds else None


def num_available_chips() -> int:
    """TPU chips this runtime drives: none (it computes on the host CPU)."""
    return 0


def num_logical_cores_per_chip() -> int:
    """XLA devices per chip. A CPU device is one device; there are no
    chips to split."""
    return 1


def num_available_devices() -> int:
    """XLA devices on this host, from the environment; does not start the
    runtime, so it is safe before xmp.spawn (see the module contract)."""
    from torchtpu import _C, config
    if config.runtime_initialized():
        return _C.device_count()
    pjrt_device = _env('PJRT_DEVICE', '').upper()
    if pjrt_device == 'CPU':
        try:
            return config.num_devices_from_env()
        except RuntimeError:  # a bad CPU_NUM_DEVICES: the runtime will say so
            return 0
    if pjrt_device == 'LIBRARY':
        return 1 if _env('PJRT_LIBRARY_PATH') else 0
    return 0


def num_expected_global_devices() -> int:
    """XLA devices across all hosts: one host here."""
    return num_available_devices() * num_tpu_workers()


def num_local_processes() -> int:
    """Processes a launcher starts on this host: one (the runtime drives
    all of this host's xla devices from one process), none without devices."""
    return 1 if num_available_devices() > 0 else 0


def task_id() -> Optional[int]:
    """This process's index among the TPU worker processes, if set."""
    value = _env('CLOUD_TPU_TASK_ID')
    return None if value is None else int(value)


def _using_env_vars() -> bool:
    return bool(_env('TPU_SKIP_MDS_QUERY'))


def build_tpu_env_from_vars() -> TpuEnv:
    """The tpu-env fields from the TPU_* variables (TPU_SKIP_MDS_QUERY mode)."""
    return {
        'ACCELERATOR_TYPE': _env('TPU_ACCELERATOR_TYPE'),
        'TPU_PROCESS_BOUNDS': _env('TPU_PROCESS_BOUNDS', _env('TPU_HOST_BOUNDS')),
        'TPU_CHIPS_PER_PROCESS_BOUNDS': _env('TPU_CHIPS_PER_PROCESS_BOUNDS',
                                             _env('TPU_CHIPS_PER_HOST_BOUNDS')),
        'WORKER_ID': _env('CLOUD_TPU_TASK_ID', _env('TPU_WORKER_ID')),
    }


def get_tpu_env() -> TpuEnv:
    """The TPU's tpu-env metadata. Only the TPU_SKIP_MDS_QUERY variables
    are read: this runtime has no TPU, so no metadata server is asked."""
    if _using_env_vars():
        return build_tpu_env_from_vars()
    raise EnvironmentError(
        'Failed to get TPU metadata: torch_xla (torchtpu) runs on the host CPU and drives no TPU; '
        'set TPU_SKIP_MDS_QUERY=1 and the TPU_* variables to describe one')


def worker_id() -> int:
    """This TPU worker's ID from the metadata."""
    return int(get_tpu_env()['WORKER_ID'])


def _accelerator_type() -> str:
    accelerator_type = get_tpu_env().get('ACCELERATOR_TYPE')
    if not accelerator_type:
        raise EnvironmentError('Failed to get TPU metadata: TPU_ACCELERATOR_TYPE is not set')
    return accelerator_type


def version() -> int:
    """The TPU generation (4 for 'v4-8'), from the metadata."""
    match = re.match(r'^(?:v|tpu)(\d)([A-Za-z]?){7}-(\d+)$', _accelerator_type())
    if not match:
        raise EnvironmentError('Failed to parse TPU version from metadata')
    return int(match.groups()[0])


def get_tpu_type() -> str:
    """The TPU type ('v6e' for 'v6e-8'), from the metadata."""
    accelerator_type = _accelerator_type()
    match = re.search(r'^([^-]*)-', accelerator_type)
    return match.group(1) if match else accelerator_type


def get_worker_ips() -> List[str]:
    """TPU worker host names: TPU_WORKER_HOSTNAMES, else this host."""
    hostnames = [h for h in _env('TPU_WORKER_HOSTNAMES', '').split(',') if h]
    return hostnames if len(hostnames) > 1 else ['localhost']


def num_tpu_workers() -> int:
    return len(get_worker_ips())


def configure_one_chip_topology() -> None:
    """Sets the one-process, one-chip topology variables PyTorch/XLA sets
    (kept for code that reads them back; the engine does not use them)."""
    os.environ.setdefault('TPU_VISIBLE_CHIPS', '0')
    os.environ.setdefault('TPU_CHIPS_PER_PROCESS_BOUNDS', '1,1,1')
    os.environ.setdefault('TPU_PROCESS_BOUNDS', '1,1,1')


def configure_topology(local_rank: int, local_world_size: int, base_port: int = 8476) -> None:
    """PyTorch/XLA derives a multi-host TPU topology from the metadata here;
    without TPUs there is none to configure."""
    raise EnvironmentError('configure_topology: torch_xla (torchtpu) drives no TPU chips; '
                           'one process runs all xla devices of this host')


def discover_master_worker_ip(use_localhost: bool = True) -> str:
    """The host of process 0: this host (one host)."""
    return 'localhost'
