"""Eager execution (PyNative on CPU): the kernel runs on the caller's own memory.

MindSpore 2.10's PyNative ops.Custom hands an AOT kernel a private copy of any view tensor (the outputs
of reshape, view and slicing, e.g. q after a linear layer), so an in-place write there is silently lost;
it also costs ~100 us a call. Here the compiled kernel (or the numpy kernel) writes through
Tensor.data_ptr() after MindSpore's async op queue has drained, so earlier reads of dy see the old
values and later ops see the new ones. Graph mode and ms.jit use the registered ops.Custom instead."""
import ctypes
import functools

import mindspore as ms
from mindspore import context, mint
from mindspore.graph.api import _pynative_executor
from mindspore.graph.jit_context import jit_context

from . import numpy_kernel
from .constraints import check_dtypes, check_shapes, element_dtype, is_empty_work, require_contiguous

_DTYPE_NAMES = {ms.float32: b"float32", ms.float16: b"float16", ms.bfloat16: b"bfloat16"}
_SHAPE = ctypes.c_int64 * 4

# Status codes of kernel/cpu/rotary_kernel.h.
KERNEL_ERRORS = {
    1: "bad parameter count or null pointer",
    2: "a tensor is not 4-D (or the output shape differs from dy's)",
    3: "unsupported dtype",
    4: "cos and sin differ in shape or dtype",
    5: "cos/sin do not broadcast to dy",
    6: "partial_slice out of range",
    7: "slice length not divisible as the mode needs",
    8: "rotary_mode out of range",
    9: "head dim D above 1024",
    10: "cos/sin last dim differs from the slice length",
    11: "rotary_mode/partial_slice attribute missing",
}


class KernelError(RuntimeError):
    """The compiled kernel refused its arguments (the Python checks should have caught it first)."""


def is_eager(device_target):
    """True when a call runs now, on host memory, rather than being traced into a graph."""
    return device_target == "CPU" and context._get_mode() == ms.PYNATIVE_MODE and jit_context() is None


@functools.lru_cache(maxsize=None)
def _kernel_entry(lib_path):
    fn = ctypes.CDLL(lib_path).ms_rotary_run
    fn.argtypes = [ctypes.c_void_p] * 4 + [_SHAPE] * 3 + [ctypes.c_char_p] * 3 + [ctypes.c_int64] * 3 + \
        [ctypes.c_int] * 2
    fn.restype = ctypes.c_int
    return fn


@functools.lru_cache(maxsize=256)
def _checked_slice(rotary_mode, partial_slice, dy_name, dy_shape, cos_shape, sin_shape, dy_dtype, cos_dtype, sin_dtype):
    """The constraint checks, remembered per signature (a training loop repeats a few): ~4 us -> ~0.3 us.
    A failing check raises, and lru_cache does not remember raised calls."""
    check_dtypes(dy_dtype, cos_dtype, sin_dtype, dy_name)
    return check_shapes(dy_shape, cos_shape, sin_shape, rotary_mode, partial_slice, dy_name)


def run(kernel, dy, cos, sin):
    """One call of RotaryKernel `kernel` on live tensors; returns dy (in place) or a new tensor."""
    start, end = _checked_slice(kernel.rotary_mode, kernel.partial_slice, kernel.dy_name, tuple(dy.shape),
                                tuple(cos.shape), tuple(sin.shape), dy.dtype, cos.dtype, sin.dtype)
    if kernel.in_place:
        require_contiguous(dy, kernel.dy_name)
    if is_empty_work(dy.shape, cos.shape, start, end):
        return dy if kernel.in_place else dy.copy()
    src = dy if kernel.in_place else dy.contiguous()
    out = dy if kernel.in_place else mint.empty_like(src)
    cos, sin = cos.contiguous(), sin.contiguous()
    _pynative_executor.sync()  # ops queued before this call have read (or written) their inputs
    if kernel.backend == "aot":
        status = _kernel_entry(kernel.lib_path)(
            src.data_ptr(), None if kernel.in_place else out.data_ptr(), cos.data_ptr(), sin.data_ptr(),
            _SHAPE(*src.shape), _SHAPE(*cos.shape), _SHAPE(*sin.shape), _DTYPE_NAMES[element_dtype(src.dtype)],
            _DTYPE_NAMES[element_dtype(cos.dtype)], _DTYPE_NAMES[element_dtype(sin.dtype)], kernel.rotary_mode,
            start, end, int(kernel.conjugate), kernel.num_threads)
        if status:
            raise KernelError(f"ms_rotary: the CPU kernel rejected its arguments: {KERNEL_ERRORS.get(status, status)}")
    else:
        result = numpy_kernel.rotate(src.asnumpy(), cos.asnumpy(), sin.asnumpy(), kernel.rotary_mode, start, end,
                                     kernel.conjugate)
        ctypes.memmove(out.data_ptr(), result.ctypes.data, result.nbytes)
    return out
