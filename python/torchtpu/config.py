"""Runtime configuration read from the environment, as PyTorch/XLA reads it.

PJRT_DEVICE selects the backend: CPU is the one this build ships, and the
default when PJRT_DEVICE is unset (said once on stderr, as PyTorch/XLA
does). CPU_NUM_DEVICES sets the number of virtual CPU devices; the default
is 1, PyTorch/XLA's own default for its CPU client.

The engine runs its graphs through a PJRT plugin (docs/pjrt.md) with
PJRT_DEVICE=LIBRARY and PJRT_LIBRARY_PATH=<plugin.so>, or with
PJRT_DEVICE=CPU and TORCHTPU_CPU_BACKEND=pjrt (XLA's CPU plugin, found by
torchtpu.pjrt.find_cpu_plugin). The devices are then the plugin's.
"""
import os
import sys

from torchtpu import _C

ACCEPTED_DEVICES = ("CPU",)
KNOWN_BUT_UNAVAILABLE = ("TPU", "CUDA", "GPU", "NEURON", "LIBRARY")
DEFAULT_CPU_DEVICES = 1

_device_type = None


# PyTorch/XLA's XRT runtime variables: ignored by this PJRT-only runtime.
XRT_VARIABLES = ("XRT_TPU_CONFIG", "XRT_DEVICE_MAP", "XRT_WORKERS", "XRT_LOCAL_WORKER",
                 "XRT_MESH_SERVICE_ADDRESS", "XRT_MULTI_PROCESSING_DEVICE", "XRT_HOST_ORDINAL",
                 "XRT_HOST_WORLD_SIZE", "XRT_SHARD_ORDINAL", "XRT_SHARD_LOCAL_ORDINAL",
                 "XRT_SHARD_WORLD_SIZE", "XRT_START_LOCAL_SERVER")


def warn_xrt_variables(pjrt_device):
    """One line on stderr naming the XRT variables that are set (they are
    ignored: XRT is gone, PJRT_DEVICE selects the runtime). Returns the
    names."""
    names = [n for n in XRT_VARIABLES if os.environ.get(n)]
    if names:
        print(f"WARNING: ignoring XRT environment variable{'s' if len(names) > 1 else ''} "
              f"{', '.join(names)}: this runtime is PJRT only (PJRT_DEVICE={pjrt_device}); "
              "unset them", file=sys.stderr)
    return names


# Device types served by a PJRT plugin (src/backends/pjrt/, docs/pjrt.md).
PJRT_PLUGIN_DEVICES = ("TPU", "CUDA", "GPU", "LIBRARY")


def _refuse_pjrt_plugin_device(value):
    """Finds the plugin PJRT_DEVICE=value asks for (raising with the places
    searched when there is none), then says that the lazy engine does not
    run through it by that name: only LIBRARY (any plugin by path) is wired."""
    from torchtpu import pjrt
    path = pjrt.find_plugin(value)
    raise RuntimeError(
        f"PJRT_DEVICE={value}: found the PJRT plugin {path}, but torch_xla devices do not run "
        f"through {value} plugins yet (unverified); PJRT_DEVICE=LIBRARY PJRT_LIBRARY_PATH={path} "
        "runs the engine through it, or use PJRT_DEVICE=CPU")


# PJRT_DEVICE=CPU with TORCHTPU_CPU_BACKEND=pjrt runs the engine's graphs on
# XLA's CPU plugin instead of its own kernels (the default, "own").
CPU_BACKEND_VAR = "TORCHTPU_CPU_BACKEND"
# TORCHTPU_PJRT_FALLBACK=1: graphs the plugin cannot run use the own kernels
# (counted by PjrtFallback) instead of failing.
PJRT_FALLBACK_VAR = "TORCHTPU_PJRT_FALLBACK"
_pjrt_route = None   # (plugin path, client create options) when routed
_pjrt_client = None  # the routed client, once the runtime started


def _pjrt_route_from_env(value):
    """(plugin path, create options) when the engine should run through a
    PJRT plugin for PJRT_DEVICE=value, else None."""
    from torchtpu import pjrt
    if value == "LIBRARY":
        path = pjrt.find_plugin("LIBRARY")
        options = {}
        if os.environ.get("CPU_NUM_DEVICES"):
            options["cpu_device_count"] = num_devices_from_env()
        return path, options
    backend = os.environ.get(CPU_BACKEND_VAR, "").lower()
    if backend in ("", "own"):
        return None
    if backend != "pjrt":
        raise RuntimeError(f"{CPU_BACKEND_VAR}={os.environ[CPU_BACKEND_VAR]}: expected 'own' "
                           "(the engine's kernels, the default) or 'pjrt' (XLA's CPU PJRT plugin)")
    path = pjrt.find_cpu_plugin()
    if path is None:
        raise RuntimeError(f"{CPU_BACKEND_VAR}=pjrt: no XLA CPU PJRT plugin found (install "
                           "xla-cpu-pjrt, or set TORCHTPU_PJRT_CPU_PLUGIN to a plugin .so)")
    return path, {"cpu_device_count": num_devices_from_env()}


def pjrt_route():
    """(plugin path, options) when the engine runs through PJRT, else None."""
    device_type()
    return _pjrt_route


def _start_pjrt_engine():
    """Opens the routed plugin, routes executions through it; returns its
    device count (the number of xla devices)."""
    global _pjrt_client
    path, options = _pjrt_route
    _pjrt_client = _C.pjrt_open(path, options)
    fallback = os.environ.get(PJRT_FALLBACK_VAR, "0").lower() in ("1", "true", "yes")
    _C.pjrt_engine_enable(_pjrt_client, fallback)
    # Tier-1 C kernels would never run: the plugin compiles the graph.
    os.environ.setdefault("TORCHTPU_TIER", "0")
    _C.config_reload()  # the engine reads its environment once
    return _C.pjrt_client_info(_pjrt_client)["device_count"]


def device_type():
    """The backend name ('CPU'), validating PJRT_DEVICE on first call."""
    global _device_type
    if _device_type is None:
        value = os.environ.get("PJRT_DEVICE")
        if value is None or value == "":
            print("PJRT_DEVICE is not set. Defaulting to using CPU.", file=sys.stderr)
            value = "CPU"
        value = value.upper()
        global _pjrt_route
        if value in ("CPU", "LIBRARY"):
            _pjrt_route = _pjrt_route_from_env(value)
        elif value in PJRT_PLUGIN_DEVICES:
            _refuse_pjrt_plugin_device(value)
        if value not in ACCEPTED_DEVICES and _pjrt_route is None:
            hint = ""
            if value in KNOWN_BUT_UNAVAILABLE:
                hint = f" ({value} needs a PJRT plugin backend, which this build does not include)"
            raise RuntimeError(
                f"Unknown PJRT_DEVICE '{os.environ.get('PJRT_DEVICE')}'{hint}; "
                f"accepted values: {', '.join(ACCEPTED_DEVICES)}")
        warn_xrt_variables(value)
        _device_type = value
    return _device_type


def num_devices_from_env():
    raw = os.environ.get("CPU_NUM_DEVICES")
    if raw is None or raw == "":
        return DEFAULT_CPU_DEVICES
    try:
        n = int(raw)
    except ValueError:
        raise RuntimeError(f"CPU_NUM_DEVICES must be a positive integer, got '{raw}'") from None
    if n < 1 or n > 1024:
        raise RuntimeError(f"CPU_NUM_DEVICES must be in [1, 1024], got {n}")
    return n


_initialized = False


def ensure_runtime():
    """Starts the runtime once (validating the environment)."""
    global _initialized
    if not _initialized:
        device_type()
        from torchtpu import debugging
        debugging.install()
        _C.init(_start_pjrt_engine() if _pjrt_route else num_devices_from_env())
        install_blas()
        cache = os.environ.get("XLA_PERSISTENT_CACHE_PATH")
        if cache:
            readonly = os.environ.get("XLA_PERSISTENT_CACHE_READ_ONLY", "0").lower() in (
                "1", "true", "yes")
            _C.persistent_cache_init(cache, readonly)
        _initialized = True
        # Under torchrun: this process's place among the job's processes
        # and the cross-process transport (torchtpu.processes).
        from torchtpu import processes
        processes.start(_C.device_count())
    return _C.device_count()


def runtime_initialized():
    return _initialized or _C.device_count() > 0


def check_runtime_not_initialized():
    """For multi-process launchers (torch_xla.launch, xmp.spawn): the
    workers each start their own runtime, so the launching process must not
    have used an xla device. Raises PyTorch/XLA's error if it has."""
    if runtime_initialized():
        raise RuntimeError("Runtime is already initialized. Do not use the XLA "
                           "device before calling xmp.spawn.")


def install_blas(choice=None):
    """Large f32 GEMMs go to MKL's sgemm inside PyTorch's own
    libtorch_cpu.so when it exports one (docs/kernels.md: 1.2-1.3x our
    micro-kernels on transformer shapes on an Intel AVX-512 CPU; on an
    Intel AVX2-only CPU only small-batch products on weights; on other
    CPUs none, where our kernels led MKL); TORCHTPU_BLAS=mkl sends it
    every product it can take, TORCHTPU_BLAS=own none. Returns whether
    MKL is installed."""
    mb = os.environ.get("TORCHTPU_PACKED_WEIGHTS_MB", "1024").strip()
    if not mb.isdigit():
        raise ValueError(f"TORCHTPU_PACKED_WEIGHTS_MB={mb!r}: expected a whole number of MiB "
                         "(0 disables packed weights)")
    # Weights a graph reads unchanged across calls stay in MKL's packed
    # layout (blas_ext.c: 1.2-1.3x on transformer GEMMs at batch 1).
    _C.blas_set_packed_limit(int(mb) << 20)
    choice = (choice or os.environ.get("TORCHTPU_BLAS", "auto")).lower()
    if choice in ("own", "0", "off", "none"):
        _C.blas_install(None)
        return False
    if choice not in ("auto", "mkl", "1"):
        raise ValueError(f"TORCHTPU_BLAS={choice!r}: expected 'auto', 'mkl' or 'own'")
    import torch
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    # 'mkl': every large plain f32 product; 'auto': all of them on an
    # Intel AVX-512 CPU, only small-batch products on a weight on other
    # Intel CPUs (where the engine's AVX2 kernel measured at or above MKL),
    # none on other vendors' (blas_ext.c; docs/kernels.md).
    return bool(_C.blas_install(path, choice == "mkl"))
