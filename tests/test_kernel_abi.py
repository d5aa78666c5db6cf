"""The compiled kernel checks its own arguments: called directly (bypassing every Python check) with
inconsistent arguments, null pointers or overflowing shapes it returns an error code and writes nothing;
through MindSpore the code surfaces as an exception."""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import ms_rotary
from ms_rotary import library
from ms_rotary.targets import base as target_base


@pytest.fixture(scope="module")
def kernel():
    return library.load(ms_rotary.compiled_kernel_path())


def call(kernel, dy, cos, sin, mode=0, start=0, end=8, dy_dtype="float32", cos_dtype="float32", sin_dtype="float32",
         shapes=None, out=None):
    dy_shape, cos_shape, sin_shape = shapes or (dy.shape, cos.shape, sin.shape)
    return kernel.rotate(dy.ctypes.data, None if out is None else out.ctypes.data, cos.ctypes.data, sin.ctypes.data,
                         dy_shape, cos_shape, sin_shape, dy_dtype, cos_dtype, sin_dtype, mode, start, end, True, 1)


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    dy = rng.uniform(-1, 1, (2, 3, 2, 16)).astype(np.float32)
    cos = rng.uniform(-1, 1, (1, 3, 1, 8)).astype(np.float32)
    sin = rng.uniform(-1, 1, (1, 3, 1, 8)).astype(np.float32)
    return dy, cos, sin


BAD_CALLS = {  # name: (keyword overrides, expected status)
    "unknown dtype": (dict(dy_dtype="float64"), 3),
    "cos/sin dtype differ": (dict(sin_dtype="float16"), 4),
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
    # B*S*N wraps int64 (2**62+1 rows of 4 lanes); the element and byte counts are checked before any row
    "rows overflow int64": (dict(shapes=((2**62 + 1, 4, 1, 8), (1, 4, 1, 8), (1, 4, 1, 8))), 12),
    "bytes overflow int64": (dict(shapes=((2**30, 2**30, 2, 8), (1, 1, 1, 8), (1, 1, 1, 8))), 12),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_kernel_rejects_inconsistent_arguments(kernel, arrays, name):
    dy, cos, sin = arrays
    overrides, status = BAD_CALLS[name]
    before = dy.copy()
    assert call(kernel, dy, cos, sin, **overrides) == status
    np.testing.assert_array_equal(dy, before)
    assert kernel.status_message(status)


def test_kernel_accepts_the_consistent_call(kernel, arrays):
    dy, cos, sin = arrays
    before = dy.copy()
    assert call(kernel, dy, cos, sin) == 0
    assert not np.array_equal(dy, before)


def test_empty_work_wins_over_the_rules_of_work(kernel):
    """CANN's own test: dy [2, 0, 4, 64], cos/sin [1, 1, 1, 64], slice [16, 64) (length 48 != 64) is a no-op."""
    dy, cos = np.zeros((2, 0, 4, 64), np.float32), np.ones((1, 1, 1, 64), np.float32)
    assert call(kernel, dy, cos, cos.copy(), start=16, end=64) == 0
    assert call(kernel, dy, cos, cos.copy(), start=16, end=80) == 6  # the slice range still applies


# The AOT entries as MindSpore calls them: int Func(nparam, params, ndims, shapes, dtypes, stream, extra).
_AOT = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p,
        ctypes.c_void_p]


def aot_call(entry_name, params, shapes, dtypes=(b"float32",) * 4):
    entry = getattr(ctypes.CDLL(ms_rotary.compiled_kernel_path()), entry_name)
    entry.argtypes, entry.restype = _AOT, ctypes.c_int
    shape_arrays = [None if shape is None else (ctypes.c_int64 * 4)(*shape) for shape in shapes]
    shape_ptrs = (ctypes.POINTER(ctypes.c_int64) * 4)(
        *[ctypes.cast(a, ctypes.POINTER(ctypes.c_int64)) if a is not None else None for a in shape_arrays])
    return entry(4, (ctypes.c_void_p * 4)(*params), (ctypes.c_int * 4)(4, 4, 4, 4), shape_ptrs,
                 (ctypes.c_char_p * 4)(*dtypes), None, None)


@pytest.mark.parametrize("entry_name", ["RotaryMulOut", "RotaryMulGradOut"])
@pytest.mark.parametrize("hole", ["null output", "output is dy", "null cos shape", "null dy", "null dtype"])
def test_aot_entries_check_every_pointer(arrays, entry_name, hole):
    """Before: a NULL output made the out-of-place entry write into its input and return 0 (and crashed
    the in-place entries); a NULL cos shape crashed."""
    dy, cos, sin = arrays
    out = np.zeros_like(dy)
    params = [dy.ctypes.data, cos.ctypes.data, sin.ctypes.data, out.ctypes.data]
    shapes = [dy.shape, cos.shape, sin.shape, dy.shape]
    dtypes = [b"float32"] * 4
    if hole == "null output":
        params[3] = None
    elif hole == "output is dy":
        params[3] = params[0]
    elif hole == "null cos shape":
        shapes[1] = None
    elif hole == "null dy":
        params[0] = None
    else:
        dtypes[2] = None
    before = dy.copy()
    assert aot_call(entry_name, params, shapes, dtypes) == 1
    np.testing.assert_array_equal(dy, before)
    assert not out.any()


def test_cos_sin_grad_entry_checks_its_pointers(kernel, arrays):
    dy, cos, _ = arrays
    dcos = np.zeros_like(cos)
    assert kernel.cos_sin_grad(dy.ctypes.data, dy.ctypes.data, dcos.ctypes.data, None, dy.shape, cos.shape,
                               "float32", "float32", 0, 0, 8) == 1
    assert kernel.cos_sin_grad(dy.ctypes.data, dy.ctypes.data, dcos.ctypes.data, dcos.ctypes.data, dy.shape,
                               (3, 3, 1, 8), "float32", "float32", 0, 0, 8) == 5  # cos/sin do not broadcast


def test_kernel_error_surfaces_as_exception_through_mindspore(arrays, monkeypatch):
    """Python checks bypassed: the kernel's refusal still reaches the caller as an exception."""
    import mindspore as ms

    dy, cos, sin = (ms.Tensor(a) for a in arrays)
    op = ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8])
    monkeypatch.setattr(target_base, "checked_slice", lambda *args: (0, 4))  # lie about the slice
    before = dy.asnumpy().copy()
    with pytest.raises(library.KernelError, match="cos/sin last dim differs from the slice length"):
        op(dy, cos, sin)
    np.testing.assert_array_equal(dy.asnumpy(), before)


def _run_in_subprocess(code, env_overrides=()):
    env = dict(os.environ, **dict(env_overrides))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


# Loads library.py by path (not the ms_rotary package, which imports MindSpore) and rotates one tensor big
# enough to be split over threads, on 1 thread and then as configured; LIMIT_ADDRESS_SPACE is replaced by
# code or by nothing.
_ROTATE_ONCE = f"""
import importlib.util
import numpy as np
spec = importlib.util.spec_from_file_location("library", {library.__file__!r})
library = importlib.util.module_from_spec(spec)
spec.loader.exec_module(library)
kernel = library.CompiledKernel({ms_rotary.compiled_kernel_path()!r})
rng = np.random.default_rng(0)
dy = rng.uniform(-1, 1, (4, 1024, 4, 64)).astype(np.float32)  # 1M lanes: above the threading threshold
cos = rng.uniform(-1, 1, (1, 1024, 1, 64)).astype(np.float32)
args = (cos.ctypes.data, cos.ctypes.data, dy.shape, cos.shape, cos.shape, "float32", "float32", "float32", 1, 0, 64,
        True)
expected = dy.copy()
assert kernel.rotate(expected.ctypes.data, None, *args, num_threads=1) == 0
got = dy.copy()
LIMIT_ADDRESS_SPACE
assert kernel.rotate(got.ctypes.data, None, *args) == 0
assert np.array_equal(got, expected)
print("same bits")
"""
# Address space for what is mapped now plus 24 MiB: not enough for 64 thread stacks of 8 MiB.
_LIMIT = """import resource
size = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmSize"))) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (24 << 20), resource.RLIM_INFINITY))"""


def test_a_thread_that_cannot_start_costs_threads_not_the_process():
    """Before: the exception of a std::thread that could not start escaped the C entry and std::terminate
    aborted the process. Here most of 64 threads cannot get a stack: the calling thread rotates their rows,
    with the same bits."""
    done = _run_in_subprocess(_ROTATE_ONCE.replace("LIMIT_ADDRESS_SPACE", _LIMIT), {"MS_ROTARY_NUM_THREADS": "64"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "same bits" in done.stdout


@pytest.mark.parametrize("value", ["abc", "-1", "1e3", "5000"])
def test_invalid_thread_count_is_ignored_with_one_warning(value):
    done = _run_in_subprocess(_ROTATE_ONCE.replace("LIMIT_ADDRESS_SPACE", "") +
                              "kernel.rotate(got.ctypes.data, None, *args)",
                              {"MS_ROTARY_NUM_THREADS": value})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("ignoring MS_ROTARY_NUM_THREADS") == 1
    assert f"'{value}'" in done.stderr


def test_every_status_code_has_a_message():
    """The codes and their messages are stated in kernel/common/rotary_rules.h; library.py reads the messages
    from the compiled kernel."""
    import re

    header = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernel", "common",
                               "rotary_rules.h")).read()
    codes = {int(value) for value in re.findall(r"^\s+k\w+ = (\d+),", header, re.MULTILINE)}
    assert all(library.load().status_message(code) for code in codes)
    assert library.load().status_message(max(codes) + 1) is None


LANES = np.array([0, 1, 2, 0, 0, 1, 2, 0])  # M-RoPE: the position channel of each of the 8 cos lanes
POSITION_CALLS = {  # name: (positions, [channels, batch, S] passed, lane channels, (B axis, S axis), status)
    "in range": (np.array([[0, 3, 7]]), (1, 1, 3), None, (0, 1), 0),
    "past the cache": (np.array([[0, 3, 8]]), (1, 1, 3), None, (0, 1), 15),
    "negative": (np.array([[0, -1, 2]]), (1, 1, 3), None, (0, 1), 15),
    "S differs from q's": (np.array([[0, 1]]), (1, 1, 2), None, (0, 1), 15),
    "batch neither 1 nor B": (np.zeros((3, 3), np.int64), (1, 3, 3), None, (0, 1), 15),
    "M-RoPE in range": (np.arange(9).reshape(3, 1, 3) % 8, (3, 1, 3), LANES, (0, 1), 0),
    "M-RoPE past the cache": (np.arange(9).reshape(3, 1, 3), (3, 1, 3), LANES, (0, 1), 15),
    "M-RoPE without lane channels": (np.zeros((3, 1, 3), np.int64), (3, 1, 3), None, (0, 1), 15),
    "M-RoPE lane channel 3": (np.zeros((3, 1, 3), np.int64), (3, 1, 3), np.array([3] + [0] * 7), (0, 1), 15),
    "two channels (quarter)": (np.arange(6).reshape(2, 1, 3), (2, 1, 3), np.array([0] * 4 + [1] * 4), (0, 1), 0),
    "four channels (HunYuan-VL's axes)": (np.zeros((4, 1, 3), np.int64), (4, 1, 3), np.repeat(np.arange(4), 2), (0, 1),
                                          0),
    "five channels": (np.zeros((5, 1, 3), np.int64), (5, 1, 3), np.zeros(8, np.int64), (0, 1), 15),
    "one axis twice": (np.array([[0, 3, 7]]), (1, 1, 3), None, (1, 1), 15),
    "axis 3": (np.array([[0, 3, 7]]), (1, 1, 3), None, (0, 3), 15),
}


@pytest.mark.parametrize("name", POSITION_CALLS)
def test_the_positions_entry_checks_every_position_before_writing(kernel, name):
    """q [2, 3, 2, 16] and k [2, 3, 1, 16] rotated on [0, 8) by rows of an 8-row cache: a position outside
    it, positions that do not fit q and k, or M-RoPE lane channels that do not fit, return status 15 with
    neither tensor written."""
    positions, shape, lanes, axes, status = POSITION_CALLS[name]
    rng = np.random.default_rng(3)
    q = rng.uniform(-1, 1, (2, 3, 2, 16)).astype(np.float32)
    k = rng.uniform(-1, 1, (2, 3, 1, 16)).astype(np.float32)
    cos, sin = (rng.uniform(-1, 1, (1, 8, 1, 8)).astype(np.float32) for _ in range(2))
    positions = np.ascontiguousarray(positions, np.int64)
    lanes = None if lanes is None else np.ascontiguousarray(lanes, np.int64)
    before = q.copy(), k.copy()
    got = kernel.rotate_by_positions(q.ctypes.data, None, k.ctypes.data, None, cos.ctypes.data, sin.ctypes.data,
                                     positions.ctypes.data, shape, None if lanes is None else lanes.ctypes.data,
                                     axes, q.shape, k.shape, cos.shape, "float32", "float32", 0, 0, 8, False,
                                     num_threads=1)
    assert got == status
    if status:
        np.testing.assert_array_equal(q, before[0])
        np.testing.assert_array_equal(k, before[1])
    else:
        assert not np.array_equal(q, before[0]) and not np.array_equal(k, before[1])
