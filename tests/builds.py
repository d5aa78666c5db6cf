"""The C/C++ programs the tests build: the kernel at narrower SIMD widths, the kernel under AddressSanitizer/UBSan,
the Ascend sources on the host. conftest starts the ones the selected tests need as soon as they are collected,
one at a time in the background (they compile on one core while the Python tests run on the other, and the
tests that use them run last); a test waits for the program it needs."""
import concurrent.futures
import os
import platform
import shutil
import subprocess
import tempfile

from benchmarks.ascend_model import RUNNER_SOURCES
from ms_rotary import kernel_build

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ASCEND = os.path.join(ROOT, "kernel", "ascend")
COMMON = os.path.join(ROOT, "kernel", "common")
SANITIZE = ["-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
# The Ascend sources instantiate 144 kernel classes: unoptimised they build in a third of the time (17 s vs
# 56 s here) and their small test launches still run in seconds.
ASCEND_SANITIZE = ["-g", "-O0", *SANITIZE[2:]]
# SIMD builds: name: (compiler flags, CPU flags the build needs). SSE2: 4-pair chunks; AVX2 + F16C: 8.
# portable: what MS_ROTARY_ARCH=portable builds (setup.py), the compiler's baseline.
SIMD_BUILDS = {"sse2": (["-march=x86-64"], set()), "avx2": (["-march=haswell"], {"avx2", "f16c", "fma", "bmi2"}),
               "portable": (kernel_build.arch_flags({kernel_build.ARCH_ENV: "portable"}), set())}
# The sanitized kernel at the installed SIMD width and, on x86-64, the narrowest.
MEMCHECK_ARCHES = kernel_build.NATIVE + (["-march=x86-64"] if platform.machine() == "x86_64" else [])
HAVE_COMPILER = shutil.which("g++") is not None

_directory = None
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
_started = {}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as info:
            return next((set(line.split(":", 1)[1].split()) for line in info if line.startswith("flags")), set())
    except OSError:
        return set()


def _out(name):
    global _directory
    if _directory is None:
        _directory = tempfile.mkdtemp(prefix="ms_rotary_test_builds_")
    return os.path.join(_directory, name.replace(" ", "_"))


def _recipes():
    """name: (test module that uses it, command, output path)."""
    recipes = {}
    kernel_sources = [os.path.join(ROOT, source) for source in kernel_build.SOURCES]
    for name, (flags, needs) in SIMD_BUILDS.items():
        if platform.machine() == "x86_64" and needs <= cpu_flags():
            out = _out(f"libms_rotary_{name}.so")
            recipes[f"kernel {name}"] = ("test_kernel_builds", ["g++", *kernel_build.LIBRARY_FLAGS, *kernel_build.FLAGS,
                                                                 "-Wno-psabi", *flags, *kernel_sources, "-o", out], out)
    for arch in MEMCHECK_ARCHES:
        out = _out(f"kernel_memcheck{arch}")
        recipes[f"memcheck {arch}"] = ("test_kernel_memory", [
            "g++", *kernel_build.FLAGS, *SANITIZE, arch, "-I", os.path.join(ROOT, "kernel", "cpu"),
            os.path.join(ROOT, "tests", "kernel_memcheck.cc"), os.path.join(ROOT, "kernel", "cpu", "rotary_kernel.cc"),
            "-o", out], out)
    ascend_programs = {
        "ascend kernel runner": (RUNNER_SOURCES, ["host_shim", "op_host"]),
        "ascend tiling tests": (["tests/test_tiling.cpp", "op_host/rotary_tiling.cpp"], ["op_host"]),
    }
    for name, (sources, includes) in ascend_programs.items():
        out = _out(name)
        recipes[name] = ("test_ascend_host", [
            "g++", "-std=c++17", *ASCEND_SANITIZE, *(f"-I{os.path.join(ASCEND, d)}" for d in includes), f"-I{COMMON}",
            *(os.path.join(ASCEND, s) for s in sources), "-o", out], out)
    return recipes


def _compile(command, out):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"building {out} failed:\n{' '.join(command)}\n{done.stderr[-4000:]}")
    return out


def start(modules):
    """Starts building, in the background, the programs the given test modules use."""
    if not HAVE_COMPILER:
        return
    for name, (module, command, out) in _recipes().items():
        if module in modules and name not in _started:
            _started[name] = _pool.submit(_compile, command, out)


def built(name):
    """The path of program `name`, built now if its build was not started; raises if the build failed."""
    if name not in _started:
        module, command, out = _recipes()[name]
        _started[name] = _pool.submit(_compile, command, out)
    return _started[name].result()


def available():
    return set(_recipes())


def clean_up():
    _pool.shutdown(wait=True, cancel_futures=True)
    if _directory is not None:
        shutil.rmtree(_directory, ignore_errors=True)


USED_BY = {module for module, _, _ in _recipes().values()} if HAVE_COMPILER else set()
