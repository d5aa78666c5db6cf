"""Training patterns users write, for each op x execution mode x dtype: each gives the float64 reference's
gradient, or the same network's gradient with plain MindSpore ops, or raises the documented error before any
wrong number reaches the user (README, "Autograd and in place").

A is each op's linear map of its first input: R (the forward ops) or R^T (InplacePartialRotaryMulGrad).
The dtypes cycle over patterns, ops and modes; `pytest -m slow` runs the full product."""
import itertools

import mindspore as ms
import numpy as np
import pytest
from conftest import DTYPES, OPS, TOLERANCE, apply_rotary_op, random_tensor, to_float64
from mindspore import Parameter, nn

import ms_rotary
from ms_rotary.call import RotaryCall
from ms_rotary.functions import TableFunction

SHAPE, SLICE, MODE = (2, 3, 2, 16), (4, 12), 1
EXEC_MODES = ("pynative", "ms.jit", "GRAPH_MODE")
LEAF_ERROR = (ValueError, "is a leaf tensor that requires grad")
# MindSpore 2.10's CPU kernels lack bf16 for AddN (a tensor used twice in a differentiated graph) and for the
# TensorMove a differentiated graph inserts around an in-place write read twice (its own Tensor.copy_ too:
# test_bf16_graph_limits_are_mindspores): compile errors, never numbers.
BF16_GRAPH_ADDN = (TypeError, r"Select CPU operator\[AddN\] fail")
BF16_GRAPH_TENSORMOVE = (TypeError, r"Select CPU operator\[TensorMove\] fail")
SAVED_ERROR = (RuntimeError, "modified by an inplace operation")
SECOND_ORDER_ERROR = (ValueError, "second-order gradients")


def apply_op(op_name, t, cos, sin, transpose=False):
    return apply_rotary_op(op_name, MODE, SLICE, t, cos, sin, transpose)


def f32(t):
    return t.astype(ms.float32)


class Pattern(nn.Cell):
    """A loss of x built around `op`; `expected(op_name, x, w, cos, sin)` is its gradient for x in float64."""

    def __init__(self, op, cos, sin):
        super().__init__()
        self.op, self.cos, self.sin = op, cos, sin


class ReadBefore(Pattern):
    """An op saved x for its backward before x is rotated in place (the issue's pattern 1, x an activation)."""

    def construct(self, x, w):
        q = x * 1.0
        return f32(q * q).sum() + (f32(self.op(q, self.cos, self.sin)) * w).sum()

    @staticmethod
    def expected(op_name, x, w, cos, sin):
        return 2 * x + apply_op(op_name, w, cos, sin, transpose=True)


class ReadBeforeLeaf(Pattern):
    """The same with x itself the differentiated input (a leaf)."""

    def construct(self, x, w):
        return f32(x * x).sum() + (f32(self.op(x, self.cos, self.sin)) * w).sum()

    expected = ReadBefore.expected


class ResultIgnored(Pattern):
    """The in-place call's result is dropped and x read after it (pattern 2)."""

    def construct(self, x, w):
        q = x * 1.0
        self.op(q, self.cos, self.sin)
        return (f32(q) * w).sum()

    @staticmethod
    def expected(op_name, x, w, cos, sin):
        return apply_op(op_name, w, cos, sin, transpose=True)


class TwoCalls(Pattern):
    def construct(self, x, w):
        q = self.op(x * 1.0, self.cos, self.sin)
        return (f32(self.op(q, self.cos, self.sin)) * w).sum()

    @staticmethod
    def expected(op_name, x, w, cos, sin):
        return apply_op(op_name, apply_op(op_name, w, cos, sin, True), cos, sin, True)


class UsedTwice(Pattern):
    def construct(self, x, w):
        y = f32(self.op(x * 1.0, self.cos, self.sin))
        return (y * w).sum() + (y * y).sum()

    @staticmethod
    def expected(op_name, x, w, cos, sin):
        return apply_op(op_name, w + 2 * apply_op(op_name, x, cos, sin), cos, sin, transpose=True)


class SecondOrder(Pattern):
    """A Hessian-vector product: grad of <grad sum(w * (A x)^2), v> = 2 A^T (w * A v), with v = w / 2."""

    def __init__(self, op, cos, sin):
        super().__init__(op, cos, sin)
        self.inner = ms.grad(_SquaredLoss(op, cos, sin))

    def construct(self, x, w):
        return (f32(self.inner(x, w)) * w * 0.5).sum()

    @staticmethod
    def expected(op_name, x, w, cos, sin):
        return 2 * apply_op(op_name, w * apply_op(op_name, w * 0.5, cos, sin), cos, sin, transpose=True)


class _SquaredLoss(Pattern):
    def construct(self, x, w):
        return (f32(self.op(x * 1.0, self.cos, self.sin)) ** 2 * w).sum()


PATTERNS = {
    "read before": (ReadBefore, {"pynative": SAVED_ERROR}, True),
    "read before, x a leaf": (ReadBeforeLeaf, {"pynative": LEAF_ERROR}, True),
    "result ignored": (ResultIgnored, {}, False),
    "two calls in a row": (TwoCalls, {}, True),
    "output used twice": (UsedTwice, {}, True),
    "second order": (SecondOrder, {"pynative": SECOND_ORDER_ERROR}, True),
}  # name: (cell, {exec mode: error of the in-place ops}, applies to the out-of-place op?)
BF16_GRAPH_ERRORS = {  # (pattern, in place?): MindSpore's error for bf16 x in GRAPH_MODE / ms.jit
    ("read before", True): BF16_GRAPH_ADDN, ("read before", False): BF16_GRAPH_ADDN,
    ("read before, x a leaf", True): BF16_GRAPH_ADDN, ("read before, x a leaf", False): BF16_GRAPH_ADDN,
}


def _cases():
    for i, (pattern, op_name, exec_mode, dtype) in enumerate(itertools.product(PATTERNS, OPS, EXEC_MODES, DTYPES)):
        cycled = dtype == list(DTYPES)[(list(PATTERNS).index(pattern) + list(OPS).index(op_name) +
                                         EXEC_MODES.index(exec_mode)) % len(DTYPES)]
        marks = () if cycled else (pytest.mark.slow,)
        yield pytest.param(pattern, op_name, exec_mode, dtype, marks=marks)


def differentiate(cell, exec_mode, *args, **grad_kwargs):
    grad_fn = ms.grad(cell, **grad_kwargs)
    if exec_mode == "ms.jit":
        return ms.jit(grad_fn)(*args)
    if exec_mode == "GRAPH_MODE":
        ms.set_context(mode=ms.GRAPH_MODE)
        try:
            return grad_fn(*args)
        finally:
            ms.set_context(mode=ms.PYNATIVE_MODE)
    return grad_fn(*args)


@pytest.mark.parametrize("pattern,op_name,exec_mode,dtype", _cases())
def test_pattern(pattern, op_name, exec_mode, dtype):
    cell_class, errors, out_of_place_too = PATTERNS[pattern]
    in_place = OPS[op_name]
    if not in_place and not out_of_place_too:
        pytest.skip("an in-place pattern")
    rng = np.random.default_rng(7)
    x, x64 = random_tensor(rng, SHAPE, dtype)
    w, w64 = random_tensor(rng, SHAPE, "float32")
    cos, cos64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    cell = cell_class(getattr(ms_rotary, op_name)(MODE, list(SLICE)), cos, sin)
    error = errors.get(exec_mode) if in_place else None
    if dtype == "bfloat16" and exec_mode != "pynative":
        error = BF16_GRAPH_ERRORS.get((pattern, in_place), error)
    if error is not None:
        with pytest.raises(error[0], match=error[1]):
            differentiate(cell, exec_mode, x, w)
        return
    grad = differentiate(cell, exec_mode, x, w)
    expected = cell_class.expected(op_name, x64, w64, cos64, sin64)
    tol = TOLERANCE[dtype] * 4 * max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(to_float64(grad), expected, rtol=tol, atol=tol)


class Projected(nn.Cell):
    """q = x W (a view of the product in PyNative) rotated in place; returns the loss and q (has_aux)."""

    def __init__(self, op, cos, sin):
        super().__init__()
        self.weight = Parameter(ms.Tensor(np.random.default_rng(3).uniform(-1, 1, (16, 16)).astype(np.float32)))
        self.op, self.cos, self.sin = op, cos, sin

    def construct(self, x, w):
        q = ms.ops.matmul(x.reshape(-1, 16), self.weight).reshape(x.shape)
        q = self.op(q, self.cos, self.sin)
        return (q * w).sum(), q


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
@pytest.mark.parametrize("op_name", OPS)
def test_value_and_grad_with_aux_and_accumulation_over_steps(op_name, exec_mode):
    """Three steps of value_and_grad(has_aux=True) on different batches, gradients summed: the weight's
    gradient is sum_steps x^T A^T w, the aux output is A (x W)."""
    rng = np.random.default_rng(11)
    cos, cos64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    net = Projected(getattr(ms_rotary, op_name)(MODE, list(SLICE)), cos, sin)
    weight64 = net.weight.asnumpy().astype(np.float64)
    step = ms.value_and_grad(net, grad_position=None, weights=[net.weight], has_aux=True)
    if exec_mode == "ms.jit":
        step = ms.jit(step)
    total, expected = np.zeros((16, 16)), np.zeros((16, 16))
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        for _ in range(3):
            x, x64 = random_tensor(rng, SHAPE, "float32")
            w, w64 = random_tensor(rng, SHAPE, "float32")
            (_, q), (grad,) = step(x, w)
            total += grad.asnumpy()
            back = apply_op(op_name, w64, cos64, sin64, transpose=True)
            expected += x64.reshape(-1, 16).T @ back.reshape(-1, 16)
            np.testing.assert_allclose(q.asnumpy(), apply_op(op_name, (x64.reshape(-1, 16) @ weight64).reshape(SHAPE),
                                                              cos64, sin64), rtol=1e-5, atol=1e-5)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_allclose(total, expected, rtol=1e-4, atol=1e-4)


class RotatesItsParameter(nn.Cell):
    def __init__(self, op, cos, sin, plain):
        super().__init__()
        self.table = Parameter(ms.Tensor(np.random.default_rng(5).uniform(-1, 1, SHAPE).astype(np.float32)))
        self.op, self.cos, self.sin, self.plain = op, cos, sin, plain

    def construct(self, w):
        if self.plain:  # the same network with MindSpore's own in-place copy
            self.table.copy_(self.op(self.table, self.cos, self.sin))
            rotated = self.table
        else:
            rotated = self.op(self.table, self.cos, self.sin)
        return (rotated * w).sum()


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
@pytest.mark.parametrize("op_name", ["InplacePartialRotaryMul", "InplacePartialRotaryMulGrad"])
def test_a_trainable_parameter_rotated_in_place(op_name, exec_mode):
    """Graphs: the parameter is rotated, and its gradient is the rotation's transpose of the loss's, the
    derivative for the value it held at the call (float64 reference). MindSpore's own Tensor.copy_ of the
    out-of-place result gives w there instead, as if the write were the identity: before ms_rotary returned
    the values it wrote (not the written tensor) it gave that too. PyNative refuses, as MindSpore refuses copy_
    there."""
    rng = np.random.default_rng(13)
    cos, cos64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, sin64 = random_tensor(rng, (1, 3, 1, 8), "float32")
    w, w64 = random_tensor(rng, SHAPE, "float32")
    ours = RotatesItsParameter(getattr(ms_rotary, op_name)(MODE, list(SLICE)), cos, sin, plain=False)
    start = ours.table.asnumpy().astype(np.float64)
    if exec_mode == "pynative":
        with pytest.raises(*LEAF_ERROR[:1], match=LEAF_ERROR[1]):
            differentiate(ours, exec_mode, w, grad_position=None, weights=[ours.table])
        np.testing.assert_array_equal(ours.table.asnumpy(), start.astype(np.float32))  # refused before writing
        return
    plain_op = ms_rotary.PartialRotaryMul(MODE, list(SLICE)) if op_name == "InplacePartialRotaryMul" else \
        _OutOfPlaceGrad()
    plain = RotatesItsParameter(plain_op, cos, sin, plain=True)
    grads = [differentiate(net, exec_mode, w, grad_position=None, weights=[net.table])[0] for net in (ours, plain)]
    np.testing.assert_allclose(grads[0].asnumpy(), apply_op(op_name, w64, cos64, sin64, True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads[1].asnumpy(), w64, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.table.asnumpy(), apply_op(op_name, start, cos64, sin64), rtol=1e-5, atol=1e-5)


class _OutOfPlaceGrad(nn.Cell):
    """R^T out of place, from the in-place grad op applied to a copy."""

    def __init__(self):
        super().__init__()
        self.op = ms_rotary.InplacePartialRotaryMulGrad(MODE, list(SLICE))

    def construct(self, t, cos, sin):
        return self.op(t * 1.0, cos, sin)


class _CopiedTwice(nn.Cell):
    """The in-place write of a graph done twice with MindSpore's own Tensor.copy_."""

    def construct(self, x, w):
        q = x * 1.0
        q.copy_(q * 2.0)
        q.copy_(q * 2.0)
        return (f32(q) * w).sum()


def test_bf16_graph_limits_are_mindspores():
    """MindSpore's own bf16 limits in graphs, with no ms_rotary op: a bf16 tensor used twice (BF16_GRAPH_ERRORS'
    AddN), and its own Tensor.copy_ done twice (TensorMove), which the in-place ops no longer meet (they return
    the values they wrote, not the written tensor)."""
    rng = np.random.default_rng(17)
    x, _ = random_tensor(rng, SHAPE, "bfloat16")
    w, _ = random_tensor(rng, SHAPE, "float32")
    with pytest.raises(BF16_GRAPH_TENSORMOVE[0], match=BF16_GRAPH_TENSORMOVE[1]):
        differentiate(_CopiedTwice(), "GRAPH_MODE", x, w)
    with pytest.raises(BF16_GRAPH_ADDN[0], match=BF16_GRAPH_ADDN[1]):
        differentiate(_UsedTwice(), "GRAPH_MODE", x, w)


class _UsedTwice(nn.Cell):
    """A bf16 tensor used twice, no ms_rotary op."""

    def construct(self, x, w):
        q = x * 1.0
        return f32(q * q).sum() + (f32(q) * w).sum()


class ChainedTables(nn.Cell):
    """Two calls in a row with tables of their own, then a call inside `if` and one inside `while`; every
    cos/sin gets a gradient. Before: traced, each later in-place call's bprop read x after its own write."""

    def __init__(self, op_class):
        super().__init__()
        self.first, self.second, self.in_if, self.in_while = (op_class(MODE, list(SLICE)) for _ in range(4))

    def construct(self, x, w, c1, s1, c2, s2, c3, s3):
        q = x * 1.0
        q = self.first(q, c1, s1)
        q = self.second(q, c2, s2)
        if w.sum() > -1000.0:
            q = self.in_if(q, c3, s3)
        i = 0
        while i < 2:
            q = self.in_while(q, c1, s1)
            i += 1
        return (f32(q) * w).sum()


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
@pytest.mark.parametrize("op_name", ["InplacePartialRotaryMul", "InplacePartialRotaryMulGrad"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_chained_and_control_flow_calls_give_every_gradient_of_the_out_of_place_network(dtype, op_name, exec_mode):
    rng = np.random.default_rng(17)
    x, _ = random_tensor(rng, SHAPE, dtype)
    w, _ = random_tensor(rng, SHAPE, "float32")
    tables = [random_tensor(rng, (1, 3, 1, 8), "float32")[0] for _ in range(6)]
    out_of_place = ms_rotary.PartialRotaryMul if op_name == "InplacePartialRotaryMul" else _OutOfPlaceGradFunction
    positions = tuple(i for i in range(8) if i != 1)
    got, expected = (differentiate(ChainedTables(op_class), exec_mode, x, w, *tables, grad_position=positions)
                     for op_class in (getattr(ms_rotary, op_name), out_of_place))
    for name, ours, theirs in zip(("x", "c1", "s1", "c2", "s2", "c3", "s3"), got, expected):
        tol = TOLERANCE[dtype] * 4 * max(1.0, np.abs(to_float64(theirs)).max())
        np.testing.assert_allclose(to_float64(ours), to_float64(theirs), rtol=tol, atol=tol, err_msg=name)


def test_a_write_under_no_grad_inside_a_recorded_forward_fails_the_saved_tensor_check():
    """Before: nothing recorded the write, q's version did not move, and Mul's saved q was the rotated one:
    dL/dw came out wrong by 3.2. Now MindSpore refuses at backward, as for its own q.copy_ there."""
    rng = np.random.default_rng(19)
    q, _ = random_tensor(rng, SHAPE, "float32")
    w, _ = random_tensor(rng, SHAPE, "float32")
    cos, _ = random_tensor(rng, (1, 3, 1, 8), "float32")
    sin, _ = random_tensor(rng, (1, 3, 1, 8), "float32")
    rope = ms_rotary.InplacePartialRotaryMul(MODE, list(SLICE))

    def loss(w, q):
        y = (w * q).sum()
        with ms._no_grad():
            rope(q, cos, sin)
        return y

    with pytest.raises(*SAVED_ERROR[:1], match=SAVED_ERROR[1]):
        ms.grad(loss, grad_position=0)(w, q)
    version = q._version
    rope(q, cos, sin)  # nothing recording at all: the write still moves q's version, as MindSpore's own do
    assert q._version == version + 1


def _OutOfPlaceGradFunction(mode, partial_slice):
    """R^T out of place: the grad op's own function, not an in-place call on a copy."""
    return TableFunction(RotaryCall(mode, tuple(partial_slice), conjugate=True, in_place=False), "aot", "CPU")
