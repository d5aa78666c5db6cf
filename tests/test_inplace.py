"""In place means in place: the caller's tensor (same object, same memory) holds dx on the slice and is
bit-identical elsewhere, in PyNative (views included) and inside graphs, where reads before and after
the call see the old and new values."""
import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, random_tensor, raw_bits, to_float64
from mindspore import nn
from reference import rotary_grad

import ms_rotary


def _special_values_outside(dy_np, start, end):
    """NaN, +-inf, -0.0 and denormals outside the slice: any rewrite there would show in the bits."""
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, -3e-39], np.float32)
    flat = dy_np.reshape(-1, dy_np.shape[-1])
    for row in range(flat.shape[0]):
        flat[row, :start] = np.resize(specials, start)
        flat[row, end:] = np.resize(specials[::-1], flat.shape[1] - end)
    return dy_np


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [ms.float32, ms.float16, ms.bfloat16])
def test_pynative_same_object_same_memory_and_untouched_bytes(backend, dtype):
    rng = np.random.default_rng(3)
    start, end = 6, 14
    dy_np = _special_values_outside(rng.uniform(-1, 1, (2, 3, 4, 20)).astype(np.float32), start, end)
    dy = ms.Tensor(dy_np, dtype)
    bits_before = raw_bits(dy)
    pointer = dy.data_ptr()
    cos, _ = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, _ = random_tensor(rng, (1, 3, 1, 8), "float32")
    out = ms_rotary.InplacePartialRotaryMulGrad("interleave", [start, end], backend=backend)(dy, cos, sin)
    assert out is dy and dy.data_ptr() == pointer
    bits_after = raw_bits(dy)
    width = bits_after.shape[-1] // 20  # bytes (or int16 words) per element
    np.testing.assert_array_equal(bits_after[..., :start * width], bits_before[..., :start * width])
    np.testing.assert_array_equal(bits_after[..., end * width:], bits_before[..., end * width:])
    assert not np.array_equal(bits_after[..., start * width:end * width], bits_before[..., start * width:end * width])


VIEWS = {
    "reshape of an op output": lambda base: (base * 1).reshape(2, 3, 4, 16),
    "view": lambda base: base.view(2, 3, 4, 16),
    "slice with offset": lambda base: base.view(2, 3, 4, 16)[1:2],
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make_view", VIEWS.values(), ids=list(VIEWS))
def test_pynative_writes_through_views(backend, make_view):
    """q = linear(x).reshape(...) is a view in PyNative: the write must land in the shared memory."""
    rng = np.random.default_rng(4)
    base, _ = random_tensor(rng, (2, 3, 64), "float32")
    dy = make_view(base)
    dy64 = to_float64(dy)
    cos, cos64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    ms_rotary.InplacePartialRotaryMulGrad(0, [4, 12], backend=backend)(dy, cos, sin)
    np.testing.assert_allclose(to_float64(dy), rotary_grad(0, dy64, cos64, sin64, 4, 12), rtol=1e-5, atol=1e-5)


class ReadsAround(nn.Cell):
    """Reads dy before and after the in-place call inside one graph."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, dy, cos, sin):
        before = dy * 1.0
        self.op(dy, cos, sin)
        after = dy * 1.0
        return before, after


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("compile_with", ["GRAPH_MODE", "ms.jit", "pynative"])
def test_reads_before_and_after_see_old_and_new(backend, compile_with):
    rng = np.random.default_rng(5)
    dy, dy64 = random_tensor(rng, (2, 4, 2, 16), "float32")
    cos, cos64 = random_tensor(rng, (2, 4, 1, 16), "float32")
    sin, sin64 = random_tensor(rng, (2, 4, 1, 16), "float32")
    cell = ReadsAround(ms_rotary.InplacePartialRotaryMulGrad(3, [0, 16], backend=backend))
    try:
        if compile_with == "GRAPH_MODE":
            ms.set_context(mode=ms.GRAPH_MODE)
            before, after = cell(dy, cos, sin)
        elif compile_with == "ms.jit":
            before, after = ms.jit(cell.construct)(dy, cos, sin)
        else:
            before, after = cell(dy, cos, sin)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    expected = rotary_grad(3, dy64, cos64, sin64, 0, 16)
    np.testing.assert_array_equal(before.asnumpy(), dy64.astype(np.float32))
    np.testing.assert_allclose(after.asnumpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_float64(dy), expected, rtol=1e-5, atol=1e-5)  # the caller's tensor


def test_graph_mode_returns_the_callers_tensor(exec_mode, backend):
    rng = np.random.default_rng(6)
    dy, _ = random_tensor(rng, (1, 2, 2, 8), "float16")
    cos, _ = random_tensor(rng, (1, 2, 1, 8), "float16")
    sin, _ = random_tensor(rng, (1, 2, 1, 8), "float16")
    pointer = dy.data_ptr()
    out = ms_rotary.InplacePartialRotaryMulGrad(1, None, backend=backend)(dy, cos, sin)
    assert out is dy and out.data_ptr() == pointer


@pytest.mark.parametrize("backend", BACKENDS)
def test_instances_keep_their_own_attributes(exec_mode, backend):
    """Attribute values are per instance even though all instances share one kernel entry point."""
    rng = np.random.default_rng(7)
    cos, cos64 = random_tensor(rng, (1, 2, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (1, 2, 1, 8), "float32")
    ops_by_mode = {mode: ms_rotary.InplacePartialRotaryMulGrad(mode, [0, 8], backend=backend) for mode in range(4)}
    for mode in (0, 1, 2, 3, 1, 0):
        dy, dy64 = random_tensor(rng, (2, 2, 3, 8), "float32")
        ops_by_mode[mode](dy, cos, sin)
        np.testing.assert_allclose(to_float64(dy), rotary_grad(mode, dy64, cos64, sin64, 0, 8), rtol=1e-5, atol=1e-5)


EMPTY_CASES = {
    "start == end": ((2, 2, 2, 8), (1, 2, 1, 4), [4, 4]),
    "zero batch": ((0, 2, 2, 8), (1, 2, 1, 8), [0, 8]),
    "zero-sized cos": ((2, 2, 2, 8), (1, 0, 1, 8), [0, 8]),
}


@pytest.mark.parametrize("case", EMPTY_CASES.values(), ids=list(EMPTY_CASES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_work_is_a_no_op(case, backend):
    dy_shape, cos_shape, partial_slice = case
    rng = np.random.default_rng(8)
    dy, _ = random_tensor(rng, dy_shape, "float32")
    cos, _ = random_tensor(rng, cos_shape, "float32")
    sin, _ = random_tensor(rng, cos_shape, "float32")
    before = dy.asnumpy().copy()
    out = ms_rotary.InplacePartialRotaryMulGrad(0, partial_slice, backend=backend)(dy, cos, sin)
    assert out is dy
    np.testing.assert_array_equal(dy.asnumpy(), before)
