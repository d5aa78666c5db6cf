"""How the CPU kernel is compiled, stated once for setup.py, the tests that rebuild it (narrower SIMD,
sanitizers) and the benchmarks. Paths are relative to the repository root."""
import os
import subprocess
import tempfile

# The kernel (plain C++), its longest translation units first: the row loops' instances compile in parallel
# (rotary_rows.h); then MindSpore's AOT entry.
KERNEL_SOURCES = ["kernel/cpu/norm_whole_rows.cc", "kernel/cpu/rotate_rows.cc", "kernel/cpu/norm_rows.cc",
                  "kernel/cpu/norm_grad_rows.cc", "kernel/cpu/rotary_kernel.cc"]
SOURCES = KERNEL_SOURCES + ["kernel/cpu/aot_entry.cc"]
# Old C++ ABI: MindSpore's AOT interface passes std::string built that way (an attribute read segfaults
# otherwise). No FMA contraction: fp32 results then match the numpy fallback bit for bit.
FLAGS = ["-std=c++17", "-pthread", "-ffp-contract=off", "-D_GLIBCXX_USE_CXX11_ABI=0"]
LIBRARY_FLAGS = ["-O3", "-fPIC"]  # and -shared to link
NATIVE = ["-march=native"]
# MS_ROTARY_ARCH=native (default): the best SIMD of the building machine, for a build that runs where it is
# built; portable: the compiler's baseline (x86-64: SSE2), for a wheel that other machines install.
ARCH_ENV = "MS_ROTARY_ARCH"
ARCHES = {"native": NATIVE, "portable": []}


def arch_flags(environ):
    choice = environ.get(ARCH_ENV, "native")
    if choice not in ARCHES:
        raise ValueError(f"{ARCH_ENV}={choice!r}: use one of {sorted(ARCHES)}")
    return ARCHES[choice]


def build_library(command_head, sources, out_path, jobs=None):
    """`command_head` (compiler and flags, without -shared) applied to each source in parallel (`jobs` at once,
    default the CPU count), then the objects linked into the shared library out_path; True if it built."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as objects:
        outputs = [os.path.join(objects, f"{i}.o") for i in range(len(sources))]
        running, failed = [], False
        for source, obj in zip(sources, outputs):
            if len(running) == jobs:
                failed |= running.pop(0).wait() != 0
            running.append(subprocess.Popen([*command_head, "-c", source, "-o", obj]))
        failed |= any([process.wait() != 0 for process in running])
        return not failed and subprocess.call([*command_head, "-shared", *outputs, "-o", out_path]) == 0
