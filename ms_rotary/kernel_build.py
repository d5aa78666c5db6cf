"""How the CPU kernel is compiled, stated once for setup.py, the tests that rebuild it (narrower SIMD,
sanitizers) and the benchmarks. Paths are relative to the repository root."""
SOURCES = ["kernel/cpu/rotary_kernel.cc", "kernel/cpu/aot_entry.cc"]
# Old C++ ABI: MindSpore's AOT interface passes std::string built that way (an attribute read segfaults
# otherwise). No FMA contraction: fp32 results then match the numpy fallback bit for bit.
FLAGS = ["-std=c++17", "-pthread", "-ffp-contract=off", "-D_GLIBCXX_USE_CXX11_ABI=0"]
LIBRARY_FLAGS = ["-O3", "-fPIC", "-shared"]
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
