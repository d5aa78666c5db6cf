"""InplacePartialRotaryMulGrad against the float64 reference: every mode x dy dtype x cos/sin dtype x slice,
cycling through the broadcast patterns, on both backends, in PyNative (plus wide slices) and GRAPH_MODE.
`pytest -m slow` runs the full product with every broadcast pattern in PyNative."""
import itertools

import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, BROADCASTS, DTYPES, TOLERANCE, cos_shape, cycled_cases, pairs, random_tensor, to_float64
from reference import rotary_grad

import ms_rotary

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
# A wider head: the CPU kernel rotates a register of pairs at a time (16 on AVX-512), then single pairs
# (per half in quarter mode); these slices run both paths, from aligned and odd starts, and 64 lanes its
# fixed-width path.
WIDE_SHAPE = (2, 3, 2, 80)
WIDE_SLICES = {
    "two chunks": ([0, 64], (0, 64)),
    "chunks and tail, odd start": ([3, 75], (3, 75)),
    "full": ([0, 80], (0, 80)),
}
DTYPE_PAIRS = list(itertools.product(DTYPES, DTYPES))


def check_against_reference(mode, dy_dtype, cos_dtype, pattern, slice_name, backend, seed, dy_shape=DY_SHAPE,
                            slices=SLICES):
    partial_slice, (start, end) = slices[slice_name]
    rng = np.random.default_rng(seed)
    dy, dy64 = random_tensor(rng, dy_shape, dy_dtype)
    length = end - start if end > start else 4  # empty work ignores cos/sin's length
    cos, cos64 = random_tensor(rng, cos_shape(dy_shape, pattern, length), cos_dtype)
    sin, sin64 = random_tensor(rng, cos_shape(dy_shape, pattern, length), cos_dtype)
    op = ms_rotary.InplacePartialRotaryMulGrad(mode, partial_slice, backend=backend)
    out = op(dy, cos, sin)
    assert out is dy
    expected = rotary_grad(mode, dy64, cos64, sin64, start, end)
    tol = TOLERANCE[dy_dtype]
    np.testing.assert_allclose(to_float64(dy), expected, atol=tol, rtol=tol)
    # Outside the slice dy is exactly what it was.
    np.testing.assert_array_equal(to_float64(dy)[..., :start], dy64[..., :start])
    np.testing.assert_array_equal(to_float64(dy)[..., end:], dy64[..., end:])


@pytest.mark.parametrize("mode,dy_dtype,cos_dtype,slice_name,backend,pattern",
                         cycled_cases([range(4), pairs(DTYPES, DTYPES), SLICES, BACKENDS], [BROADCASTS]))
def test_pynative_matrix(mode, dy_dtype, cos_dtype, pattern, slice_name, backend):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    check_against_reference(mode, dy_dtype, cos_dtype, pattern, slice_name, backend, seed=mode * 7 + 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("slice_name", WIDE_SLICES)
@pytest.mark.parametrize("dy_dtype,cos_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("mode", range(4))
def test_pynative_wide_slices(mode, dy_dtype, cos_dtype, slice_name, backend):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    pattern = BROADCASTS[(mode + len(slice_name)) % len(BROADCASTS)]
    check_against_reference(mode, dy_dtype, cos_dtype, pattern, slice_name, backend, seed=mode * 7 + 3,
                            dy_shape=WIDE_SHAPE, slices=WIDE_SLICES)


@pytest.mark.parametrize("mode,dy_dtype,cos_dtype,backend,slice_name,pattern",
                         cycled_cases([range(4), pairs(DTYPES, DTYPES)], [BACKENDS, SLICES, BROADCASTS]))
def test_graph_matrix(mode, dy_dtype, cos_dtype, pattern, slice_name, backend):
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        check_against_reference(mode, dy_dtype, cos_dtype, pattern, slice_name, backend, seed=mode * 7 + 2)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("op_class", [ms_rotary.InplacePartialRotaryMulGrad, ms_rotary.InplacePartialRotaryMul])
@pytest.mark.parametrize("start,end", [(4, 28), (3, 75)])
@pytest.mark.parametrize("mode", range(4))
@pytest.mark.parametrize("dy_dtype,cos_dtype", DTYPE_PAIRS)
def test_backends_agree_bit_for_bit(mode, dy_dtype, cos_dtype, start, end, op_class):
    """Both backends compute in fp32 in the same order and round once: identical bits."""
    rng = np.random.default_rng(11)
    dy, _ = random_tensor(rng, (2, 5, 3, 80), dy_dtype)
    cos, _ = random_tensor(rng, (1, 5, 1, end - start), cos_dtype)
    sin, _ = random_tensor(rng, (1, 5, 1, end - start), cos_dtype)
    results = []
    for backend in BACKENDS:
        copy = dy.copy()
        op_class(mode, [start, end], backend=backend)(copy, cos, sin)
        results.append(copy.view(ms.int16 if copy.dtype != ms.float32 else ms.int32).asnumpy())
    np.testing.assert_array_equal(results[0], results[1])
