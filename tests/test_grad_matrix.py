"""InplacePartialRotaryMulGrad against the float64 reference: every mode x dy dtype x cos/sin dtype x
broadcast pattern x slice, on both backends, in PyNative (all) and GRAPH_MODE (every combination of mode,
dtypes and slice, cycling through the broadcast patterns)."""
import itertools

import mindspore as ms
import numpy as np
import pytest

import ms_rotary
from conftest import BACKENDS, BROADCASTS, DTYPES, TOLERANCE, cos_shape, random_tensor, to_float64
from reference import rotary_grad

DY_SHAPE = (2, 3, 2, 16)
# name: (partial_slice given to the op, the [start, end) it means)
SLICES = {
    "prefix": ([0, 8], (0, 8)),
    "middle": ([4, 12], (4, 12)),
    "tail": ([8, 16], (8, 16)),
    "full": ([0, 16], (0, 16)),
    "none": (None, (0, 8)),
    "empty": ([6, 6], (6, 6)),
}
DTYPE_PAIRS = list(itertools.product(DTYPES, DTYPES))


def check_against_reference(mode, dy_dtype, cos_dtype, pattern, slice_name, backend, seed):
    partial_slice, (start, end) = SLICES[slice_name]
    rng = np.random.default_rng(seed)
    dy, dy64 = random_tensor(rng, DY_SHAPE, dy_dtype)
    length = end - start if end > start else 4  # empty work ignores cos/sin's length
    cos, cos64 = random_tensor(rng, cos_shape(DY_SHAPE, pattern, length), cos_dtype)
    sin, sin64 = random_tensor(rng, cos_shape(DY_SHAPE, pattern, length), cos_dtype)
    op = ms_rotary.InplacePartialRotaryMulGrad(mode, partial_slice, backend=backend)
    out = op(dy, cos, sin)
    assert out is dy
    expected = rotary_grad(mode, dy64, cos64, sin64, start, end)
    tol = TOLERANCE[dy_dtype]
    np.testing.assert_allclose(to_float64(dy), expected, atol=tol, rtol=tol)
    # Outside the slice dy is exactly what it was.
    np.testing.assert_array_equal(to_float64(dy)[..., :start], dy64[..., :start])
    np.testing.assert_array_equal(to_float64(dy)[..., end:], dy64[..., end:])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("slice_name", SLICES)
@pytest.mark.parametrize("pattern", BROADCASTS)
@pytest.mark.parametrize("dy_dtype,cos_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("mode", range(4))
def test_pynative_matrix(mode, dy_dtype, cos_dtype, pattern, slice_name, backend):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    check_against_reference(mode, dy_dtype, cos_dtype, pattern, slice_name, backend, seed=mode * 7 + 1)


GRAPH_CASES = [
    (mode, dy_dtype, cos_dtype, BROADCASTS[i % len(BROADCASTS)], slice_name)
    for i, (mode, (dy_dtype, cos_dtype), slice_name) in enumerate(itertools.product(range(4), DTYPE_PAIRS, SLICES))
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode,dy_dtype,cos_dtype,pattern,slice_name", GRAPH_CASES)
def test_graph_matrix(mode, dy_dtype, cos_dtype, pattern, slice_name, backend):
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        check_against_reference(mode, dy_dtype, cos_dtype, pattern, slice_name, backend, seed=mode * 7 + 2)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("mode", range(4))
@pytest.mark.parametrize("dy_dtype,cos_dtype", DTYPE_PAIRS)
def test_backends_agree_bit_for_bit(mode, dy_dtype, cos_dtype):
    """Both backends compute in fp32 in the same order and round once: identical bits."""
    rng = np.random.default_rng(11)
    dy, _ = random_tensor(rng, (2, 5, 3, 32), dy_dtype)
    cos, _ = random_tensor(rng, (1, 5, 1, 24), cos_dtype)
    sin, _ = random_tensor(rng, (1, 5, 1, 24), cos_dtype)
    results = []
    for backend in BACKENDS:
        copy = dy.copy()
        ms_rotary.InplacePartialRotaryMulGrad(mode, [4, 28], backend=backend)(copy, cos, sin)
        results.append(copy.view(ms.int16 if copy.dtype != ms.float32 else ms.int32).asnumpy())
    np.testing.assert_array_equal(results[0], results[1])
