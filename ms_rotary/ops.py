"""The public operators: RotaryFunctions with their arguments checked.

  InplacePartialRotaryMulGrad(mode, slice)(dy, cos, sin) -> dy   backward, in place
  InplacePartialRotaryMul(mode, slice)(x, cos, sin)     -> x    forward, in place
  PartialRotaryMul(mode, slice)(x, cos, sin)            -> y    forward, out of place (keeps x)

Each is differentiable, to any order, for its first input and for cos and sin (functions.py)."""
import functools
import warnings

from . import routes
from .backend import choose_backend
from .call import RotaryCall
from .constraints import normalize_mode, normalize_slice
from .functions import InPlaceRotary, TableFunction

_ARGUMENTS = """
    Args:
        rotary_mode: 0 "half" (GPT-NeoX rotate-half), 1 "interleave" (GPT-J/GLM pairs, the default),
            2 "quarter" (ChatGLM-6B 2D: half on each half of the slice), 3 "interleave-half" (DeepSeek MLA: pairs
            in, halves out). cos/sin follow the output layout: cat(f, f) for 0 and 3, each frequency twice in a
            row for 1, cat(f1, f1, f2, f2) for 2; ``rope_cos_sin`` builds them.
        partial_slice: [start, end] of the last axis to rotate, 0 <= start <= end <= D, end - start even (a multiple
            of 4 for quarter) and equal to cos.shape[-1]; None means [0, cos.shape[-1]]. start == end, or any
            zero-sized axis, is a no-op.
        backend: "aot" (the compiled C++ kernel, default), "pyfunc" (numpy) or None (MS_ROTARY_BACKEND, else aot).

    Inputs ({name}, cos, sin):
        {name}: [B, S, N, D] float32/float16/bfloat16, contiguous, D <= 1024. The first three axes are positional
            (SBND and BNSD work with cos/sin shaped to match).
        cos, sin: [b, s, n, end - start], each of b, s, n equal to {name}'s axis or 1 (broadcast); one float dtype
            for both, independent of {name}'s. fp16/bf16 are computed in fp32 and rounded once.

    Gradients: for {name} (the other direction of the rotation) and for cos and sin (summed over their broadcast
    axes), to any order in graphs. Bad arguments raise ValueError/TypeError naming the argument, the value and
    the rule, before anything is written. Runs in PyNative, ms.jit and GRAPH_MODE on CPU; on Ascend with the
    custom OPP installed (kernel/ascend)."""

_IN_PLACE = """

    In place: PyNative without autograd recording writes {name}'s memory and returns {name}. While PyNative
    autograd records, the rotation is computed out of place and {name} is rebound to it (its old memory and
    other views of it keep the old values). In ms.jit / GRAPH_MODE the result is written back with MindSpore's
    InplaceCopy. Refused: a leaf that requires grad in PyNative, a view of part of a larger tensor passed into
    GRAPH_MODE, a compile-time constant target. See README "Autograd and in place"."""


class _RotaryOp:
    """Attributes are checked once at construction, live tensors on each call (a mixin over
    functions.InPlaceRotary / TableFunction, whose __call__ checks them)."""

    _conjugate = False
    _in_place = True
    _input_name = "x"

    def __init__(self, rotary_mode=1, partial_slice=None, backend=None):
        call = RotaryCall(normalize_mode(rotary_mode), normalize_slice(partial_slice), self._conjugate,
                          self._in_place, self._input_name)
        device_target = routes.device_target()
        super().__init__(call, choose_backend(backend, device_target), device_target, type(self).__name__)
        self.rotary_mode = call.rotary_mode
        self.partial_slice = call.partial_slice

    def __call__(self, *args, **kwargs):
        if len(args) != 3 or kwargs:
            raise TypeError(f"ms_rotary: {type(self).__name__} takes ({self._input_name}, cos, sin), "
                            f"got {len(args)} positional and {sorted(kwargs)} keyword arguments")
        return super().__call__(*args)

    def extend_repr(self):
        return f"rotary_mode={self.rotary_mode}, partial_slice={self.partial_slice}, backend={self.backend!r}"


class InplacePartialRotaryMulGrad(_RotaryOp, InPlaceRotary):
    """InplacePartialRotaryMulGrad(rotary_mode=1, partial_slice=None, backend=None)(dy, cos, sin) -> dy

    Backward of partial RoPE, in place: dy[..., start:end] becomes dx (the rotation by -angle), the rest of dy
    is untouched. Example: ``dy = InplacePartialRotaryMulGrad("interleave-half", [128, 192])(dy, cos, sin)``.
    """

    _conjugate = True
    _input_name = "dy"


class InplacePartialRotaryMul(_RotaryOp, InPlaceRotary):
    """InplacePartialRotaryMul(rotary_mode=1, partial_slice=None, backend=None)(x, cos, sin) -> x

    Forward of partial RoPE, in place: x[..., start:end] becomes x*cos + rotate(x)*sin; the rest of x is
    untouched. Its autograd runs the backward kernel. Example, GPT-NeoX rotary_pct 0.25 on 128-wide heads:
    ``q = InplacePartialRotaryMul("half", [0, 32])(q, cos, sin)``.
    """


class PartialRotaryMul(_RotaryOp, TableFunction):
    """PartialRotaryMul(rotary_mode=1, partial_slice=None, backend=None)(x, cos, sin) -> y

    Forward of partial RoPE out of place: y is x with y[..., start:end] = x*cos + rotate(x)*sin; x is kept.
    ``cos_sin_grad`` is accepted for compatibility and ignored (FutureWarning): cos/sin always get gradients.
    """

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
    """partial_rotary_mul(x, cos, sin, rotary_mode=1, partial_slice=None, backend=None) -> y

    Functional PartialRotaryMul for PyNative code (one cached cell per argument set). In graph code, hold a
    PartialRotaryMul cell instead.
    """
    # Validated before the cache: its keys must not equate True with 1 or 8.0 with 8.
    return _partial_rotary_mul_cell(normalize_mode(rotary_mode), normalize_slice(partial_slice), backend)(x, cos, sin)


for _op in (InplacePartialRotaryMulGrad, InplacePartialRotaryMul):
    _op.__doc__ += _ARGUMENTS.format(name=_op._input_name) + _IN_PLACE.format(name=_op._input_name)
PartialRotaryMul.__doc__ += _ARGUMENTS.format(name="x")
partial_rotary_mul.__doc__ += _ARGUMENTS.format(name="x")
