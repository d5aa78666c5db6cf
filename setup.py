"""The build step pyproject.toml cannot state: the CPU kernel, compiled with the system C++ compiler into the
source tree's ms_rotary/lib/ (so the source tree and an editable install find it), with a copy installed
inside the package."""
import importlib.util
import os
import shlex
import shutil

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_kernel_build():
    """ms_rotary/kernel_build.py (sources and flags, shared with the tests and benchmarks) by its path: the
    package itself needs MindSpore, which the build environment does not have."""
    spec = importlib.util.spec_from_file_location("kernel_build", os.path.join(HERE, "ms_rotary", "kernel_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kernel_build = _load_kernel_build()


def build_kernel(out_path):
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        raise RuntimeError(f"ms_rotary builds its CPU kernel with a C++17 compiler, and {compiler!r} was not found "
                           f"(from $CXX, default g++). Install one (Debian/Ubuntu: apt install g++; Fedora: dnf "
                           f"install gcc-c++; conda: conda install gxx_linux-64) or point CXX at it, then rerun.")
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    sources = [os.path.join(HERE, src) for src in kernel_build.SOURCES]
    # native falls back to the baseline if the compiler refuses -march=native
    for arch in dict.fromkeys(map(tuple, (kernel_build.arch_flags(os.environ), []))):
        head = [compiler, *kernel_build.LIBRARY_FLAGS, *kernel_build.FLAGS, *arch]
        print("building CPU kernel:", shlex.join(head), "-c", "on each of", shlex.join(sources),
              "in parallel, then linked -shared")
        if kernel_build.build_library(head, sources, out_path):
            return
    raise RuntimeError(f"could not build the ms_rotary CPU kernel with {compiler}")


KERNEL_PATH = os.path.join(HERE, "ms_rotary", "lib", "libms_rotary_cpu.so")


class BuildKernel(build_ext):
    """The kernel is built into the source tree; a regular install also gets a copy inside the package (an
    editable install, `setup.py develop` or PEP 660, runs the source tree)."""

    def run(self):
        build_kernel(KERNEL_PATH)
        if not (self.inplace or getattr(self, "editable_mode", False)):
            installed = os.path.join(self.build_lib, "ms_rotary", "lib", "libms_rotary_cpu.so")
            os.makedirs(os.path.dirname(installed), exist_ok=True)
            shutil.copy2(KERNEL_PATH, installed)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


# Metadata and dependencies: pyproject.toml.
setup(cmdclass={"build_ext": BuildKernel}, distclass=BinaryDistribution)
