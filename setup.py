"""Builds the CPU kernel with the system C++ compiler and installs it inside the package (ms_rotary/lib/)."""
import os
import shlex
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL_SOURCES = ["kernel/cpu/rotary_kernel.cc", "kernel/cpu/aot_entry.cc"]
# Old C++ ABI: MindSpore's AOT interface passes std::string built that way (see SPEC).
# No FMA contraction: fp32 results then match the numpy fallback bit for bit.
BASE_FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared", "-pthread", "-ffp-contract=off", "-D_GLIBCXX_USE_CXX11_ABI=0"]


def build_kernel(out_path):
    compiler = os.environ.get("CXX", "g++")
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    sources = [os.path.join(HERE, src) for src in KERNEL_SOURCES]
    # The package is built where it runs; -march=native is dropped if the compiler refuses it.
    for arch in (["-march=native"], []):
        cmd = [compiler, *BASE_FLAGS, *arch, *sources, "-o", out_path]
        print("building CPU kernel:", shlex.join(cmd))
        if subprocess.call(cmd) == 0:
            return
    raise RuntimeError(f"could not build the ms_rotary CPU kernel with {compiler}")


class BuildPyWithKernel(build_py):
    def run(self):
        super().run()
        build_kernel(os.path.join(self.build_lib, "ms_rotary", "lib", "libms_rotary_cpu.so"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(
    name="ms_rotary",
    version="0.1.0",
    description="Partial rotary position embedding (RoPE) forward and backward as MindSpore custom ops",
    packages=["ms_rotary", "ms_rotary.op_info"],
    package_dir={"ms_rotary": "ms_rotary", "ms_rotary.op_info": "op_info"},
    python_requires=">=3.9,<3.12",
    install_requires=["mindspore==2.10.0", "numpy==1.26.4"],
    extras_require={
        "test": ["pytest==9.0.3", "hypothesis==6.155.2", "tqdm==4.70.1", "psutil==7.2.2"],
        "demo": ["tqdm==4.70.1"],
        "bench": ["torch==2.13.0", "matplotlib==3.11.2"],
    },
    cmdclass={"build_py": BuildPyWithKernel},
    distclass=BinaryDistribution,
)
