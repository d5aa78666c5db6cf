"""Each class of bad input raises ValueError/TypeError naming the argument, the value and the rule, in
PyNative and GRAPH_MODE, on both backends, and leaves dy bit-identical."""
import mindspore as ms
import numpy as np
import pytest
from conftest import random_tensor, raw_bits

import ms_rotary

DY_SHAPE = (2, 3, 2, 16)


def _inputs(rng, dy_shape=DY_SHAPE, cos_shape=(1, 3, 1, 8), dy_dtype="float32", cos_dtype="float32",
            sin_dtype=None, sin_shape=None):
    dy, _ = random_tensor(rng, dy_shape, dy_dtype)
    cos, _ = random_tensor(rng, cos_shape, cos_dtype)
    sin, _ = random_tensor(rng, sin_shape or cos_shape, sin_dtype or cos_dtype)
    return dy, cos, sin


# name: (rotary_mode, partial_slice, input overrides, error type, fragments the message must contain)
CALL_ERRORS = {
    "dy 3-D": (0, [0, 8], dict(dy_shape=(3, 2, 16)), ValueError, ["dy", "4-D", "(3, 2, 16)"]),
    "dy 5-D": (0, [0, 8], dict(dy_shape=(1, 2, 3, 2, 16)), ValueError, ["dy", "4-D"]),
    "cos 3-D": (0, [0, 8], dict(cos_shape=(3, 1, 8)), ValueError, ["cos", "4-D", "(3, 1, 8)"]),
    "D above 1024": (0, [0, 8], dict(dy_shape=(1, 1, 1, 1040), cos_shape=(1, 1, 1, 8)), ValueError,
                     ["1040", "1024"]),
    "slice past D": (0, [8, 24], dict(), ValueError, ["partial_slice=[8, 24]", "D=16"]),
    "odd length": (1, [3, 8], dict(cos_shape=(1, 3, 1, 5)), ValueError, ["partial_slice=[3, 8]", "length 5", "by 2"]),
    "quarter needs 4": (2, [0, 6], dict(cos_shape=(1, 3, 1, 6)), ValueError, ["length 6", "divisible by 4"]),
    "cos/sin shape mismatch": (0, [0, 8], dict(sin_shape=(1, 1, 1, 8)), ValueError,
                               ["cos", "sin", "(1, 3, 1, 8)", "(1, 1, 1, 8)"]),
    "broadcast": (0, [0, 8], dict(cos_shape=(3, 3, 1, 8)), ValueError, ["axis B is 3", "1 or 2"]),
    "cos length": (0, [0, 8], dict(cos_shape=(1, 3, 1, 6)), ValueError, ["last dim is 6", "length 8"]),
    "cos/sin dtype mismatch": (0, [0, 8], dict(sin_dtype="float16"), TypeError, ["cos", "sin", "float32", "float16"]),
}


@pytest.mark.parametrize("name", CALL_ERRORS)
def test_bad_call_raises_and_leaves_dy_untouched(name, exec_mode, backend):
    rotary_mode, partial_slice, overrides, error, fragments = CALL_ERRORS[name]
    dy, cos, sin = _inputs(np.random.default_rng(1), **overrides)
    before = raw_bits(dy)
    op = ms_rotary.InplacePartialRotaryMulGrad(rotary_mode, partial_slice, backend=backend)
    with pytest.raises(error) as info:
        op(dy, cos, sin)
    for fragment in fragments:
        assert fragment in str(info.value)
    np.testing.assert_array_equal(raw_bits(dy), before)


@pytest.mark.parametrize("dtype,name", [(ms.float64, "float64"), (ms.int32, "int32"), (ms.float16, None)])
@pytest.mark.parametrize("argument", ["dy", "cos"])
def test_unsupported_dtypes(dtype, name, argument, exec_mode, backend):
    rng = np.random.default_rng(2)
    dy, cos, sin = _inputs(rng)
    if name is None:  # float16 is supported: the same call must succeed
        dtype, name = ms.float64, "float64"
    if argument == "dy":
        dy = ms.Tensor(dy.asnumpy(), dtype)
    else:
        cos, sin = ms.Tensor(cos.asnumpy(), dtype), ms.Tensor(sin.asnumpy(), dtype)
    before = dy.asnumpy().copy()
    with pytest.raises(TypeError, match=f"{argument} has dtype {name}"):
        ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8], backend=backend)(dy, cos, sin)
    np.testing.assert_array_equal(dy.asnumpy(), before)


@pytest.mark.parametrize("argument", ["dy", "cos", "sin"])
@pytest.mark.parametrize("value", [[1.0, 2.0], np.ones((2, 3, 2, 16), np.float32), 3.0], ids=["list", "numpy", "float"])
def test_non_tensor_arguments(argument, value, exec_mode, backend):
    dy, cos, sin = _inputs(np.random.default_rng(3))
    args = {"dy": dy, "cos": cos, "sin": sin}
    args[argument] = value
    with pytest.raises(TypeError, match=f"{argument} must be a mindspore.Tensor, got {type(value).__name__}"):
        ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8], backend=backend)(args["dy"], args["cos"], args["sin"])


def test_non_contiguous_dy(backend):
    rng = np.random.default_rng(4)
    base, _ = random_tensor(rng, (2, 2, 3, 16), "float32")
    dy = base.swapaxes(1, 2)  # a non-contiguous view of shape (2, 3, 2, 16)
    _, cos, sin = _inputs(rng)
    before = base.asnumpy().copy()
    with pytest.raises(ValueError, match="dy must be contiguous"):
        ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8], backend=backend)(dy, cos, sin)
    np.testing.assert_array_equal(base.asnumpy(), before)


def test_cos_aliasing_dy(backend):
    rng = np.random.default_rng(5)
    dy, _, sin = _inputs(rng, cos_shape=(2, 3, 2, 16), dy_shape=(2, 3, 2, 16))
    before = dy.asnumpy().copy()
    with pytest.raises(ValueError, match="cos shares memory with dy"):
        ms_rotary.InplacePartialRotaryMulGrad(0, [0, 16], backend=backend)(dy, dy, sin)
    np.testing.assert_array_equal(dy.asnumpy(), before)


@pytest.mark.parametrize("rotary_mode,error,fragment", [
    (4, ValueError, "rotary_mode=4 is out of range"),
    (-1, ValueError, "rotary_mode=-1 is out of range"),
    ("spiral", ValueError, "rotary_mode='spiral' is not a mode name"),
    (True, TypeError, "got True of type bool"),
    (1.0, TypeError, "got 1.0 of type float"),
])
def test_bad_mode_is_refused_at_construction(rotary_mode, error, fragment):
    with pytest.raises(error, match=fragment):
        ms_rotary.InplacePartialRotaryMulGrad(rotary_mode, [0, 8])


@pytest.mark.parametrize("partial_slice,error,fragment", [
    ([8, 4], ValueError, r"partial_slice=\[8, 4\] is invalid; need 0 <= start <= end"),
    ([-2, 4], ValueError, r"partial_slice=\[-2, 4\] is invalid"),
    ([0, 4, 8], TypeError, "must be None or"),
    ("0:8", TypeError, "must be None or"),
    ([0.0, 8], TypeError, "must hold ints"),
])
def test_bad_slice_is_refused_at_construction(partial_slice, error, fragment):
    with pytest.raises(error, match=fragment):
        ms_rotary.InplacePartialRotaryMulGrad(0, partial_slice)


def test_mode_names_equal_numbers():
    for number, name in enumerate(ms_rotary.MODE_NAMES):
        assert ms_rotary.InplacePartialRotaryMulGrad(name, [0, 8]).rotary_mode == number


def test_bad_backend_name():
    with pytest.raises(ValueError, match="backend='cuda' is not a backend"):
        ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8], backend="cuda")
