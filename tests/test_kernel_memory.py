"""The CPU kernel stays inside its tensors: built with AddressSanitizer/UBSan and run on buffers of exactly the
tensors' sizes (tests/kernel_memcheck.cc), on geometries that take each of its row paths, in place and out
of place, on one thread and two. Its outputs must also be the installed kernel's bits."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import ms_rotary
from ms_rotary import eager
from test_kernel_builds import DTYPES, bits_of, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SANITIZE = ["-g", "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
# name: (dy shape, slice, cos/sin broadcast shape). The in-place kernel reads rows at most 3x their slice
# whole (so their last row ends at the buffer's last byte) and prefetches the slices of sparser rows.
GEOMETRIES = {
    "rows read whole": ((2, 3, 2, 24), (8, 24), (1, 3, 1)),
    "rows 3x the slice": ((2, 3, 2, 48), (32, 48), (2, 3, 2)),
    "slices prefetched": ((2, 5, 2, 80), (4, 20), (1, 5, 1)),
    "64-lane slice, whole rows": ((1, 4, 3, 96), (32, 96), (1, 4, 1)),
    "slice = row": ((2, 3, 2, 16), (0, 16), (2, 1, 1)),
}

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the checked kernel")


@pytest.fixture(scope="module")
def memcheck(tmp_path_factory):
    binary = str(tmp_path_factory.mktemp("kernel_memcheck") / "kernel_memcheck")
    kernel_dir = os.path.join(ROOT, "kernel", "cpu")
    subprocess.run(["g++", "-std=c++17", "-pthread", "-ffp-contract=off", *SANITIZE, "-I", kernel_dir,
                    os.path.join(ROOT, "tests", "kernel_memcheck.cc"), os.path.join(kernel_dir, "rotary_kernel.cc"),
                    "-o", binary], check=True)
    return binary


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("conjugate", [True, False], ids=["grad", "forward"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", range(4))
def test_kernel_stays_inside_its_buffers(memcheck, tmp_path, mode, dtype, conjugate, geometry, threads):
    shape, (start, end), cos_axes = GEOMETRIES[geometry]
    rng = np.random.default_rng(mode)
    dy = bits_of(rng.uniform(-2, 2, shape), dtype)
    cos = bits_of(rng.uniform(-1, 1, cos_axes + (end - start,)), dtype)
    sin = bits_of(rng.uniform(-1, 1, cos_axes + (end - start,)), dtype)
    (tmp_path / "in").write_bytes(dy.tobytes() + cos.tobytes() + sin.tobytes())
    args = [dtype, dtype, mode, start, end, int(conjugate), threads, *shape, *cos_axes, tmp_path / "in",
            tmp_path / "out"]
    checked = subprocess.run([memcheck, *map(str, args)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr[-3000:]

    expected = dy.copy()
    run(eager._kernel_entry(ms_rotary.compiled_kernel_path()), expected, cos, sin, (dtype, dtype), mode, start, end,
        conjugate)
    outputs = np.frombuffer((tmp_path / "out").read_bytes(), dtype=dy.dtype).reshape((2,) + shape)
    np.testing.assert_array_equal(outputs[0], expected)  # in place
    np.testing.assert_array_equal(outputs[1], expected)  # out of place
    assert not np.array_equal(expected, dy)
