"""The numpy kernel: the pyfunc fallback backend and the readable statement of what the C++ kernel does.

Same fp32 operation order as the C++ kernel (kernel/cpu/rotary_rows.h, built without FMA contraction), so
results agree bit for bit; bf16/fp16 are computed in fp32 and rounded once on store, bf16 with the kernel's own rounding
(NaN stays a quiet NaN with its sign). bf16 travels as its uint16 bits here."""
import contextlib
import ctypes
import ctypes.util

import numpy as np

from .modes import lane_pairs

BF16_BITS = np.uint16  # how a bf16 array is held: the upper half of its float32


def to_float32(values, dtype_name):
    if dtype_name == "bfloat16":
        return (np.asarray(values, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(values).astype(np.float32)


def from_float32(values, dtype_name):
    """float32 -> dtype_name's storage (bf16: uint16 bits, round to nearest even)."""
    if dtype_name == "float32":
        return values.astype(np.float32, copy=False)
    if dtype_name == "float16":
        return values.astype(np.float16)
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    is_nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(is_nan, (bits >> 16) | np.uint32(0x40), rounded).astype(np.uint16)


def from_float64(values, dtype_name):
    """float64 -> dtype_name's storage, rounded once (the kernel's store_rounded): bf16 through a float32
    rounded to odd, whose nearest-even rounding to bf16 is then that of the float64 itself."""
    values = np.asarray(values, np.float64)
    if dtype_name != "bfloat16":
        return values.astype(np.float16 if dtype_name == "float16" else np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        single = values.astype(np.float32)
        single = np.where(np.abs(single.astype(np.float64)) > np.abs(values), np.nextafter(single, np.float32(0)),
                          single)
        inexact = (single.astype(np.float64) != values) & ~np.isnan(values)
    bits = np.ascontiguousarray(single).view(np.uint32) | inexact.astype(np.uint32)
    return from_float32(bits.view(np.float32), "bfloat16")


_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_FE_DFL_ENV = ctypes.c_void_p(-1)  # glibc's FE_DFL_ENV: round to nearest, denormals kept, exceptions masked


@contextlib.contextmanager
def default_fp_environment():
    """MindSpore runs graph-mode pyfuncs on threads that flush denormals to zero (MXCSR FTZ/DAZ): numpy
    there runs with the default environment, as the C++ kernel does, so results match in every mode. inf and
    NaN inputs are valid, as in the kernel: numpy's RuntimeWarnings on them are silenced."""
    saved = ctypes.create_string_buffer(64)  # fenv_t is 32 bytes on x86-64
    with np.errstate(all="ignore"):
        if _LIBM.fegetenv(saved) != 0:
            yield
            return
        _LIBM.fesetenv(_FE_DFL_ENV)
        try:
            yield
        finally:
            _LIBM.fesetenv(saved)


def rotate_slice(d, c, s, rotary_mode, conjugate):
    """The rotated lanes of a slice, float32: d [..., L] (x's layout forward, y's backward), c and s
    broadcastable to it; conjugate=True is the backward."""
    xa, xb, ya, yb = lane_pairs(rotary_mode, d.shape[-1])
    res = np.empty(np.broadcast_shapes(d.shape, c.shape), np.float32)
    if conjugate:
        da, db = d[..., ya], d[..., yb]
        res[..., xa] = da * c[..., ya] + db * s[..., yb]
        res[..., xb] = db * c[..., yb] - da * s[..., ya]
    else:
        va, vb = d[..., xa], d[..., xb]
        res[..., ya] = va * c[..., ya] - vb * s[..., ya]
        res[..., yb] = vb * c[..., yb] + va * s[..., yb]
    return res


def rotate(x, cos, sin, rotary_mode, start, end, conjugate):
    """A float32 copy of x (any float numpy dtype) with lanes [start, end) rotated; the caller has ruled out
    empty work."""
    out = np.asarray(x).astype(np.float32)
    out[..., start:end] = rotate_slice(out[..., start:end], np.asarray(cos).astype(np.float32),
                                       np.asarray(sin).astype(np.float32), rotary_mode, conjugate)
    return out


def cos_sin_grads(y_side, x_side, cos_shape, rotary_mode):
    """float64 dcos, dsin of shape cos_shape from the slices y_side (y's layout) and x_side (x's layout),
    [B, S, N, L] each: the sums of kernel/cpu/rotary_kernel.cc's run_cos_sin_grad."""
    y_side, x_side = np.asarray(y_side, np.float64), np.asarray(x_side, np.float64)
    xa, xb, ya, yb = lane_pairs(rotary_mode, y_side.shape[-1])
    dcos, dsin = np.empty_like(y_side), np.empty_like(y_side)
    dcos[..., ya], dcos[..., yb] = y_side[..., ya] * x_side[..., xa], y_side[..., yb] * x_side[..., xb]
    dsin[..., ya], dsin[..., yb] = -y_side[..., ya] * x_side[..., xb], y_side[..., yb] * x_side[..., xa]
    axes = tuple(axis for axis in range(3) if cos_shape[axis] == 1 and y_side.shape[axis] != 1)
    return dcos.sum(axis=axes, keepdims=True), dsin.sum(axis=axes, keepdims=True)


NORM_SUMS = 16  # running sums of rotary_rows.h's sum_of_products


def sum_of_products(a, b):
    """float32 sum over the last axis of a * b in the C++ kernel's fixed order (rotary_rows.h,
    sum_of_products): 16 running sums over 16-lane chunks, folded in halves, then the tail lanes one by one."""
    products = np.asarray(a, np.float32) * np.asarray(b, np.float32)
    lanes = products.shape[-1]
    full = lanes - lanes % NORM_SUMS
    sums = np.zeros(products.shape[:-1] + (NORM_SUMS,), np.float32)
    for chunk in range(0, full, NORM_SUMS):
        sums = sums + products[..., chunk:chunk + NORM_SUMS]
    width = NORM_SUMS // 2
    while width:
        sums = sums[..., :width] + sums[..., width:2 * width]
        width //= 2
    total = sums[..., 0]
    for lane in range(full, lanes):
        total = total + products[..., lane]
    return total


def inverse_rms(x, eps):
    """1 / sqrt(mean(x^2) + eps) over the last axis, float32, keeping it (rotary_rows.h, inverse_rms)."""
    x = np.asarray(x, np.float32)
    mean = sum_of_products(x, x) / np.float32(x.shape[-1])
    return (np.float32(1) / np.sqrt(mean + np.float32(eps)))[..., None]


def head_norm(x, gain, eps):
    """The kernel's head norm (rotary_kernel.h, HeadNorm) of float32 rows: x * r * gain, gain = offset + weight."""
    x = np.asarray(x, np.float32)
    return x * inverse_rms(x, eps) * np.asarray(gain, np.float32)


def head_norm_grad(d, x, gain, eps):
    """(dx float32, the gain's gradient float64 [D] summed over every row) of head_norm at x for its output's
    gradient d (rotary_rows.h, norm_grad_rows)."""
    x, d, gain = (np.asarray(v, np.float32) for v in (x, d, gain))
    r = inverse_rms(x, eps)
    xhat = x * r
    gd = d * gain
    c = sum_of_products(gd, xhat) / np.float32(x.shape[-1])
    dx = r * (gd - xhat * c[..., None])
    weight_grad = (d.astype(np.float64) * xhat.astype(np.float64)).reshape(-1, x.shape[-1]).sum(axis=0)
    return dx, weight_grad
