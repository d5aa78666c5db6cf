"""The CPU kernel stays inside its tensors: built with AddressSanitizer/UBSan, for this machine's SIMD width (as
installed) and for SSE2, and run on buffers of exactly the tensors' sizes (tests/kernel_memcheck.cc), on
geometries that take each of its row paths, in place and out of place, on one thread and two. Its outputs
must also be the installed kernel's bits."""
import subprocess

import builds
import numpy as np
import pytest
from conftest import DTYPES
from conftest import kernel_bits as bits_of
from conftest import run_kernel as run

import ms_rotary
from ms_rotary import library

# name: (dy shape, slice, cos/sin broadcast shape). The in-place kernel reads rows at most 3x their slice
# whole (so their last row ends at the buffer's last byte) and prefetches the slices of sparser rows; slices
# of 8 pairs are all tail at every SIMD width, 20 and 36 pairs fill 16-pair chunks and leave a tail.
GEOMETRIES = {
    "rows read whole": ((2, 3, 2, 24), (8, 24), (1, 3, 1)),
    "rows 3x the slice": ((2, 3, 2, 48), (32, 48), (2, 3, 2)),
    "chunks and a tail, rows read whole": ((2, 3, 2, 104), (2, 74), (1, 3, 1)),
    "chunks and a tail, slices prefetched": ((2, 5, 2, 160), (4, 44), (1, 5, 1)),
    "64-lane slice, rows read whole": ((1, 4, 3, 96), (32, 96), (1, 4, 1)),
    "slice = row": ((2, 3, 2, 16), (0, 16), (2, 1, 1)),
}
# The norm's own path for whole heads of 64, 128 or 256 lanes (rotary_rows.h, norm_rotate_whole_rows), which
# loads each next row ahead of the one it writes.
NORM_GEOMETRIES = {name: GEOMETRIES[name] for name in ("chunks and a tail, slices prefetched",
                                                       "64-lane slice, rows read whole")}
NORM_GEOMETRIES["whole 64-lane heads"] = ((2, 3, 3, 64), (0, 64), (1, 3, 1))

pytestmark = pytest.mark.skipif(not builds.HAVE_COMPILER, reason="needs g++ to build the checked kernel")


@pytest.fixture(scope="module", params=builds.MEMCHECK_ARCHES)
def memcheck(request):
    return builds.built(f"memcheck {request.param}")


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("conjugate", [True, False], ids=["grad", "forward"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", range(4))
def test_kernel_stays_inside_its_buffers(memcheck, tmp_path, mode, dtype, conjugate, geometry):
    shape, (start, end), cos_axes = GEOMETRIES[geometry]
    rng = np.random.default_rng(mode)
    dy = bits_of(rng.uniform(-2, 2, shape), dtype)
    cos = bits_of(rng.uniform(-1, 1, cos_axes + (end - start,)), dtype)
    sin = bits_of(rng.uniform(-1, 1, cos_axes + (end - start,)), dtype)
    (tmp_path / "in").write_bytes(dy.tobytes() + cos.tobytes() + sin.tobytes())
    args = [dtype, dtype, mode, start, end, int(conjugate), *shape, *cos_axes, tmp_path / "in", tmp_path / "out"]
    checked = subprocess.run([memcheck, *map(str, args)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr[-3000:]

    expected = dy.copy()
    run(library.load(ms_rotary.compiled_kernel_path()), expected, cos, sin, (dtype, dtype), mode, start, end,
        conjugate)
    outputs = np.frombuffer((tmp_path / "out").read_bytes(), dtype=dy.dtype).reshape((4,) + shape)
    for output in outputs:  # in place and out of place, on 1 thread and on 2
        np.testing.assert_array_equal(output, expected)
    assert not np.array_equal(expected, dy)


@pytest.mark.parametrize("geometry", NORM_GEOMETRIES)
@pytest.mark.parametrize("mode", range(4))
def test_the_head_norm_stays_inside_its_buffers(memcheck, tmp_path, mode, geometry):
    """The norm's forward (in place and out of place) and backward (dx and the weight's gradient) read and write
    only their tensors (and a weight of exactly D floats), on one thread and on two; the dtypes cycle."""
    shape, (start, end), cos_axes = NORM_GEOMETRIES[geometry]
    dtype = list(DTYPES)[mode % 3]
    rng = np.random.default_rng(mode)
    dy = bits_of(rng.uniform(-2, 2, shape), dtype)
    cos, sin = (bits_of(rng.uniform(-1, 1, cos_axes + (end - start,)), dtype) for _ in range(2))
    (tmp_path / "in").write_bytes(dy.tobytes() + cos.tobytes() + sin.tobytes())
    args = [dtype, dtype, mode, start, end, 0, *shape, *cos_axes, tmp_path / "in", tmp_path / "out", "norm"]
    checked = subprocess.run([memcheck, *map(str, args)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr[-3000:]
