"""Builds the torchtpu C engine into the extension torchtpu._C.

Plain C (no PyTorch headers): the engine talks to PyTorch only through the
Python front end. Hot kernels choose their ISA at run time, so the build
does not use -march=native and the wheel runs on any x86-64 machine.
"""
import glob
import os

from setuptools import Extension, find_packages, setup

here = os.path.dirname(os.path.abspath(__file__))
sources = sorted(glob.glob("src/**/*.c", recursive=True)) + sorted(glob.glob("python/torchtpu/_C/*.c"))
headers = sorted(glob.glob("include/**/*.h", recursive=True) + glob.glob("src/**/*.h", recursive=True) +
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

setup(
    name="torchtpu",
    version="0.1.0",
    description="PyTorch/XLA's API on a C11 lazy-tensor engine",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[ext],
)
