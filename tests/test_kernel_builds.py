"""The CPU kernel built for narrower SIMD than the installed one (SSE2: 4-pair chunks; AVX2 + F16C: 8-pair
chunks; an AVX-512 build has 16) writes the same bits as the installed kernel, which the other tests hold
bit-identical to the numpy kernel: the code paths of machines without AVX-512, checked on this one."""
import ast
import os
import platform
import subprocess

import numpy as np
import pytest

import ms_rotary
from ms_rotary import library

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_constants(*names):
    """Literal constants of setup.py (read, not run: running it would start a build)."""
    with open(os.path.join(ROOT, "setup.py")) as source:
        tree = ast.parse(source.read())
    found = {target.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name) and target.id in names}
    return [found[name] for name in names]


KERNEL_SOURCES, BASE_FLAGS = setup_constants("KERNEL_SOURCES", "BASE_FLAGS")
# name: (compiler flags, CPU flags the build needs)
BUILDS = {"sse2": (["-march=x86-64"], set()), "avx2": (["-march=haswell"], {"avx2", "f16c", "fma", "bmi2"})}
# narrow: single pairs; wide: chunks + tail; width 64: the fixed-width path (kFixedLen) of every build
GEOMETRIES = {"narrow": ((2, 3, 2, 16), (4, 12)), "wide": ((2, 3, 2, 80), (3, 75)),
              "width 64": ((2, 3, 2, 80), (8, 72))}
DTYPES = ("float32", "float16", "bfloat16")

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the narrower builds are x86-64 targets")


def cpu_flags():
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    """ms_rotary_run of each build this CPU can run, built the way setup.py builds the installed one."""
    out_dir = tmp_path_factory.mktemp("kernel_builds")
    built = {"installed": library.load(ms_rotary.compiled_kernel_path())}
    for name, (flags, needs) in BUILDS.items():
        if not needs <= cpu_flags():
            continue
        path = str(out_dir / f"libms_rotary_{name}.so")
        sources = [os.path.join(ROOT, source) for source in KERNEL_SOURCES]
        subprocess.run(["g++", *BASE_FLAGS, "-Wno-psabi", *flags, *sources, "-o", path], check=True)
        built[name] = library.load(path)
    return built


def bits_of(values, dtype):
    """Random float32 values as the raw bits of `dtype` (bf16: the top half of the fp32 bits)."""
    if dtype == "float32":
        return values.astype(np.float32).view(np.uint32).copy()
    if dtype == "float16":
        return values.astype(np.float16).view(np.uint16).copy()
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def run(kernel, dy, cos, sin, dtypes, mode, start, end, conjugate, out=None):
    dy_dtype, cos_dtype = dtypes
    status = kernel.rotate(dy.ctypes.data, None if out is None else out.ctypes.data, cos.ctypes.data, sin.ctypes.data,
                           dy.shape, cos.shape, sin.shape, dy_dtype, cos_dtype, cos_dtype, mode, start, end, conjugate,
                           num_threads=1)
    assert status == 0


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("conjugate", [True, False], ids=["grad", "forward"])
@pytest.mark.parametrize("cos_dtype", DTYPES)
@pytest.mark.parametrize("dy_dtype", DTYPES)
@pytest.mark.parametrize("mode", range(4))
def test_narrower_simd_builds_write_the_same_bits(entries, build, mode, dy_dtype, cos_dtype, conjugate, geometry):
    if build not in entries:
        pytest.skip(f"this CPU lacks what the {build} build needs")
    shape, (start, end) = GEOMETRIES[geometry]
    rng = np.random.default_rng(mode)
    values = rng.uniform(-2, 2, shape)
    values[0, 0, 0, start:start + 3] = [np.nan, np.inf, 1e-39]  # NaN, inf and an fp32 denormal in the slice
    dy = bits_of(values, dy_dtype)
    cos = bits_of(rng.uniform(-1, 1, (1, shape[1], 1, end - start)), cos_dtype)
    sin = bits_of(rng.uniform(-1, 1, (1, shape[1], 1, end - start)), cos_dtype)
    results = {}
    for name in ("installed", build):
        in_place, out_of_place = dy.copy(), np.empty_like(dy)
        run(entries[name], in_place, cos, sin, (dy_dtype, cos_dtype), mode, start, end, conjugate)
        run(entries[name], dy, cos, sin, (dy_dtype, cos_dtype), mode, start, end, conjugate, out=out_of_place)
        results[name] = (in_place, out_of_place)
    np.testing.assert_array_equal(results[build][0], results["installed"][0])
    np.testing.assert_array_equal(results[build][1], results["installed"][1])
    np.testing.assert_array_equal(results["installed"][0], results["installed"][1])  # in place == out of place
    assert not np.array_equal(results["installed"][0], dy)  # the slice was rotated
