"""The numpy kernel: the pyfunc fallback backend and the readable statement of what the C++ kernel does.

Same fp32 operation order as kernel/cpu/rotary_kernel.cc (built without FMA contraction), so fp32
results agree bit for bit; bf16/fp16 are computed in fp32 and rounded once on store."""
import numpy as np

from .constraints import is_empty_work
from .modes import lane_pairs


def rotate(x, cos, sin, mode, start, end, conjugate, keep_float32=False):
    """Returns a copy of x whose lanes [start, end) are rotated (conjugate=True: the backward).
    keep_float32: a bf16 x gives an fp32 result, left for the caller to round."""
    out = x.astype(np.float32) if keep_float32 and x.dtype.name == "bfloat16" else x.copy()
    if is_empty_work(x.shape, cos.shape, start, end):
        return out
    d = x[..., start:end].astype(np.float32)
    c = cos.astype(np.float32)
    s = sin.astype(np.float32)
    xa, xb, ya, yb = lane_pairs(mode, end - start)
    res = np.empty(np.broadcast_shapes(d.shape, c.shape), np.float32)
    if conjugate:
        da, db = d[..., ya], d[..., yb]
        res[..., xa] = da * c[..., ya] + db * s[..., yb]
        res[..., xb] = db * c[..., yb] - da * s[..., ya]
    else:
        va, vb = d[..., xa], d[..., xb]
        res[..., ya] = va * c[..., ya] - vb * s[..., ya]
        res[..., yb] = vb * c[..., yb] + va * s[..., yb]
    out[..., start:end] = res.astype(out.dtype)
    return out
