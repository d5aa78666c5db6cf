"""Autograd of the forward ops calls the grad kernel: grad-of-forward equals InplacePartialRotaryMulGrad
and the float64 reference, in PyNative, ms.jit and GRAPH_MODE; dout shared with another consumer is
never written; cos/sin gradients when asked; a GRAPH_MODE TrainOneStepCell step."""

import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, DTYPES, TOLERANCE, cycled_cases, pairs, random_tensor, to_float64
from mindspore import nn
from reference import rotary_forward, rotary_grad

import ms_rotary

SHAPE = (2, 3, 2, 16)
SLICE = (4, 12)


def test_reference_backward_is_the_transpose_of_the_reference_forward():
    """Checks the reference itself: <R x, w> == <x, R^T w> for random x, w in every mode."""
    rng = np.random.default_rng(0)
    for mode in range(4):
        x, w = rng.standard_normal(SHAPE), rng.standard_normal(SHAPE)
        cos, sin = rng.standard_normal((1, 3, 1, 8)), rng.standard_normal((1, 3, 1, 8))
        lhs = np.sum(rotary_forward(mode, x, cos, sin, *SLICE) * w)
        rhs = np.sum(x * rotary_grad(mode, w, cos, sin, *SLICE))
        assert abs(lhs - rhs) < 1e-9 * max(1.0, abs(lhs))


def _loss_fn(op):
    def loss(x, cos, sin, w):
        # x * 1.0: the in-place op must not write the caller's x; fp32 sum: CPU has no bf16 reduce.
        return (op(x * 1.0, cos, sin).astype(ms.float32) * w.astype(ms.float32)).sum()
    return loss


# (dy shape, slice): narrow runs the CPU kernel's single-pair path only; wide (36 pairs, odd start) also
# runs its 16-pair chunks, where in-place mode 3 stores after rotating and out-of-place stores per chunk;
# width 64 runs the fixed-width path, which holds in-place mode 3's chunks in registers instead.
GEOMETRIES = {"narrow": (SHAPE, SLICE), "wide": ((2, 3, 2, 80), (3, 75)), "width 64": ((2, 3, 2, 80), (8, 72))}


@pytest.mark.parametrize("op_class,mode,dtype,cos_dtype,geometry,backend", cycled_cases(
    [[ms_rotary.InplacePartialRotaryMul, ms_rotary.PartialRotaryMul], range(4), pairs(DTYPES, DTYPES)],
    [list(GEOMETRIES), BACKENDS]))
def test_grad_of_forward_is_the_grad_op(op_class, mode, dtype, cos_dtype, geometry, backend):
    shape, (start, end) = GEOMETRIES[geometry]
    rng = np.random.default_rng(mode)
    x, x64 = random_tensor(rng, shape, dtype)
    w, w64 = random_tensor(rng, shape, dtype)
    cos, cos64 = random_tensor(rng, (1, shape[1], 1, end - start), cos_dtype)
    sin, sin64 = random_tensor(rng, (1, shape[1], 1, end - start), cos_dtype)
    value, grad_x = ms.value_and_grad(_loss_fn(op_class(mode, [start, end], backend=backend)))(x, cos, sin, w)
    np.testing.assert_array_equal(to_float64(x), x64)  # the caller's x is kept (the op rotated a copy)
    dy = w.copy()
    ms_rotary.InplacePartialRotaryMulGrad(mode, [start, end], backend=backend)(dy, cos, sin)
    np.testing.assert_array_equal(grad_x.asnumpy(), dy.asnumpy())  # same kernel, same bits
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(to_float64(grad_x), rotary_grad(mode, w64, cos64, sin64, start, end), rtol=tol,
                               atol=tol)
    expected_value = np.sum(rotary_forward(mode, x64, cos64, sin64, start, end) * w64)
    np.testing.assert_allclose(float(value.float().asnumpy()), expected_value, rtol=tol * 20, atol=tol * 20)


class SharedDout(nn.Cell):
    """y = rope(x) + u: autograd hands the same dout to the rope bprop and to u's gradient."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x, u, cos, sin, w):
        return ((self.op(x * 1.0, cos, sin) + u) * w).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op_class", [ms_rotary.InplacePartialRotaryMul, ms_rotary.PartialRotaryMul])
@pytest.mark.parametrize("run_as", ["pynative", "ms.jit", "GRAPH_MODE"])
def test_dout_shared_with_another_consumer_is_not_written(run_as, op_class, backend):
    rng = np.random.default_rng(9)
    x, _ = random_tensor(rng, SHAPE, "float32")
    u, _ = random_tensor(rng, SHAPE, "float32")
    w, w64 = random_tensor(rng, SHAPE, "float32")
    cos, cos64 = random_tensor(rng, (2, 3, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (2, 3, 1, 8), "float32")
    net = SharedDout(op_class(1, list(SLICE), backend=backend))
    grad_fn = ms.grad(net, grad_position=(0, 1))
    try:
        if run_as == "GRAPH_MODE":
            ms.set_context(mode=ms.GRAPH_MODE)
        elif run_as == "ms.jit":
            grad_fn = ms.jit(grad_fn)
        grad_x, grad_u = grad_fn(x, u, cos, sin, w)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_array_equal(grad_u.asnumpy(), w.asnumpy())
    np.testing.assert_allclose(grad_x.asnumpy(), rotary_grad(1, w64, cos64, sin64, *SLICE), rtol=1e-5, atol=1e-5)


def _numeric_cos_sin_grads(op_class, mode, x64, w64, cos64, sin64):
    """Central differences of sum(op(x) * w) in float64 (the loss is linear in cos and sin)."""
    apply = rotary_grad if op_class is ms_rotary.InplacePartialRotaryMulGrad else rotary_forward
    grads = []
    for which in ("cos", "sin"):
        grad = np.zeros_like(cos64)
        for index in np.ndindex(*cos64.shape):
            step = np.zeros_like(cos64)
            step[index] = 1e-3
            c_plus, s_plus = (cos64 + step, sin64) if which == "cos" else (cos64, sin64 + step)
            c_minus, s_minus = (cos64 - step, sin64) if which == "cos" else (cos64, sin64 - step)
            plus = np.sum(apply(mode, x64, c_plus, s_plus, *SLICE) * w64)
            minus = np.sum(apply(mode, x64, c_minus, s_minus, *SLICE) * w64)
            grad[index] = (plus - minus) / 2e-3
        grads.append(grad)
    return grads


ALL_OPS = [ms_rotary.InplacePartialRotaryMul, ms_rotary.PartialRotaryMul, ms_rotary.InplacePartialRotaryMulGrad]


@pytest.mark.parametrize("op_class,mode,pattern_shape,backend", cycled_cases(
    [ALL_OPS, range(4)], [[(1, 3, 1, 8), (2, 1, 2, 8), (2, 3, 2, 8)], BACKENDS]))
def test_cos_sin_gradients_match_finite_differences(mode, pattern_shape, op_class, backend, exec_mode):
    """cos/sin gradients, summed over their broadcast axes, for every op: from the target's kernel in
    PyNative, from MindSpore ops in graphs."""
    rng = np.random.default_rng(mode + 20)
    x, x64 = random_tensor(rng, SHAPE, "float32")
    w, w64 = random_tensor(rng, SHAPE, "float32")
    cos, cos64 = random_tensor(rng, pattern_shape, "float32")
    sin, sin64 = random_tensor(rng, pattern_shape, "float32")
    op = op_class(mode, list(SLICE), backend=backend)
    grad_cos, grad_sin = ms.grad(_loss_fn(op), grad_position=(1, 2))(x, cos, sin, w)
    expected_cos, expected_sin = _numeric_cos_sin_grads(op_class, mode, x64, w64, cos64, sin64)
    np.testing.assert_allclose(grad_cos.asnumpy(), expected_cos, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grad_sin.asnumpy(), expected_sin, rtol=1e-4, atol=1e-4)


def test_functional_form_keeps_x():
    rng = np.random.default_rng(31)
    x, x64 = random_tensor(rng, SHAPE, "bfloat16")
    cos, cos64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    y = ms_rotary.partial_rotary_mul(x, cos, sin, rotary_mode="interleave-half", partial_slice=list(SLICE))
    np.testing.assert_array_equal(to_float64(x), x64)
    np.testing.assert_allclose(to_float64(y), rotary_forward(3, x64, cos64, sin64, *SLICE), rtol=4e-3, atol=4e-3)


class RopeRegression(nn.Cell):
    """linear -> reshape to BSND -> in-place rotary forward -> projection: a training step touches every piece."""

    def __init__(self, mode):
        super().__init__()
        self.proj = nn.Dense(16, 32, has_bias=False)
        self.rope = ms_rotary.InplacePartialRotaryMul(mode, [0, 8])
        self.head = nn.Dense(32, 1, has_bias=False)

    def construct(self, x, cos, sin, target):
        b, s, _ = x.shape
        q = self.proj(x).reshape(b, s, 2, 16)
        q = self.rope(q, cos, sin)
        pred = self.head(q.reshape(b, s, 32))
        return ((pred - target) ** 2).mean()


@pytest.mark.parametrize("mode", range(4))
def test_train_one_step_cell_graph_mode_matches_pynative(mode):
    rng = np.random.default_rng(40 + mode)
    x, _ = random_tensor(rng, (2, 3, 16), "float32")
    target, _ = random_tensor(rng, (2, 3, 1), "float32")
    cos, _ = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, _ = random_tensor(rng, (1, 3, 1, 8), "float32")
    ms.set_seed(mode)
    nets = [RopeRegression(mode) for _ in range(2)]
    nets[1].proj.weight.set_data(nets[0].proj.weight.value().copy())
    nets[1].head.weight.set_data(nets[0].head.weight.value().copy())
    # PyNative: explicit gradients and SGD by hand.
    grads = ms.grad(nets[0], grad_position=None, weights=nets[0].trainable_params())(x, cos, sin, target)
    expected = [p.asnumpy() - 0.1 * g.asnumpy() for p, g in zip(nets[0].trainable_params(), grads)]
    # GRAPH_MODE: TrainOneStepCell.
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        step = nn.TrainOneStepCell(nets[1], nn.SGD(nets[1].trainable_params(), learning_rate=0.1))
        step(x, cos, sin, target)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert any(np.abs(g.asnumpy()).max() > 0 for g in grads)
    for param, want in zip(nets[1].trainable_params(), expected):
        np.testing.assert_allclose(param.asnumpy(), want, rtol=1e-5, atol=1e-6)


def test_out_of_place_forward_accepts_a_non_contiguous_x():
    rng = np.random.default_rng(32)
    base, base64 = random_tensor(rng, (2, 2, 3, 16), "float32")
    x = base.swapaxes(1, 2)  # (2, 3, 2, 16), strided
    cos, cos64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    y = ms_rotary.PartialRotaryMul(2, list(SLICE))(x, cos, sin)
    expected = rotary_forward(2, base64.swapaxes(1, 2), cos64, sin64, *SLICE)
    np.testing.assert_allclose(y.asnumpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(base.asnumpy(), base64.astype(np.float32))


@pytest.mark.parametrize("dtype,cos_dtype,op_class", cycled_cases([pairs(DTYPES, DTYPES)], [ALL_OPS]))
def test_cos_sin_gradients_in_every_dtype_pair(dtype, cos_dtype, op_class, exec_mode):
    """Half-precision x and/or cos/sin: gradients summed in fp32 (MindSpore ops) or double (the kernel),
    rounded once to cos's dtype."""
    rng = np.random.default_rng(41)
    x, x64 = random_tensor(rng, SHAPE, dtype)
    w, w64 = random_tensor(rng, SHAPE, "float32")
    cos, cos64 = random_tensor(rng, (1, 3, 1, 8), cos_dtype)
    sin, sin64 = random_tensor(rng, (1, 3, 1, 8), cos_dtype)
    op = op_class(3, list(SLICE))
    grad_cos, grad_sin = ms.grad(_loss_fn(op), grad_position=(1, 2))(x, cos, sin, w)
    expected_cos, expected_sin = _numeric_cos_sin_grads(op_class, 3, x64, w64, cos64, sin64)
    tol = 4 * max(TOLERANCE[dtype], TOLERANCE[cos_dtype]) * max(1.0, np.abs(expected_cos).max())
    np.testing.assert_allclose(to_float64(grad_cos), expected_cos, rtol=tol, atol=tol)
    np.testing.assert_allclose(to_float64(grad_sin), expected_sin, rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cos_dtype,fraction_bits", [("bfloat16", 7), ("float16", 10)])
def test_half_precision_cos_sin_gradients_are_rounded_once(cos_dtype, fraction_bits, backend):
    """Eagerly the kernel sums in double. Rounded through fp32 first, 1 + tie + 2**-30 (above the tie between
    1 and its next value) became the tie, then 1.0 by round-to-even: one ulp below the correctly rounded
    1 + ulp."""
    ulp = 2.0 ** -fraction_bits
    x = ms.Tensor(np.ones((1, 2, 1, 4), np.float32))
    w = ms.Tensor(np.array([1 + ulp / 2, 2.0 ** -30], np.float32).reshape(1, 2, 1, 1).repeat(4, axis=-1))
    cos = ms.Tensor(np.full((1, 1, 1, 4), 0.5, np.float32), DTYPES[cos_dtype])
    sin = ms.Tensor(np.full((1, 1, 1, 4), 0.25, np.float32), DTYPES[cos_dtype])
    op = ms_rotary.PartialRotaryMul("half", [0, 4], backend=backend)
    grad_cos, grad_sin = ms.grad(lambda x, cos, sin: (op(x, cos, sin) * w).sum(), grad_position=(1, 2))(x, cos, sin)
    np.testing.assert_array_equal(to_float64(grad_cos), np.full((1, 1, 1, 4), 1 + ulp))
    np.testing.assert_array_equal(to_float64(grad_sin), np.array([-1, -1, 1, 1]).reshape(1, 1, 1, 4) * (1 + ulp))
