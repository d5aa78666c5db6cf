"""The CPU kernel built for narrower SIMD than the installed one (SSE2: 4-pair chunks; AVX2 + F16C: 8-pair
chunks; an AVX-512 build has 16) writes the same bits as the installed kernel, which the other tests hold
bit-identical to the numpy kernel: the code paths of machines without AVX-512, checked on this one; and the
portable build (MS_ROTARY_ARCH=portable, the compiler's baseline) a wheel for other machines gets."""
import platform

import builds
import numpy as np
import pytest
from conftest import DTYPES, kernel_float32
from conftest import kernel_bits as bits_of
from conftest import run_kernel as run

import ms_rotary
from ms_rotary import library

# narrow: single pairs; wide: chunks + tail; width 64: the fixed-width path (kFixedLen) of every build; width 128:
# mode 0's rows in address order (kInOrderLen), the other modes' chunks
GEOMETRIES = {"narrow": ((2, 3, 2, 16), (4, 12)), "wide": ((2, 3, 2, 80), (3, 75)),
              "width 64": ((2, 3, 2, 80), (8, 72)), "width 128": ((2, 3, 2, 128), (0, 128))}


pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the narrower builds are x86-64 targets")


@pytest.fixture(scope="module")
def entries():
    """The installed kernel and each narrower build this CPU can run, built the way setup.py builds."""
    built = {"installed": library.load(ms_rotary.compiled_kernel_path())}
    for name in builds.SIMD_BUILDS:
        if f"kernel {name}" in builds.available():
            built[name] = library.load(builds.built(f"kernel {name}"))
    return built


@pytest.mark.parametrize("build", builds.SIMD_BUILDS)
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


def test_arch_choice_is_checked():
    from ms_rotary import kernel_build
    assert kernel_build.arch_flags({}) == kernel_build.NATIVE
    assert not any(flag.startswith("-march") for flag in kernel_build.arch_flags({kernel_build.ARCH_ENV: "portable"}))
    with pytest.raises(ValueError, match="MS_ROTARY_ARCH='haswell'"):
        kernel_build.arch_flags({kernel_build.ARCH_ENV: "haswell"})


@pytest.mark.parametrize("conjugate", [True, False], ids=["grad", "forward"])
@pytest.mark.parametrize("cos_dtype", DTYPES)
@pytest.mark.parametrize("dy_dtype", DTYPES)
@pytest.mark.parametrize("mode", range(4))
def test_every_path_writes_the_numpy_kernels_bits(mode, dy_dtype, cos_dtype, conjugate):
    """The installed kernel (bf16 stores through the hardware conversion where the CPU has one, the rows' walk
    with or without prefetching) against the numpy kernel, in and out of place, on 1 and 3 threads, over rows
    whose results include fp32 subnormals (which that conversion would flush, and the kernel must not)."""
    from ms_rotary import numpy_kernel

    shape, (start, end) = (2, 5, 3, 144), (16, 144)  # a 128-lane slice: whole chunks, rows far enough to prefetch
    rng = np.random.default_rng(mode)
    values = rng.uniform(-2, 2, shape)
    values[:, 1] *= 3e-39  # whole rows of tiny values: their rotations are fp32 subnormals
    dy = bits_of(values, dy_dtype)
    cos = bits_of(rng.uniform(-1, 1, (1, shape[1], 1, end - start)), cos_dtype)
    sin = bits_of(rng.uniform(-1, 1, (1, shape[1], 1, end - start)), cos_dtype)
    with numpy_kernel.default_fp_environment():
        rotated = numpy_kernel.rotate(kernel_float32(dy, dy_dtype), kernel_float32(cos, cos_dtype),
                                      kernel_float32(sin, cos_dtype), mode, start, end, conjugate)
    expected = numpy_kernel.from_float32(rotated, dy_dtype)
    expected = expected.view(dy.dtype) if dy_dtype != "bfloat16" else expected
    if dy_dtype == "bfloat16":
        assert (expected[:, 1] & 0x7f80 == 0).sum() > 100  # subnormal results to round
    kernel = library.load(ms_rotary.compiled_kernel_path())
    for threads in (1, 3):
        in_place, out_of_place = dy.copy(), np.empty_like(dy)
        for out in (None, out_of_place):
            status = kernel.rotate(in_place.ctypes.data if out is None else dy.ctypes.data,
                                   None if out is None else out.ctypes.data, cos.ctypes.data, sin.ctypes.data,
                                   shape, cos.shape, sin.shape, dy_dtype, cos_dtype, cos_dtype, mode, start, end,
                                   conjugate, num_threads=threads)
            assert status == 0
        np.testing.assert_array_equal(in_place, expected)
        np.testing.assert_array_equal(out_of_place, expected)
