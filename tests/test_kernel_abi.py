"""The compiled kernel checks its own arguments: called directly (bypassing every Python check) with
inconsistent arguments it returns an error code and writes nothing; through MindSpore the code surfaces
as an exception."""
import ctypes

import numpy as np
import pytest

import ms_rotary
from ms_rotary import eager

SHAPE = ctypes.c_int64 * 4


def call(dy, cos, sin, mode=0, start=0, end=8, dy_dtype=b"float32", cos_dtype=b"float32", sin_dtype=b"float32",
         shapes=None, out=None):
    entry = eager._kernel_entry(ms_rotary.compiled_kernel_path())
    dy_shape, cos_shape, sin_shape = shapes or (dy.shape, cos.shape, sin.shape)
    return entry(dy.ctypes.data, None if out is None else out.ctypes.data, cos.ctypes.data, sin.ctypes.data,
                 SHAPE(*dy_shape), SHAPE(*cos_shape), SHAPE(*sin_shape), dy_dtype, cos_dtype, sin_dtype,
                 mode, start, end, 1, 1)


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    dy = rng.uniform(-1, 1, (2, 3, 2, 16)).astype(np.float32)
    cos = rng.uniform(-1, 1, (1, 3, 1, 8)).astype(np.float32)
    sin = rng.uniform(-1, 1, (1, 3, 1, 8)).astype(np.float32)
    return dy, cos, sin


BAD_CALLS = {  # name: (keyword overrides, expected status)
    "unknown dtype": (dict(dy_dtype=b"float64"), 3),
    "cos/sin dtype differ": (dict(sin_dtype=b"float16"), 4),
    "cos/sin shape differ": (dict(shapes=((2, 3, 2, 16), (1, 3, 1, 8), (1, 1, 1, 8))), 4),
    "no broadcast": (dict(shapes=((2, 3, 2, 16), (3, 3, 1, 8), (3, 3, 1, 8))), 5),
    "slice past D": (dict(start=10, end=18), 6),
    "reversed slice": (dict(start=8, end=0), 6),
    "negative start": (dict(start=-2, end=6), 6),
    "odd length": (dict(start=0, end=7), 7),
    "quarter length": (dict(mode=2, start=0, end=6), 7),
    "mode 4": (dict(mode=4), 8),
    "mode -1": (dict(mode=-1), 8),
    "D above 1024": (dict(shapes=((1, 1, 1, 2048), (1, 1, 1, 8), (1, 1, 1, 8))), 9),
    "cos length": (dict(start=0, end=4), 10),
    "negative dim": (dict(shapes=((2, -3, 2, 16), (1, 3, 1, 8), (1, 3, 1, 8))), 2),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_kernel_rejects_inconsistent_arguments(arrays, name):
    dy, cos, sin = arrays
    overrides, status = BAD_CALLS[name]
    before = dy.copy()
    assert call(dy, cos, sin, **overrides) == status
    np.testing.assert_array_equal(dy, before)
    assert eager.KERNEL_ERRORS[status]


def test_kernel_accepts_the_consistent_call(arrays):
    dy, cos, sin = arrays
    before = dy.copy()
    assert call(dy, cos, sin) == 0
    assert not np.array_equal(dy, before)


def test_kernel_error_surfaces_as_exception_through_mindspore(arrays, monkeypatch):
    """Python checks bypassed: the kernel's refusal still reaches the caller as an exception."""
    import mindspore as ms

    dy, cos, sin = (ms.Tensor(a) for a in arrays)
    op = ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8])
    monkeypatch.setattr(eager, "_checked_slice", lambda *args: (0, 4))  # lie about the slice
    before = dy.asnumpy().copy()
    with pytest.raises(eager.KernelError, match="cos/sin last dim differs from the slice length"):
        op(dy, cos, sin)
    np.testing.assert_array_equal(dy.asnumpy(), before)
