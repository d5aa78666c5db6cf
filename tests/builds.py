"""The C/C++ programs the tests build: the kernel at narrower SIMD widths, the kernel under AddressSanitizer/UBSan,
the Ascend sources on the host. conftest starts the ones the selected tests need as soon as they are collected,
one at a time in the background (they compile on one core while the Python tests run on the other, and the
tests that use them run last); a test waits for the program it needs."""
import concurrent.futures
import fcntl
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
# -g1: line tables for the sanitizers' reports (full -g cost a third more compile time at -O1: 45 s vs 32 s).
# Unoptimised: the kernel (every mode, dtype pair, direction and the norm) built in 6 s instead of 42 s at -O1
# and the Ascend sources (144 kernel classes) in 17 s instead of 56 s, while the small test launches still run
# in seconds; every load and store stays in the code, where the sanitizers see it.
SANITIZE = ["-g1", "-O0", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
# SIMD builds: name: (compiler flags, CPU flags the build needs). SSE2: 4-pair chunks; AVX2 + F16C: 8.
# portable: what MS_ROTARY_ARCH=portable builds (setup.py), the compiler's baseline. Unoptimised (AVX2 on a 2-core
# AMD EPYC: 4 s a build, -O1 12 s; their tests took 9 s in all against 33 s with -O1 builds): they test each
# width's intrinsics, whose results -ffp-contract=off keeps the same at every level; the installed -O3 build is
# the one the rest of the suite runs.
WIDTH_OPTIMIZATION = "-O0"
SIMD_BUILDS = {"sse2": (["-march=x86-64"], set()), "avx2": (["-march=haswell"], {"avx2", "f16c", "fma", "bmi2"}),
               "portable": (kernel_build.arch_flags({kernel_build.ARCH_ENV: "portable"}), set())}
# The sanitized kernel at the installed SIMD width and, on x86-64, the narrowest.
MEMCHECK_ARCHES = kernel_build.NATIVE + (["-march=x86-64"] if platform.machine() == "x86_64" else [])
HAVE_COMPILER = shutil.which("g++") is not None

_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
_started = {}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as info:
            return next((set(line.split(":", 1)[1].split()) for line in info if line.startswith("flags")), set())
    except OSError:
        return set()


def _default_march():
    """The -march g++ uses when given none (x86-64 here: the portable build is then the SSE2 one)."""
    try:
        shown = subprocess.run(["g++", "-Q", "--help=target"], capture_output=True, text=True).stdout
    except OSError:
        return None
    return next((line.split()[1] for line in shown.splitlines() if line.split()[:1] == ["-march="]
                 and len(line.split()) > 1), None)


def _directory():
    """Under the run's root, shared by its workers (conftest sets MS_ROTARY_TEST_ROOT); else this process's own."""
    root = os.environ.get("MS_ROTARY_TEST_ROOT")
    return os.path.join(root, "builds") if root else os.path.join(tempfile.gettempdir(),
                                                                     f"ms_rotary_test_builds_{os.getpid()}")


def _out(name):
    return os.path.join(_directory(), name.replace(" ", "_"))


def _recipes():
    """name: (test module that uses it, command, output path)."""
    recipes = {}
    kernel_sources = [os.path.join(ROOT, source) for source in kernel_build.SOURCES]
    for name, (flags, needs) in SIMD_BUILDS.items():
        if name == "portable" and _PORTABLE_IS_SSE2:
            continue  # built() gives the SSE2 build: the same flags
        if platform.machine() == "x86_64" and needs <= cpu_flags():
            out = _out(f"libms_rotary_{name}.so")
            library_flags = [WIDTH_OPTIMIZATION if f.startswith("-O") else f for f in kernel_build.LIBRARY_FLAGS]
            recipes[f"kernel {name}"] = ("test_kernel_builds", ["g++", "-shared", *library_flags, *kernel_build.FLAGS,
                                                                 "-Wno-psabi", *flags, *kernel_sources, "-o", out], out)
    for arch in MEMCHECK_ARCHES:
        out = _out(f"kernel_memcheck{arch}")
        recipes[f"memcheck {arch}"] = ("test_kernel_memory", [
            "g++", *kernel_build.FLAGS, *SANITIZE, arch, "-I", os.path.join(ROOT, "kernel", "cpu"),
            os.path.join(ROOT, "tests", "kernel_memcheck.cc"),
            *(os.path.join(ROOT, source) for source in kernel_build.KERNEL_SOURCES), "-o", out], out)
    ascend_programs = {
        "ascend kernel runner": (RUNNER_SOURCES, ["host_shim", "op_host"]),
        "ascend tiling tests": (["tests/test_tiling.cpp", "op_host/rotary_tiling.cpp"], ["op_host"]),
    }
    for name, (sources, includes) in ascend_programs.items():
        out = _out(name)
        recipes[name] = ("test_ascend_host", [
            "g++", "-std=c++17", *SANITIZE, *(f"-I{os.path.join(ASCEND, d)}" for d in includes), f"-I{COMMON}",
            *(os.path.join(ASCEND, s) for s in sources), "-o", out], out)
    return recipes


def _compile(command, out):
    """Built once per run: the first worker to lock `out` builds it, the others wait and take its result."""
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(out + ".done"):
            done = subprocess.run(command, capture_output=True, text=True)
            with open(out + ".done", "w") as result:
                result.write(f"{' '.join(command)}\n{done.stderr[-4000:]}" if done.returncode else "")
    with open(out + ".done") as result:
        failure = result.read()
    if failure:
        raise RuntimeError(f"building {out} failed:\n{failure}")
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
    if name == "kernel portable" and _PORTABLE_IS_SSE2:
        name = "kernel sse2"
    if name not in _started:
        module, command, out = _recipes()[name]
        _started[name] = _pool.submit(_compile, command, out)
    return _started[name].result()


def available():
    return set(_recipes()) | ({"kernel portable"} if _PORTABLE_IS_SSE2 and "kernel sse2" in _recipes() else set())


def clean_up():
    _pool.shutdown(wait=True, cancel_futures=True)
    if "MS_ROTARY_TEST_ROOT" not in os.environ:  # else the run's root goes, with it
        shutil.rmtree(_directory(), ignore_errors=True)


_PORTABLE_IS_SSE2 = HAVE_COMPILER and platform.machine() == "x86_64" and _default_march() == "x86-64" \
    and not kernel_build.arch_flags({kernel_build.ARCH_ENV: "portable"})
USED_BY = {module for module, _, _ in _recipes().values()} if HAVE_COMPILER else set()
