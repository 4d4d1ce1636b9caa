"""Builds the torchtpu C engine into the extension torchtpu._C.

Plain C (no PyTorch headers): the engine talks to PyTorch only through the
Python front end. Hot kernels choose their ISA at run time, so the build
does not use -march=native and the wheel runs on any x86-64 machine.

The distribution's metadata (name torch_xla, version, dependencies, the
dynamo entry point) is in pyproject.toml; this file adds only the
extension. `python setup.py build_ext --inplace` (scripts/bootstrap.sh)
and `pip install .` both build it.
"""
import glob

from setuptools import Extension, setup

sources = sorted(glob.glob("src/**/*.c", recursive=True)) + sorted(glob.glob("python/torchtpu/_C/*.c"))
headers = sorted(glob.glob("include/**/*.h", recursive=True) + glob.glob("include/**/*.def", recursive=True) +
                 glob.glob("src/**/*.h", recursive=True) +
                 glob.glob("python/torchtpu/_C/*.h"))

ext = Extension(
    "torchtpu._C",
    sources=sources,
    depends=headers,
    include_dirs=["include", "src"],
    extra_compile_args=["-std=c11", "-O3", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                        "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                        "-fno-strict-aliasing", "-fno-trapping-math", "-pthread"],
    extra_link_args=["-pthread", "-lm"],
)



def c10d_transport():
    """The optional C++ extension torchtpu._c10d_transport: the
    cross-process transport over the installed torch's c10d
    (python/torchtpu/_c10d_transport.cpp), built against that torch's
    headers and libraries (its C++ ABI), so it must be rebuilt with every
    torch version. Without torch at build time, or if it fails to build,
    the project still builds and the Python transport is used
    (docs/collectives.md)."""
    try:
        import os

        import torch
        from torch.utils import cpp_extension
    except Exception:
        return []
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    abi = int(torch.compiled_with_cxx11_abi())
    return [Extension(
        "torchtpu._c10d_transport",
        sources=["python/torchtpu/_c10d_transport.cpp"],
        depends=["include/torchtpu/collective.h"],
        include_dirs=["include"] + cpp_extension.include_paths(),
        library_dirs=[lib],
        libraries=["c10", "torch", "torch_cpu", "torch_python"],
        language="c++",
        extra_compile_args=["-std=c++20", "-O2", "-g0", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                            "-fvisibility=hidden", "-Wno-unused-parameter"],
        extra_link_args=[f"-Wl,-rpath,{lib}"],
        optional=True,
    )]


setup(ext_modules=[ext] + c10d_transport())
