"""The public operators: RotaryFunctions with their arguments checked.

  InplacePartialRotaryMulGrad(mode, slice)(dy, cos, sin) -> dy   backward, in place
  InplacePartialRotaryMul(mode, slice)(x, cos, sin)     -> x    forward, in place
  PartialRotaryMul(mode, slice)(x, cos, sin)            -> y    forward, out of place (keeps x)

Each is differentiable, to any order, for its first input and for cos and sin (functions.py)."""
import functools
import warnings

import mindspore as ms
from mindspore import context

from .call import RotaryCall
from .constraints import check_eager_inputs, normalize_mode, normalize_slice, require_whole_storage
from .functions import InPlaceRotary, RotaryFunction, is_pynative, is_recording


class _RotaryOp:
    """Attributes are checked once at construction, live tensors on each eager call (a mixin over
    functions.InPlaceRotary / RotaryFunction)."""

    _conjugate = False
    _in_place = True
    _input_name = "x"

    def __init__(self, rotary_mode=1, partial_slice=None, backend=None):
        call = RotaryCall(normalize_mode(rotary_mode), normalize_slice(partial_slice), self._conjugate,
                          self._in_place, self._input_name)
        super().__init__(call, backend)
        self.rotary_mode = call.rotary_mode
        self.partial_slice = call.partial_slice

    def __call__(self, *args, **kwargs):
        if len(args) != 3 or kwargs:
            raise TypeError(f"ms_rotary: {type(self).__name__} takes ({self._input_name}, cos, sin), "
                            f"got {len(args)} positional and {sorted(kwargs)} keyword arguments")
        # While PyNative autograd records, an in-place call rebinds x instead of writing its memory: no aliasing
        # to check (reading data_ptr would also wait for MindSpore's queue).
        writes_memory = self._in_place and not (is_pynative() and is_recording())
        check_eager_inputs(*args, dy_name=self._input_name, in_place=self._in_place, writes_memory=writes_memory)
        graph = context._get_mode() == ms.GRAPH_MODE
        if graph and self._in_place:
            require_whole_storage(args[0], self._input_name)
        out = super().__call__(*args)
        # A compiled graph returns new Tensor objects; the in-place ops return the caller's own.
        return args[0] if graph and self._in_place else out

    def extend_repr(self):
        return f"rotary_mode={self.rotary_mode}, partial_slice={self.partial_slice}, backend={self.backend!r}"


class InplacePartialRotaryMulGrad(_RotaryOp, InPlaceRotary):
    """Backward of partial RoPE: dy[..., start:end] becomes dx; the rest of dy is untouched. Returns dy."""

    _conjugate = True
    _input_name = "dy"


class InplacePartialRotaryMul(_RotaryOp, InPlaceRotary):
    """Forward of partial RoPE, y = x*cos + rot(x)*sin on x[..., start:end], written into x. Returns x."""


class PartialRotaryMul(_RotaryOp, RotaryFunction):
    """Forward of partial RoPE into a new tensor; x is kept."""

    _in_place = False

    def __init__(self, rotary_mode=1, partial_slice=None, cos_sin_grad=None, backend=None):
        if cos_sin_grad is not None:
            warnings.warn("ms_rotary: PartialRotaryMul(cos_sin_grad=...) is ignored: cos and sin always get their "
                          "gradients", FutureWarning, stacklevel=2)
        super().__init__(rotary_mode, partial_slice, backend)


@functools.lru_cache(maxsize=64)
def _partial_rotary_mul_cell(rotary_mode, partial_slice, backend):
    return PartialRotaryMul(rotary_mode, partial_slice, backend=backend)


def partial_rotary_mul(x, cos, sin, rotary_mode=1, partial_slice=None, backend=None):
    """Functional, out-of-place forward (PyNative). In graph code, hold a PartialRotaryMul cell instead."""
    # Validated before the cache: its keys must not equate True with 1 or 8.0 with 8.
    return _partial_rotary_mul_cell(normalize_mode(rotary_mode), normalize_slice(partial_slice), backend)(x, cos, sin)
