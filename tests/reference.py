"""Float64 reference of the operator, written from the formulas in docs/operator.md with chunk/stack/cat,
independently of ms_rotary's lane tables and kernels."""
import numpy as np


def _chunk(a, n):
    return np.split(a, n, axis=-1)


def _interleave(first, second):
    return np.stack([first, second], axis=-1).reshape(*first.shape[:-1], first.shape[-1] * 2)


def _grad_half(d, c, s):
    d1, d2 = _chunk(d, 2)
    c1, c2 = _chunk(c, 2)
    s1, s2 = _chunk(s, 2)
    return np.concatenate([c1 * d1 + s2 * d2, c2 * d2 - s1 * d1], axis=-1)


def _forward_half(x, c, s):
    x1, x2 = _chunk(x, 2)
    c1, c2 = _chunk(c, 2)
    s1, s2 = _chunk(s, 2)
    return np.concatenate([x1 * c1 - x2 * s1, x2 * c2 + x1 * s2], axis=-1)


def _grad(mode, d, c, s):
    if mode == 0:
        return _grad_half(d, c, s)
    if mode == 1:
        d1, d2 = d[..., 0::2], d[..., 1::2]
        c1, c2 = c[..., 0::2], c[..., 1::2]
        s1, s2 = s[..., 0::2], s[..., 1::2]
        return _interleave(c1 * d1 + s2 * d2, c2 * d2 - s1 * d1)
    if mode == 2:
        d1, d2, d3, d4 = _chunk(d, 4)
        c1, c2, c3, c4 = _chunk(c, 4)
        s1, s2, s3, s4 = _chunk(s, 4)
        return np.concatenate([c1 * d1 + s2 * d2, c2 * d2 - s1 * d1, c3 * d3 + s4 * d4, c4 * d4 - s3 * d3], axis=-1)
    d1, d2 = _chunk(d, 2)
    c1, c2 = _chunk(c, 2)
    s1, s2 = _chunk(s, 2)
    return _interleave(c1 * d1 + s2 * d2, c2 * d2 - s1 * d1)


def _forward(mode, x, c, s):
    if mode == 0:
        return _forward_half(x, c, s)
    if mode == 1:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c1, c2 = c[..., 0::2], c[..., 1::2]
        s1, s2 = s[..., 0::2], s[..., 1::2]
        return _interleave(x1 * c1 - x2 * s1, x2 * c2 + x1 * s2)
    if mode == 2:
        xa, xb = _chunk(x, 2)
        ca, cb = _chunk(c, 2)
        sa, sb = _chunk(s, 2)
        return np.concatenate([_forward_half(xa, ca, sa), _forward_half(xb, cb, sb)], axis=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c1, c2 = _chunk(c, 2)
    s1, s2 = _chunk(s, 2)
    return np.concatenate([x1 * c1 - x2 * s1, x2 * c2 + x1 * s2], axis=-1)


def _apply(fn, mode, t, cos, sin, start, end):
    t = np.asarray(t, np.float64)
    out = t.copy()
    if end > start and t.size and np.size(cos):
        c = np.broadcast_to(np.asarray(cos, np.float64), t[..., start:end].shape)
        s = np.broadcast_to(np.asarray(sin, np.float64), t[..., start:end].shape)
        out[..., start:end] = fn(mode, t[..., start:end], c, s)
    return out


def rotary_grad(mode, dy, cos, sin, start, end):
    """dx: dy with [start, end) replaced by the backward of the forward below."""
    return _apply(_grad, mode, dy, cos, sin, start, end)


def rotary_forward(mode, x, cos, sin, start, end):
    """y: x with [start, end) rotated."""
    return _apply(_forward, mode, x, cos, sin, start, end)
