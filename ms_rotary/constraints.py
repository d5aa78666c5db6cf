"""Every input rule of the operator, in one place. Each broken rule raises ValueError/TypeError naming the
argument, the value and the rule, before any kernel runs. Used by the infer functions (both modes) and
by the eager entry (rules only a live tensor can show: type, contiguity, aliasing)."""
import math
import numbers

import mindspore as ms

from .modes import MODE_NAMES

MAX_HEAD_DIM = 1024
FLOAT_DTYPES = (ms.float32, ms.float16, ms.bfloat16)
INT64_MAX = 2**63 - 1  # partial_slice values and tensor byte counts travel as int64
_PREFIX = "ms_rotary"


def normalize_mode(rotary_mode):
    """0..3 or a mode name -> int."""
    if isinstance(rotary_mode, str):
        if rotary_mode not in MODE_NAMES:
            raise ValueError(f"{_PREFIX}: rotary_mode={rotary_mode!r} is not a mode name; "
                             f"use one of {list(MODE_NAMES)} or 0..3")
        return MODE_NAMES.index(rotary_mode)
    if isinstance(rotary_mode, bool) or not isinstance(rotary_mode, numbers.Integral):
        raise TypeError(f"{_PREFIX}: rotary_mode must be an int 0..3 or one of {list(MODE_NAMES)}, "
                        f"got {rotary_mode!r} of type {type(rotary_mode).__name__}")
    if not 0 <= rotary_mode <= 3:
        raise ValueError(f"{_PREFIX}: rotary_mode={rotary_mode} is out of range; "
                         f"use 0 half, 1 interleave, 2 quarter or 3 interleave-half")
    return int(rotary_mode)


def normalize_slice(partial_slice):
    """None (meaning [0, cos.shape[-1]]) or a list/tuple of two ints -> None or (start, end)."""
    if partial_slice is None:
        return None
    if not isinstance(partial_slice, (list, tuple)) or len(partial_slice) != 2:
        raise TypeError(f"{_PREFIX}: partial_slice must be None or [start, end] (a list or tuple of two ints), "
                        f"got {partial_slice!r}")
    for value in partial_slice:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{_PREFIX}: partial_slice={list(partial_slice)!r} must hold ints, "
                            f"got {value!r} of type {type(value).__name__}")
    start, end = int(partial_slice[0]), int(partial_slice[1])
    if start < 0 or end < start:
        raise ValueError(f"{_PREFIX}: partial_slice=[{start}, {end}] is invalid; need 0 <= start <= end")
    if end > INT64_MAX:
        raise ValueError(f"{_PREFIX}: partial_slice=[{start}, {end}] is out of range; values must fit in int64 "
                         f"(and end <= D <= {MAX_HEAD_DIM} at call time)")
    return start, end


def is_empty_work(dy_shape, cos_shape, start, end):
    """Empty work (docs/operator.md): nothing to rotate, or a zero-sized axis in dy or cos/sin (whose shapes
    are equal)."""
    return start == end or 0 in tuple(dy_shape) or 0 in tuple(cos_shape)


def resolve_slice(partial_slice, cos_shape):
    """The [start, end) the op rotates: None means [0, cos.shape[-1]]."""
    if partial_slice is None:
        return 0, int(cos_shape[-1]) if len(cos_shape) else 0
    return partial_slice


def check_shapes(dy_shape, cos_shape, sin_shape, rotary_mode, partial_slice, dy_name="dy"):
    """Checks the shape rules; returns the resolved (start, end). Empty work wins over the rules that only
    matter when there is something to rotate (D limit, slice divisibility, broadcast, cos/sin length), as in
    CANN's tiling; rank, static dims, cos == sin and the slice range always apply."""
    dy_shape, cos_shape, sin_shape = tuple(dy_shape), tuple(cos_shape), tuple(sin_shape)
    for name, shape in ((dy_name, dy_shape), ("cos", cos_shape), ("sin", sin_shape)):
        if len(shape) != 4:
            raise ValueError(f"{_PREFIX}: {name} must be 4-D [B, S, N, D] (BSND), got shape {shape}")
        if any(dim < 0 for dim in shape):
            raise ValueError(f"{_PREFIX}: {name} has an unknown (dynamic) dimension in shape {shape}; this op needs "
                             f"static shapes. ms.jit(dynamic=1) compiles the third input shape it meets as dynamic: "
                             f"keep dynamic=0 (one graph per shape) or pad inputs to a few fixed shapes")
        if math.prod(shape) > INT64_MAX // 4:
            raise ValueError(f"{_PREFIX}: {name} shape {shape} has more elements than int64 byte offsets can address")
    if cos_shape != sin_shape:
        raise ValueError(f"{_PREFIX}: cos and sin must have identical shapes, got cos {cos_shape} and sin {sin_shape}")
    head_dim = dy_shape[3]
    start, end = resolve_slice(partial_slice, cos_shape)
    if not 0 <= start <= end <= head_dim:
        raise ValueError(f"{_PREFIX}: partial_slice=[{start}, {end}] is out of range; "
                         f"need 0 <= start <= end <= D={head_dim}")
    if is_empty_work(dy_shape, cos_shape, start, end):
        return start, end
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"{_PREFIX}: {dy_name}.shape[-1]={head_dim} exceeds the supported maximum D <= {MAX_HEAD_DIM}")
    length = end - start
    multiple = 4 if rotary_mode == 2 else 2
    if length % multiple:
        raise ValueError(f"{_PREFIX}: partial_slice=[{start}, {end}] has length {length}, which rotary_mode="
                         f"{rotary_mode} ({MODE_NAMES[rotary_mode]}) needs divisible by {multiple}")
    for axis, axis_name in enumerate("BSN"):
        if cos_shape[axis] not in (1, dy_shape[axis]):
            raise ValueError(f"{_PREFIX}: cos/sin shape {cos_shape} does not broadcast to {dy_name} shape {dy_shape}: "
                             f"axis {axis_name} is {cos_shape[axis]}, must be 1 or {dy_shape[axis]}")
    if cos_shape[3] != length:
        raise ValueError(f"{_PREFIX}: cos/sin last dim is {cos_shape[3]} but partial_slice=[{start}, {end}] "
                         f"has length {length}; they must be equal")
    return start, end


def _dtype_name(dtype):
    return str(dtype).replace("mindspore.", "").lower()  # Float32 -> float32, as users spell it


def element_dtype(dtype):
    """ms.float32 from either ms.float32 or the TensorType an infer function receives."""
    return dtype.element_type() if hasattr(dtype, "element_type") else dtype


def check_dtypes(dy_dtype, cos_dtype, sin_dtype, dy_name="dy"):
    """Checks the dtype rules (dy any float type; cos, sin the same float type, independent of dy's)."""
    for name, dtype in ((dy_name, dy_dtype), ("cos", cos_dtype), ("sin", sin_dtype)):
        if element_dtype(dtype) not in FLOAT_DTYPES:
            raise TypeError(f"{_PREFIX}: {name} has dtype {_dtype_name(element_dtype(dtype))}; "
                            f"supported are float32, float16, bfloat16")
    cos_element, sin_element = element_dtype(cos_dtype), element_dtype(sin_dtype)
    if cos_element != sin_element:
        raise TypeError(f"{_PREFIX}: cos and sin must have the same dtype, got cos {_dtype_name(cos_element)} "
                        f"and sin {_dtype_name(sin_element)}")


def _byte_range(tensor):
    start = tensor.data_ptr()
    return start, start + tensor.nbytes


def require_contiguous(dy, dy_name="dy"):
    """An in-place write into a non-contiguous view would land in a copy and be lost: refuse it."""
    if not dy.is_contiguous():
        raise ValueError(f"{_PREFIX}: {dy_name} must be contiguous (its stride is {dy.stride()}); "
                         f"the op writes into its memory, call .contiguous() first and use the result")


def require_whole_storage(dy, dy_name="dy"):
    """A compiled graph cannot write a view of part of a tensor in place (MindSpore 2.10's InplaceCopy fails on
    it); a view of a whole tensor is written through."""
    if dy.size and (dy.storage_offset() != 0 or dy.untyped_storage().nbytes() != dy.nbytes):
        raise ValueError(f"{_PREFIX}: {dy_name} is a view of part of a larger tensor (storage offset "
                         f"{dy.storage_offset()}); GRAPH_MODE cannot write it in place. Pass {dy_name}.copy() "
                         f"and use the result, or call the op in PyNative")


def check_eager_inputs(dy, cos, sin, dy_name="dy", in_place=True, writes_memory=True):
    """Rules a live tensor shows: types; an in-place call's dy contiguous, and, when the call writes its
    memory, not overlapping cos/sin. A tensor made with `init=` and not yet materialised is materialised
    here, as a graph does with its inputs: without it, an eager kernel would read no memory at all."""
    for name, value in ((dy_name, dy), ("cos", cos), ("sin", sin)):
        if not isinstance(value, ms.Tensor):
            raise TypeError(f"{_PREFIX}: {name} must be a mindspore.Tensor, got {type(value).__name__}")
        if value.init is not None:
            value.init_data()
    if not in_place:
        return
    require_contiguous(dy, dy_name)
    if not writes_memory or dy.size == 0:
        return
    dy_lo, dy_hi = _byte_range(dy)
    for name, value in (("cos", cos), ("sin", sin)):
        if value.size == 0:
            continue
        lo, hi = _byte_range(value)
        if lo < dy_hi and dy_lo < hi:
            raise ValueError(f"{_PREFIX}: {name} shares memory with {dy_name}; the op writes {dy_name} in place, "
                             f"pass a separate cos/sin tensor")
