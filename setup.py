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

setup(ext_modules=[ext])
