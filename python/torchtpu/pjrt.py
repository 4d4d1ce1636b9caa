"""Direct use of a PJRT C API plugin (libtpu, a JAX CUDA plugin, XLA's CPU
plugin) from Python: open a plugin, list its devices, compile StableHLO text
and run it on numpy arrays or torch tensors. The work happens in C
(src/backends/pjrt/); this module only finds plugins and converts arrays.

The lazy tensor engine itself runs through a plugin with PJRT_DEVICE=LIBRARY
(PJRT_LIBRARY_PATH) or PJRT_DEVICE=CPU TORCHTPU_CPU_BACKEND=pjrt; see
docs/pjrt.md and engine_info().

    client = pjrt.Client(pjrt.find_cpu_plugin(), {"cpu_device_count": 2})
    exe = client.compile(stablehlo_text)
    (out,) = exe.run([np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)])
"""
import importlib.util
import os

import numpy as np

from torchtpu import _C

# Element type codes of the C API (include/torchtpu/base.h tt_dtype_t).
_F32, _F64, _F16, _BF16, _I8, _U8, _I16, _I32, _I64, _BOOL = range(10)
_NUMPY_CODES = {
    np.dtype(np.float32): _F32, np.dtype(np.float64): _F64, np.dtype(np.float16): _F16,
    np.dtype(np.int8): _I8, np.dtype(np.uint8): _U8, np.dtype(np.int16): _I16,
    np.dtype(np.int32): _I32, np.dtype(np.int64): _I64, np.dtype(np.bool_): _BOOL,
}
_CODE_NUMPY = {code: dt for dt, code in _NUMPY_CODES.items()}


# ---- plugin discovery -------------------------------------------------------

def _package_dir(name):
    """Directory of an importable package, without importing it; None if
    absent."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _package_file(package, filename, searched):
    where = _package_dir(package)
    if where is None:
        searched.append(f"Python package '{package}' (not installed)")
        return None
    path = os.path.join(where, filename)
    if os.path.isfile(path):
        return path
    searched.append(f"{path} (no such file)")
    return None


def _env_file(var, searched):
    """The file an environment variable names; None if unset. A set variable
    that names no file is the user's mistake, so it raises."""
    value = os.environ.get(var)
    if not value:
        searched.append(f"${var} (unset)")
        return None
    if not os.path.isfile(value):
        raise RuntimeError(f"{var}={value}: no such file (it should name a PJRT plugin "
                           "shared library)")
    return value


# (package, library file) of JAX's CUDA PJRT plugins, newest CUDA first.
CUDA_PLUGIN_PACKAGES = (("jax_plugins.xla_cuda13", "xla_cuda_plugin.so"),
                        ("jax_plugins.xla_cuda12", "xla_cuda_plugin.so"))
# (package, library file) of packages that ship XLA's CPU PJRT plugin; the
# first is the one requirements.txt installs.
CPU_PLUGIN_PACKAGES = (("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so"),
                       ("fastatomstruct_xla_cpu", "libpjrt_cpu.so"),
                       ("lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so"))


def find_plugin(device):
    """Path of the PJRT plugin for PJRT_DEVICE=`device` (TPU, CUDA/GPU,
    LIBRARY). Search order:
      TPU:     $TPU_LIBRARY_PATH, then libtpu.so in the `libtpu` package
      CUDA:    xla_cuda_plugin.so in jax_plugins.xla_cuda13, then _cuda12
      LIBRARY: $PJRT_LIBRARY_PATH
    Raises RuntimeError naming every place searched when none is found, and
    when an environment variable names a missing file."""
    device = device.upper()
    searched = []
    path = None
    if device == "TPU":
        path = _env_file("TPU_LIBRARY_PATH", searched) or _package_file("libtpu", "libtpu.so",
                                                                         searched)
    elif device in ("CUDA", "GPU"):
        for package, filename in CUDA_PLUGIN_PACKAGES:
            path = _package_file(package, filename, searched)
            if path:
                break
    elif device == "LIBRARY":
        path = _env_file("PJRT_LIBRARY_PATH", searched)
    else:
        raise ValueError(f"find_plugin: no PJRT plugin search for device type '{device}' "
                         "(TPU, CUDA, GPU or LIBRARY)")
    if path is None:
        raise RuntimeError(f"PJRT_DEVICE={device}: no PJRT plugin found; searched: "
                           + "; ".join(searched))
    return path


def find_cpu_plugin():
    """Path of an installed XLA CPU PJRT plugin ($TORCHTPU_PJRT_CPU_PLUGIN,
    then the packages in CPU_PLUGIN_PACKAGES), or None. Used for testing the
    PJRT backend without an accelerator."""
    searched = []
    override = os.environ.get("TORCHTPU_PJRT_CPU_PLUGIN")
    if override:
        return override
    for package, filename in CPU_PLUGIN_PACKAGES:
        path = _package_file(package, filename, searched)
        if path:
            return path
    return None


# ---- client and executables -------------------------------------------------

class Client:
    """A loaded PJRT plugin and one client of it. `options` are the plugin's
    client create options (e.g. {"cpu_device_count": 2} for XLA's CPU
    plugin); values are bool, int, float or str."""

    def __init__(self, library_path, options=None):
        self._handle = _C.pjrt_open(os.fspath(library_path), dict(options or {}))
        info = _C.pjrt_client_info(self._handle)
        self.library_path = info["library_path"]
        self.platform_name = info["platform_name"]
        self.platform_version = info["platform_version"]
        self.api_version = info["api_version"]

    def devices(self):
        """Addressable devices: a list of dicts with index, id and kind."""
        return _C.pjrt_devices(self._handle)

    def compile(self, program, format="mlir", num_replicas=1, num_partitions=1,
                device_ordinal=-1, portable=False, use_spmd_partitioning=False,
                device_assignment=None):
        """Compiles StableHLO text (str) or bytecode (bytes). A portable
        executable may run on any device (Executable.run's device). With
        num_replicas/num_partitions > 1 the executable runs on several
        devices at once (Executable.run_devices); use_spmd_partitioning
        lets XLA's SPMD partitioner cut the program by its mhlo.sharding
        annotations; device_assignment (num_replicas * num_partitions device
        ids, replica-major) pins which device runs what."""
        if device_assignment is not None:
            device_assignment = [int(d) for d in device_assignment]
        handle = _C.pjrt_compile(self._handle, program, format=format, num_replicas=num_replicas,
                                 num_partitions=num_partitions, device_ordinal=device_ordinal,
                                 portable=portable,
                                 use_spmd_partitioning=bool(use_spmd_partitioning),
                                 device_assignment=device_assignment)
        return Executable(self, handle)

    def __repr__(self):
        major, minor = self.api_version
        return (f"pjrt.Client({self.platform_name!r}, api {major}.{minor}, "
                f"{len(self.devices())} device(s), {self.library_path})")


def _to_input(x, index):
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return (t.view(torch.int16).numpy(), tuple(t.shape), _BF16)
        x = t.numpy()
    a = np.ascontiguousarray(x)
    code = _NUMPY_CODES.get(a.dtype)
    if code is None:
        raise TypeError(f"PJRT input {index}: unsupported dtype {a.dtype}")
    return (a, a.shape, code)


def _output_numpy(data, shape, code):
    if code == _BF16:
        raise TypeError("PJRT output is bfloat16, which numpy has no dtype for; use run_torch")
    return np.frombuffer(data, dtype=_CODE_NUMPY[code]).reshape(shape)


def _output_torch(data, shape, code):
    import torch
    if code == _BF16:
        return torch.frombuffer(data, dtype=torch.int16).view(torch.bfloat16).reshape(shape)
    return torch.from_numpy(_output_numpy(data, shape, code))


class Executable:
    def __init__(self, client, handle):
        self.client = client
        self._handle = handle
        self.num_outputs = _C.pjrt_num_outputs(handle)

    def _run(self, inputs, device):
        args = [_to_input(x, i) for i, x in enumerate(inputs)]
        return _C.pjrt_execute(self._handle, args, device=device)

    def run(self, inputs, device=0):
        """Copies `inputs` (numpy arrays or torch tensors) to the device,
        executes, waits, and returns the outputs as numpy arrays."""
        return [_output_numpy(*out) for out in self._run(inputs, device)]

    def run_torch(self, inputs, device=0):
        """As run, returning torch CPU tensors (bfloat16 included)."""
        return [_output_torch(*out) for out in self._run(inputs, device)]

    def devices(self):
        """Client device indices an execution on all of the executable's
        devices runs on, in the order run_devices takes their inputs."""
        return _C.pjrt_executable_devices(self._handle)

    def run_devices(self, per_device_inputs, as_torch=False):
        """Runs on every device of the executable at once (one
        PJRT_LoadedExecutable_Execute: replicated and partitioned programs
        need this for their collectives). per_device_inputs[d] are the
        inputs of the d-th device of devices(); returns, per device, its
        outputs (numpy arrays, or torch tensors with as_torch)."""
        lists = [[_to_input(x, i) for i, x in enumerate(inputs)] for inputs in per_device_inputs]
        conv = _output_torch if as_torch else _output_numpy
        return [[conv(*o) for o in outs]
                for outs in _C.pjrt_execute_devices(self._handle, lists)]


def engine_info():
    """None, or the plugin the lazy engine runs through: dict(library_path,
    platform_name, device_count, cached_graphs)."""
    return _C.pjrt_engine_info()


# ---- ahead-of-time compile for a TPU topology --------------------------------

# Set (when unset) before libtpu initialises: without it libtpu asks the GCE
# metadata server for the TPU environment, 30 tries per key, which off GCE
# takes minutes before failing. A topology needs no such environment.
TPU_AOT_ENV_DEFAULTS = {"TPU_SKIP_MDS_QUERY": "1"}


class Topology:
    """A plugin's description of devices to compile for ahead of time, with
    no client and no hardware: for libtpu, names like "v5e:2x2" (4 x TPU v5
    lite), "v4:2x2x1", "v5p:2x2x1", "v6e:2x2" (see docs/pjrt.md). The
    library defaults to find_plugin("TPU"): $TPU_LIBRARY_PATH, then the
    `libtpu` package. `options` are the plugin's topology create options."""

    def __init__(self, name="v5e:2x2", library_path=None, options=None):
        if library_path is None:
            library_path = find_plugin("TPU")
        for var, value in TPU_AOT_ENV_DEFAULTS.items():
            os.environ.setdefault(var, value)
        self._handle = _C.pjrt_topology_open(os.fspath(library_path), name, dict(options or {}))
        info = _C.pjrt_topology_info(self._handle)
        self.name = info["name"]
        self.library_path = info["library_path"]
        self.platform_name = info["platform_name"]
        self.platform_version = info["platform_version"]
        self.api_version = info["api_version"]
        self.device_kinds = info["device_kinds"]

    def compile(self, program, format="mlir", num_replicas=1, num_partitions=1,
                use_spmd_partitioning=False):
        """Compiles StableHLO text (str) or bytecode (bytes) for this topology
        (PJRT_Compile) and returns the serialized executable (the plugin's
        format, PJRT_Executable_Serialize); use_spmd_partitioning lets XLA's
        SPMD partitioner cut a sharded module (xs.mark_sharding) into
        num_partitions programs. Raises RuntimeError with the plugin's
        message when it refuses the program."""
        return _C.pjrt_topology_compile(self._handle, program, format=format,
                                        num_replicas=num_replicas, num_partitions=num_partitions,
                                        use_spmd_partitioning=bool(use_spmd_partitioning))

    def __repr__(self):
        kind = self.device_kinds[0] if self.device_kinds else "no devices"
        return (f"pjrt.Topology({self.name!r}, {len(self.device_kinds)} x {kind}, "
                f"{self.library_path})")


def compile_for_topology(stablehlo, topology="v5e:2x2", library_path=None, **compile_options):
    """Compiles `stablehlo` (text or bytecode, e.g. xm.get_stablehlo(tensors))
    for a TPU topology without a TPU, as PyTorch/XLA's AOT mode does, and
    returns the serialized executable (bytes). Raises RuntimeError naming
    the places searched when no libtpu is found."""
    return Topology(topology, library_path).compile(stablehlo, **compile_options)
