"""Ways a hostile or unlucky caller could get a lost write, a mode-dependent answer, a crash or a
history-dependent validation, each pinned by a test that failed before its fix. (The kernel's own defences,
called past every Python check, are in test_kernel_abi.py.)"""
import os
import shutil
import subprocess
import sys
import threading
import warnings

import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, random_tensor, raw_bits, to_float64
from mindspore import ops
from mindspore.common.initializer import Initializer
from reference import rotary_forward, rotary_grad

import ms_rotary
from ms_rotary import library

COS_SHAPE = (1, 2, 1, 16)


def _tables(seed=0):
    rng = np.random.default_rng(seed)
    return random_tensor(rng, COS_SHAPE, "float32")[0], random_tensor(rng, COS_SHAPE, "float32")[0]


def _ones_like(x):
    return ops.ones_like(x)


def _zeros(x):
    return ops.zeros((1, 2, 1, 16), ms.float32)


def _fill(x):
    return ops.fill(ms.float32, (1, 2, 1, 16), 2.0)


def _ones_like_times_3(x):
    return ops.ones_like(x) * 3


# (named functions: MindSpore's graph parser cannot read a lambda written inside a dict)
CONSTANT_MAKERS = {"ones_like": _ones_like, "zeros": _zeros, "fill": _fill, "ones_like * 3": _ones_like_times_3}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("maker", CONSTANT_MAKERS)
def test_an_in_place_write_to_a_graph_constant_is_refused(maker, backend):
    """Before: `d = ops.ones_like(x); op(d, cos, sin); return d * 1` under ms.jit returned all ones (MindSpore
    folds d into a constant; its own Tensor.copy_ loses the write the same way)."""
    cos, sin = _tables()
    op = ms_rotary.InplacePartialRotaryMulGrad(1, [0, 16], backend=backend)
    make = CONSTANT_MAKERS[maker]

    @ms.jit
    def rotate_a_constant(x):
        d = make(x)
        op(d, cos, sin)
        return d * 1

    with pytest.raises(ValueError, match="dy is a compile-time constant in this graph"):
        rotate_a_constant(random_tensor(np.random.default_rng(1), COS_SHAPE, "float32")[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensor_computed_from_an_input_keeps_its_write(backend):
    cos, sin = _tables()
    op = ms_rotary.InplacePartialRotaryMulGrad(1, [0, 16], backend=backend)

    @ms.jit
    def rotate_a_computed_one(x):
        d = x * 0 + 1
        op(d, cos, sin)
        return d * 1

    got = rotate_a_computed_one(random_tensor(np.random.default_rng(1), COS_SHAPE, "float32")[0])
    expected = rotary_grad(1, np.ones(COS_SHAPE), to_float64(cos), to_float64(sin), 0, 16)
    np.testing.assert_allclose(got.asnumpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_denormals_give_the_same_bits_in_every_mode(backend):
    """Before: GRAPH_MODE flushed denormal results to zero (MindSpore's runtime threads run with FTZ/DAZ),
    PyNative kept them. The kernel and the numpy fallback now run with the default FP environment."""
    rng = np.random.default_rng(2)
    dy_np = (rng.uniform(-1, 1, (1, 2, 1, 16)) * 1e-38).astype(np.float32)  # results in the denormal range
    cos, sin = _tables(3)
    op = ms_rotary.InplacePartialRotaryMulGrad(0, [0, 16], backend=backend)

    @ms.jit
    def under_jit(t):
        return op(t, cos, sin)

    bits = {}
    for mode in ("pynative", "ms.jit", "GRAPH_MODE"):
        dy = ms.Tensor(dy_np)
        if mode == "ms.jit":
            under_jit(dy)
        elif mode == "GRAPH_MODE":
            ms.set_context(mode=ms.GRAPH_MODE)
            try:
                op(dy, cos, sin)
            finally:
                ms.set_context(mode=ms.PYNATIVE_MODE)
        else:
            op(dy, cos, sin)
        bits[mode] = raw_bits(dy)
    as_float = bits["pynative"].view(np.float32)
    assert np.count_nonzero((np.abs(as_float) < np.finfo(np.float32).tiny) & (as_float != 0)) > 8
    np.testing.assert_array_equal(bits["ms.jit"], bits["pynative"])
    np.testing.assert_array_equal(bits["GRAPH_MODE"], bits["pynative"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_rotating_disjoint_slices_of_one_tensor_keep_both_writes(backend):
    """Before: the numpy backend wrote the whole tensor back, so a thread could undo the other's slice."""
    rng = np.random.default_rng(4)
    dy, dy64 = random_tensor(rng, (2, 64, 4, 32), "float32")
    cos, cos64 = random_tensor(rng, (1, 64, 1, 16), "float32")
    sin, sin64 = random_tensor(rng, (1, 64, 1, 16), "float32")
    halves = [(0, 16), (16, 32)]
    errors = []

    def rotate(start, end):
        try:
            op = ms_rotary.InplacePartialRotaryMulGrad(1, [start, end], backend=backend)
            for _ in range(20):
                op(dy, cos, sin)
        except Exception as error:  # reported below
            errors.append(repr(error))

    threads = [threading.Thread(target=rotate, args=half) for half in halves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    expected = dy64
    for start, end in halves:
        for _ in range(20):
            expected = rotary_grad(1, expected, cos64, sin64, start, end)
    np.testing.assert_allclose(to_float64(dy), expected, rtol=1e-4, atol=1e-4)


def test_bf16_nan_from_inf_times_zero_has_the_same_bits_on_both_backends():
    """Before: 0xffc0 from the kernel, 0x7fc0 from numpy (its bf16 cast dropped the NaN's sign), and numpy's
    RuntimeWarnings on inputs the kernel takes silently."""
    dy_np = np.zeros((1, 1, 1, 8), np.float32)
    dy_np[..., 0] = np.inf
    cos = ms.Tensor(np.zeros((1, 1, 1, 8), np.float32), ms.bfloat16)  # inf * 0 = NaN
    sin = ms.Tensor(np.zeros((1, 1, 1, 8), np.float32), ms.bfloat16)
    bits = []
    for backend in BACKENDS:
        dy = ms.Tensor(dy_np, ms.bfloat16)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8], backend=backend)(dy, cos, sin)
        bits.append(raw_bits(dy))
    assert np.isnan(to_float64(dy)).any()
    np.testing.assert_array_equal(bits[0], bits[1])


VALID_THEN_INVALID = {  # argument: (a valid value, invalid values that compare equal to a valid one)
    "rotary_mode": (1, [True, 1.0]),
    "partial_slice": ([0, 8], [(0.0, 8.0), [0, 8.0]]),
}


def test_validation_does_not_depend_on_earlier_calls():
    """Before: the functional form's cache keyed by the raw arguments took True == 1 == 1.0, so an invalid
    value was accepted after a valid call. Checked in a fresh process, in both orders."""
    code = """
import numpy as np, mindspore as ms, ms_rotary
x = ms.Tensor(np.ones((1, 2, 1, 16), np.float32)); cos = ms.Tensor(np.ones((1, 2, 1, 8), np.float32))
for kwargs in (dict(rotary_mode=1, partial_slice=[0, 8]), dict(rotary_mode=True, partial_slice=[0, 8]),
               dict(rotary_mode=1.0, partial_slice=[0, 8]), dict(rotary_mode=1, partial_slice=(0.0, 8.0))):
    try:
        ms_rotary.partial_rotary_mul(x, cos, cos, **kwargs)
        print("accepted", sorted(kwargs.items()))
    except TypeError as error:
        print("refused", sorted(kwargs.items()))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.getcwd())
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("accepted", "refused"))]
    assert lines[0].startswith("accepted")
    assert all(line.startswith("refused") for line in lines[1:]), lines


@pytest.mark.parametrize("partial_slice,error,fragment", [
    ([0, 2**63], ValueError, r"partial_slice=\[0, 9223372036854775808\] is out of range; values must fit in int64"),
    ({0, 2}, TypeError, r"partial_slice must be None or \[start, end\] \(a list or tuple of two ints\), got \{0, 2\}"),
    (np.array([0, 8]), TypeError, r"partial_slice must be None or \[start, end\]"),
])
def test_slice_values_python_cannot_pass_to_the_kernel_are_refused_by_name(partial_slice, error, fragment):
    """Before: [0, 2**63] raised pybind's "Unable to cast Python instance ... to C++ type 'long'" and a set
    "'set' object is not subscriptable"."""
    for op_class in (ms_rotary.InplacePartialRotaryMulGrad, ms_rotary.PartialRotaryMul):
        with pytest.raises(error, match=fragment):
            op_class(0, partial_slice)


def test_a_kernel_library_deleted_after_the_op_was_built_keeps_serving_it(tmp_path, monkeypatch):
    """Before: a raw OSError from ctypes at the first call. An op loads (and checks) the library when it is
    built, so a later deletion of the file does not reach it."""
    copy = tmp_path / "libms_rotary_cpu.so"
    shutil.copy(ms_rotary.compiled_kernel_path(), copy)
    monkeypatch.setattr(library, "LIB_PATH", str(copy))
    library.load.cache_clear()
    try:
        op = ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8])
        copy.unlink()
        dy, dy64 = random_tensor(np.random.default_rng(5), (1, 2, 1, 16), "float32")
        cos, sin = (t[..., :8].contiguous() for t in _tables(6))
        op(dy, cos, sin)
    finally:
        library.load.cache_clear()
    np.testing.assert_allclose(dy.asnumpy(), rotary_grad(0, dy64, to_float64(cos), to_float64(sin), 0, 8), rtol=1e-6,
                               atol=1e-6)


def test_a_view_of_part_of_a_tensor_is_refused_by_a_graph_call():
    """README: a view of a whole tensor passed to a compiled graph is written through; a view of part of one
    makes MindSpore 2.10's InplaceCopy fail, so a GRAPH_MODE call refuses it first."""
    cos, sin = (t[..., :8].contiguous() for t in _tables(7))
    op = ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8])
    base, _ = random_tensor(np.random.default_rng(8), (4, 2, 1, 16), "float32")
    whole = base.view(4, 2, 1, 16)
    before = base.asnumpy().copy()
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(ValueError, match=r"dy is a view of part of a larger tensor \(storage offset 64\)"):
            op(base[2:4], cos, sin)
        with pytest.raises(ValueError, match=r"dy must be contiguous"):  # a transposed view of the whole
            op(base.transpose(1, 0, 2, 3), cos[:, :1], sin[:, :1])
        np.testing.assert_array_equal(base.asnumpy(), before)
        op(whole, cos, sin)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    expected = rotary_grad(0, before.astype(np.float64), to_float64(cos), to_float64(sin), 0, 8)
    np.testing.assert_allclose(base.asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_dynamic_shapes_get_a_clear_error_on_the_shape_compiled_dynamic():
    """ms.jit(dynamic=1) compiles the first two input shapes statically and the third as dynamic."""
    op = ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8])

    def rotate_op(t, c, s):
        return op(t, c, s)

    rotate = ms.jit(rotate_op, dynamic=1)
    rng = np.random.default_rng(9)
    for seq in (2, 3, 4):
        dy, _ = random_tensor(rng, (1, seq, 1, 16), "float32")
        cos, _ = random_tensor(rng, (1, seq, 1, 8), "float32")
        if seq < 4:
            rotate(dy, cos, cos * 0.5)
            continue
        with pytest.raises(ValueError,
                           match=r"unknown \(dynamic\) dimension .* ms.jit\(dynamic=1\) compiles the third"):
            rotate(dy, cos, cos * 0.5)


def test_an_error_inside_pynative_autograd_leaves_it_clean():
    """MindSpore 2.10 leaves PyNative autograd recording when a forward under ms.grad raises; ms_rotary resets it
    before its own errors leave, so the next first-order gradient is not taken for a second-order one."""
    from mindspore.graph.api import _pynative_executor

    cos, sin = (t[..., :8].contiguous() for t in _tables(10))
    op = ms_rotary.InplacePartialRotaryMul(0, [0, 8])
    x, _ = random_tensor(np.random.default_rng(11), (1, 2, 1, 16), "float32")
    def rotate_the_leaf(t):
        return op(t, cos, sin).sum()

    def rotate_a_copy(t):
        return op(t * 1.0, cos, sin).sum()

    with pytest.raises(ValueError, match="is a leaf tensor that requires grad"):
        ms.grad(rotate_the_leaf)(x)
    assert not _pynative_executor.grad_flag()
    grad = ms.grad(rotate_a_copy)(x)
    expected = rotary_grad(0, np.ones((1, 2, 1, 16)), to_float64(cos), to_float64(sin), 0, 8)
    np.testing.assert_allclose(grad.asnumpy(), expected, rtol=1e-5, atol=1e-5)


class _Uniform(Initializer):
    """Seeded uniform values: a tensor made with init= holds them only once materialised."""

    def __init__(self, seed):
        super().__init__()
        self.stream = seed  # not `seed`: Initializer uses that name itself

    def _initialize(self, arr):
        arr[...] = np.random.default_rng(self.stream).uniform(-1, 1, arr.shape)


@pytest.mark.parametrize("exec_mode", ["pynative", "graph"])
@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("op_name", ["PartialRotaryMul", "InplacePartialRotaryMul", "InplacePartialRotaryMulGrad"])
def test_tensors_made_with_init_are_materialised_on_every_route(op_name, size, exec_mode):
    """Before: a small out-of-place PyNative call returned zeros, the in-place ops raised the kernel's "null
    pointer", a large out-of-place call MindSpore's RuntimeError. Now each route reads the initialised values."""
    shape = (1, 4, 2, 16) if size == "small" else (2, 1024, 128, 16)  # large: the eager out-of-place route
    lazy = [ms.Tensor(shape=s, dtype=ms.float32, init=_Uniform(seed)) for seed, s in
            enumerate((shape, (1, shape[1], 1, 16), (1, shape[1], 1, 16)))]
    x64, cos64, sin64 = (np.random.default_rng(seed).uniform(-1, 1, t.shape).astype(np.float32).astype(np.float64)
                         for seed, t in enumerate(lazy))
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "graph" else ms.PYNATIVE_MODE)
    try:
        got = getattr(ms_rotary, op_name)("interleave-half", [0, 16])(*lazy)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    reference = rotary_grad if op_name == "InplacePartialRotaryMulGrad" else rotary_forward
    np.testing.assert_allclose(got.asnumpy(), reference(3, x64, cos64, sin64, 0, 16), rtol=1e-5, atol=1e-5)


def _foreign_library(directory, kind):
    path = directory / "libms_rotary_cpu.so"
    if kind == "empty file":
        path.write_bytes(b"")
    else:  # a loadable library without ms_rotary's entries: a stale or foreign build
        source = directory / "foreign.c"
        source.write_text("int foreign_entry(void) { return 0; }\n")
        subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
    return path


@pytest.mark.parametrize("route", ["in place, PyNative", "out of place, PyNative", "GRAPH_MODE"])
@pytest.mark.parametrize("kind", ["empty file", "missing entries"])
def test_a_library_that_cannot_serve_the_call_gives_the_reinstall_error_on_every_route(kind, route, tmp_path,
                                                                                       monkeypatch):
    """Before: a raw ctypes AttributeError (PyNative), MindSpore's "error occurs when fetching function"
    (graphs), or a raw error from ops.Custom for an empty file."""
    monkeypatch.setattr(library, "LIB_PATH", str(_foreign_library(tmp_path, kind)))
    library.load.cache_clear()
    op_class = ms_rotary.PartialRotaryMul if route.startswith("out of place") else ms_rotary.InplacePartialRotaryMul
    x, _ = random_tensor(np.random.default_rng(9), (1, 2, 1, 16), "float32")
    before = x.asnumpy().copy()
    ms.set_context(mode=ms.GRAPH_MODE if route == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        with pytest.raises(RuntimeError, match=r"the compiled CPU kernel .* cannot be loaded .* reinstall ms_rotary"):
            op_class(0, [0, 16], backend="aot")(x, *_tables(10))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
        library.load.cache_clear()
    np.testing.assert_array_equal(x.asnumpy(), before)
