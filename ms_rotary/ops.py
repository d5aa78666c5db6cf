"""The public operators. Each declares its signature, its kernels and its bprop together.

  InplacePartialRotaryMulGrad(mode, slice)(dy, cos, sin) -> dy   backward, in place
  InplacePartialRotaryMul(mode, slice)(x, cos, sin)     -> x    forward, in place; autograd runs the backward
  PartialRotaryMul(mode, slice)(x, cos, sin)            -> y    forward, out of place (keeps x);
                                                                 optional cos/sin gradients
"""
import functools

import mindspore as ms
from mindspore import context, nn, ops

from .constraints import check_eager_inputs, normalize_mode, normalize_slice
from .kernels import RotaryKernel
from .modes import lane_pairs


class _RotaryCell(nn.Cell):
    """Shared constructor and eager entry: attributes are checked once, live tensors on each eager call."""

    _input_name = "dy"
    _returns_input = True

    def __init__(self, rotary_mode=1, partial_slice=None, backend=None):
        super().__init__()
        self.rotary_mode = normalize_mode(rotary_mode)
        self.partial_slice = normalize_slice(partial_slice)
        self.backend = backend

    def _kernel(self, conjugate, in_place):
        return RotaryKernel(self.rotary_mode, self.partial_slice, conjugate, in_place, self.backend,
                            dy_name=self._input_name)

    def __call__(self, *args, **kwargs):
        if len(args) != 3 or kwargs:
            raise TypeError(f"ms_rotary: {type(self).__name__} takes ({self._input_name}, cos, sin), "
                            f"got {len(args)} positional and {sorted(kwargs)} keyword arguments")
        check_eager_inputs(*args, dy_name=self._input_name, writes_dy=self._returns_input)
        out = super().__call__(*args)
        # A compiled graph returns new Tensor objects; the in-place ops return the caller's own. (In PyNative
        # `out` already is it, unless autograd wrapped it to record the bprop: then `out` must be returned.)
        return args[0] if self._returns_input and context._get_mode() == ms.GRAPH_MODE else out

    def extend_repr(self):
        return f"rotary_mode={self.rotary_mode}, partial_slice={self.partial_slice}"


class InplacePartialRotaryMulGrad(_RotaryCell):
    """Backward of partial RoPE: dy[..., start:end] becomes dx; the rest of dy is untouched. Returns dy."""

    def __init__(self, rotary_mode=1, partial_slice=None, backend=None):
        super().__init__(rotary_mode, partial_slice, backend)
        self.kernel = self._kernel(conjugate=True, in_place=True)

    def construct(self, dy, cos, sin):
        return self.kernel(dy, cos, sin)


class InplacePartialRotaryMul(_RotaryCell):
    """Forward of partial RoPE, y = x*cos + rot(x)*sin on x[..., start:end], written into x. Returns x.

    Its gradient for x is the backward kernel on a new buffer (dout is never written). cos/sin get zero
    gradients: their gradient needs the x this op overwrites; use PartialRotaryMul(cos_sin_grad=True)."""

    _input_name = "x"

    def __init__(self, rotary_mode=1, partial_slice=None, backend=None):
        super().__init__(rotary_mode, partial_slice, backend)
        self.kernel = self._kernel(conjugate=False, in_place=True)
        self.grad_kernel = self._kernel(conjugate=True, in_place=False)

    def construct(self, x, cos, sin):
        return self.kernel(x, cos, sin)

    def bprop(self, x, cos, sin, out, dout):
        return self.grad_kernel(dout, cos, sin), ops.zeros_like(cos), ops.zeros_like(sin)


class PartialRotaryMul(_RotaryCell):
    """Forward of partial RoPE into a new tensor; x is kept. With cos_sin_grad=True, cos and sin get
    gradients summed over their broadcast axes (off by default: the common case does not train them)."""

    _input_name = "x"
    _returns_input = False

    def __init__(self, rotary_mode=1, partial_slice=None, cos_sin_grad=False, backend=None):
        super().__init__(rotary_mode, partial_slice, backend)
        self.cos_sin_grad = bool(cos_sin_grad)
        self.kernel = self._kernel(conjugate=False, in_place=False)
        self.grad_kernel = self._kernel(conjugate=True, in_place=False)

    def construct(self, x, cos, sin):
        return self.kernel(x, cos, sin)

    def bprop(self, x, cos, sin, out, dout):
        dx = self.grad_kernel(dout, cos, sin)
        if self.cos_sin_grad:
            dcos, dsin = self._cos_sin_grads(x, cos, dout)
            return dx, dcos, dsin
        return dx, ops.zeros_like(cos), ops.zeros_like(sin)

    def _cos_sin_grads(self, x, cos, dout):
        # y[ya] = x[xa]*c[ya] - x[xb]*s[ya], y[yb] = x[xb]*c[yb] + x[xa]*s[yb]:
        # dc = dout * x_in_y_layout, ds = dout * rot(x)_in_y_layout, then summed to cos's shape.
        start, end = self.partial_slice if self.partial_slice is not None else (0, cos.shape[-1])
        same, other, sign = _cos_sin_gather(self.rotary_mode, end - start)
        xs = x[..., start:end].astype(ms.float32)
        ds = dout[..., start:end].astype(ms.float32)
        dcos = ds * ops.gather(xs, ms.Tensor(same), -1)
        dsin = ds * ops.gather(xs, ms.Tensor(other), -1) * ms.Tensor(sign)
        return dcos.sum_to_size(cos.shape).astype(cos.dtype), dsin.sum_to_size(cos.shape).astype(cos.dtype)


@functools.lru_cache(maxsize=None)
def _cos_sin_gather(rotary_mode, length):
    """For each cos/sin lane: the x lane it multiplies (cos), the x lane and sign it multiplies (sin)."""
    import numpy as np

    xa, xb, ya, yb = lane_pairs(rotary_mode, length)
    same = np.empty(length, np.int32)
    other = np.empty(length, np.int32)
    sign = np.empty(length, np.float32)
    same[ya], same[yb] = xa, xb
    other[ya], other[yb] = xb, xa
    sign[ya], sign[yb] = -1.0, 1.0
    return same, other, sign


@functools.lru_cache(maxsize=64)
def _partial_rotary_mul_cell(rotary_mode, partial_slice, cos_sin_grad, backend):
    return PartialRotaryMul(rotary_mode, partial_slice, cos_sin_grad, backend)


def partial_rotary_mul(x, cos, sin, rotary_mode=1, partial_slice=None, cos_sin_grad=False, backend=None):
    """Functional, out-of-place forward (PyNative). In graph code, hold a PartialRotaryMul cell instead."""
    key_slice = tuple(partial_slice) if partial_slice is not None else None
    return _partial_rotary_mul_cell(rotary_mode, key_slice, cos_sin_grad, backend)(x, cos, sin)
