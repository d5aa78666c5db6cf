"""The compiled CPU kernel (kernel/cpu/, built by setup.py into ms_rotary/lib/): finding it, loading it
with a clear error, and its plain C entries wrapped once, for eager calls, tests and benchmarks."""
import ctypes
import functools
import os

import numpy as np

LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libms_rotary_cpu.so")
_POSITIONS_ARRAY = ctypes.c_int64 * 3
_SHAPE_ARRAY = ctypes.c_int64 * 4
# Every entry the package calls: the plain C entries (eager calls, status messages) and the AOT entries
# ops.Custom loads (kernel/cpu/aot_entry.cc; by direction, backward second). A stale or foreign library lacks one.
C_ENTRIES = ("ms_rotary_run", "ms_rotary_cos_sin_grad", "ms_rotary_run_positions", "ms_rotary_norm_positions",
             "ms_rotary_norm_positions_grad", "ms_rotary_status_message")
AOT_ENTRIES = ("RotaryMulOut", "RotaryMulGradOut")
AOT_POSITIONS_ENTRIES = ("RotaryPositionsOut", "RotaryPositionsGradOut")
# A head norm before the rotation: the forward, the backward's dx and the backward's weight gradient.
AOT_NORM_ENTRIES = ("RotaryNormPositionsOut", "RotaryNormPositionsGradOut", "RotaryNormPositionsWeightGradOut")
AOT_WRITE_GUARD = "RotaryWriteGuard"
AOT_APART_GUARD = "RotaryApartGuard"
_REINSTALL = "reinstall ms_rotary (`pip install .` builds it) or pass backend='pyfunc'"


class KernelError(RuntimeError):
    """The compiled kernel refused its arguments (the Python checks should have caught it first)."""


def compiled_kernel_path():
    """The compiled kernel's path, or None when the package was installed without it."""
    return LIB_PATH if os.path.isfile(LIB_PATH) else None


class CompiledKernel:
    """The library's C entries. Pointers are ints (Tensor.data_ptr(), ndarray.ctypes.data), shapes 4-tuples,
    dtypes the names "float32", "float16", "bfloat16"; each method returns the kernel's status code."""

    def __init__(self, path):
        try:
            library = ctypes.CDLL(path)
        except OSError as error:
            raise RuntimeError(f"ms_rotary: the compiled CPU kernel {path} cannot be loaded ({error}); "
                               f"{_REINSTALL}") from None
        missing = [entry for entry in (*C_ENTRIES, *AOT_ENTRIES, *AOT_POSITIONS_ENTRIES, *AOT_NORM_ENTRIES,
                                       AOT_WRITE_GUARD, AOT_APART_GUARD)
                   if not hasattr(library, entry)]
        if missing:
            raise RuntimeError(f"ms_rotary: the compiled CPU kernel {path} cannot be loaded (it lacks the entries "
                               f"{missing}: a stale or foreign build); {_REINSTALL}")
        self.path = path
        self._rotate = library.ms_rotary_run
        self._rotate.argtypes = [ctypes.c_void_p] * 4 + [_SHAPE_ARRAY] * 3 + [ctypes.c_char_p] * 3 + \
            [ctypes.c_int64] * 3 + [ctypes.c_int] * 2
        self._rotate.restype = ctypes.c_int
        self._cos_sin_grad = library.ms_rotary_cos_sin_grad
        self._cos_sin_grad.argtypes = [ctypes.c_void_p] * 4 + [_SHAPE_ARRAY] * 2 + [ctypes.c_char_p] * 2 + \
            [ctypes.c_int64] * 3 + [ctypes.c_int]
        self._cos_sin_grad.restype = ctypes.c_int
        self._run_positions = library.ms_rotary_run_positions
        self._run_positions.argtypes = [ctypes.c_void_p] * 7 + [_POSITIONS_ARRAY, ctypes.c_void_p] + \
            [ctypes.c_int64] * 2 + [_SHAPE_ARRAY] * 3 + [ctypes.c_char_p] * 2 + [ctypes.c_int64] * 3 + \
            [ctypes.c_int] * 2
        self._run_positions.restype = ctypes.c_int
        # (positions, positions_shape, lane_channels, batch axis, seq axis): a cache read's arguments
        cache_read = [ctypes.c_void_p, _POSITIONS_ARRAY, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        self._norm_positions = library.ms_rotary_norm_positions
        self._norm_positions.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_char_p] * 2 + [ctypes.c_float] * 2 + \
            [ctypes.c_void_p] * 2 + cache_read + [_SHAPE_ARRAY] * 3 + [ctypes.c_char_p] * 2 + [ctypes.c_int64] * 3 + \
            [ctypes.c_int]
        self._norm_positions.restype = ctypes.c_int
        self._norm_positions_grad = library.ms_rotary_norm_positions_grad
        self._norm_positions_grad.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_char_p, ctypes.c_float, ctypes.c_float] \
            + [ctypes.c_void_p] * 2 + cache_read + [_SHAPE_ARRAY] * 2 + [ctypes.c_char_p] * 2 + [ctypes.c_int64] * 3 + \
            [ctypes.c_int]
        self._norm_positions_grad.restype = ctypes.c_int
        self._status_message = library.ms_rotary_status_message
        self._status_message.argtypes = [ctypes.c_int]
        self._status_message.restype = ctypes.c_char_p

    def status_message(self, status):
        """The text of a status code (kernel/common/rotary_rules.h), or None for a number that is none."""
        text = self._status_message(status)
        return None if text is None else text.decode()

    def rotate(self, dy, out, cos, sin, dy_shape, cos_shape, sin_shape, dy_dtype, cos_dtype, sin_dtype, rotary_mode,
               start, end, conjugate, num_threads=0):
        """dy's lanes [start, end) rotated (conjugate: the backward) into dy itself (out=None) or into `out`,
        which also receives dy's other lanes. num_threads 0: automatic or $MS_ROTARY_NUM_THREADS."""
        return self._rotate(dy, out, cos, sin, _c_shape(dy_shape), _c_shape(cos_shape), _c_shape(sin_shape),
                            _c_name(dy_dtype), _c_name(cos_dtype), _c_name(sin_dtype), rotary_mode, start, end,
                            int(conjugate), num_threads)

    def cos_sin_grad(self, y_side, x_side, dcos, dsin, dy_shape, cos_shape, dy_dtype, cos_dtype, rotary_mode, start,
                     end, num_threads=0):
        """dcos, dsin (cos-shaped, cos's dtype) of the rotation, summed over cos's broadcast axes; y_side is
        in y's lane layout, x_side in x's (kernel/cpu/rotary_kernel.h: run_cos_sin_grad)."""
        return self._cos_sin_grad(y_side, x_side, dcos, dsin, _c_shape(dy_shape), _c_shape(cos_shape),
                                  _c_name(dy_dtype), _c_name(cos_dtype), rotary_mode, start, end, num_threads)


    def rotate_by_positions(self, q, q_out, k, k_out, cos, sin, positions, positions_shape, lane_channels, axes,
                            q_shape, k_shape, cache_shape, dy_dtype, cos_dtype, rotary_mode, start, end, conjugate,
                            num_threads=0):
        """q (and k, unless None) rotated by the cache rows [1, P, 1, L] that positions (int64 [channels, batch,
        S]) pick; lane_channels (int64 [L], M-RoPE) or None; axes: q's (B axis, S axis). Out pointers None: in
        place. Both tensors are checked before either is written (kernel/cpu/rotary_kernel.h, Positions)."""
        return self.rotate_by_positions_entry(positions_shape, lane_channels, axes, q_shape, k_shape, cache_shape,
                                              dy_dtype, cos_dtype, rotary_mode, start, end, conjugate,
                                              num_threads)(q, q_out, k, k_out, cos, sin, positions)

    def rotate_by_positions_entry(self, positions_shape, lane_channels, axes, q_shape, k_shape, cache_shape,
                                  dy_dtype, cos_dtype, rotary_mode, start, end, conjugate, num_threads=0):
        """rotate_by_positions with every argument but the pointers bound (a decode step repeats them):
        f(q, q_out, k, k_out, cos, sin, positions) -> status."""
        bound = (_c_positions_shape(positions_shape), lane_channels, *axes, _c_shape(q_shape),
                 _c_shape(k_shape or q_shape), _c_shape(cache_shape), _c_name(dy_dtype), _c_name(cos_dtype),
                 rotary_mode, start, end, int(conjugate), num_threads)
        run = self._run_positions
        return lambda q, q_out, k, k_out, cos, sin, positions: run(q, q_out, k, k_out, cos, sin, positions, *bound)

    def norm_by_positions(self, q, q_out, k, k_out, q_weight, k_weight, weight_dtypes, eps, offset, cos, sin,
                          positions, positions_shape, lane_channels, axes, q_shape, k_shape, cache_shape, dtype,
                          cos_dtype, rotary_mode, start, end, num_threads=0):
        """q (and k, unless None) each normalised over its head with its own weight ([D], weight_dtypes one
        name each; gain offset + weight, eps inside the root) and rotated by the cache rows positions pick, as
        rotate_by_positions (kernel/cpu/rotary_kernel.h, HeadNorm)."""
        return self.norm_by_positions_entry(weight_dtypes, eps, offset, positions_shape, lane_channels, axes, q_shape,
                                            k_shape, cache_shape, dtype, cos_dtype, rotary_mode, start, end,
                                            num_threads)(q, q_out, k, k_out, q_weight, k_weight, cos, sin, positions)

    def norm_by_positions_entry(self, weight_dtypes, eps, offset, positions_shape, lane_channels, axes, q_shape,
                                k_shape, cache_shape, dtype, cos_dtype, rotary_mode, start, end, num_threads=0):
        """norm_by_positions with every argument but the pointers bound:
        f(q, q_out, k, k_out, q_weight, k_weight, cos, sin, positions) -> status."""
        weight_dtypes = [_c_name(name) for name in weight_dtypes] + [None]
        norm = (*weight_dtypes[:2], eps, offset)
        bound = (_c_positions_shape(positions_shape), lane_channels, *axes, _c_shape(q_shape),
                 _c_shape(k_shape or q_shape), _c_shape(cache_shape), _c_name(dtype), _c_name(cos_dtype), rotary_mode,
                 start, end, num_threads)
        run = self._norm_positions
        return lambda q, q_out, k, k_out, q_weight, k_weight, cos, sin, positions: run(
            q, q_out, k, k_out, q_weight, k_weight, *norm, cos, sin, positions, *bound)

    def norm_by_positions_grad(self, dy, x, dx, weight, weight_grad, weight_dtype, eps, offset, cos, sin, positions,
                               positions_shape, lane_channels, axes, shape, cache_shape, dtype, cos_dtype,
                               rotary_mode, start, end, num_threads=0):
        """The backward of norm_by_positions for one tensor: dx (None: not wanted) and the weight's gradient
        (fp32 [D], None: not wanted) from dy, the output's gradient, and x, the forward's input."""
        return self._norm_positions_grad(dy, x, dx, weight, weight_grad, _c_name(weight_dtype), eps, offset, cos, sin,
                                         positions, _c_positions_shape(positions_shape), lane_channels, *axes,
                                         _c_shape(shape), _c_shape(cache_shape), _c_name(dtype), _c_name(cos_dtype),
                                         rotary_mode, start, end, num_threads)


# A decode step calls the kernel with the same shapes and dtype names each time: their C forms are made once
# (the kernel only reads them).
def _c_shape(shape):
    return _c_array(_SHAPE_ARRAY, tuple(shape))


def _c_positions_shape(shape):
    return _c_array(_POSITIONS_ARRAY, tuple(shape))


@functools.lru_cache(maxsize=1024)
def _c_array(kind, values):
    return kind(*values)


@functools.lru_cache(maxsize=None)
def _c_name(name):
    return None if name is None else name.encode()


@functools.lru_cache(maxsize=None)
def load(path=None):
    """The CompiledKernel at `path` (default: the installed one), loaded once."""
    return CompiledKernel(path or LIB_PATH)


def raise_for_status(status):
    if status:
        message = load().status_message(status) or status
        raise KernelError(f"ms_rotary: the CPU kernel rejected its arguments: {message}")


@functools.lru_cache(maxsize=None)
def _lane_channels_array(lane_channels):
    return np.ascontiguousarray(lane_channels, np.int64)


def lane_channels_pointer(lane_channels):
    """The int64 array rotate_by_positions reads each cos lane's position channel from, or None."""
    return None if lane_channels is None else _lane_channels_array(lane_channels).ctypes.data
