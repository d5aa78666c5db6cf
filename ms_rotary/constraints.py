"""Every input rule of the operator, in one place. Each broken rule raises ValueError/TypeError naming the
argument, the value and the rule, before any kernel runs. Used by the infer functions (both modes), by a
traced call's construct at compile time (the positions' form) and by the eager entry (rules only a live tensor
can show: type, contiguity, aliasing, the positions' values)."""
import math
import numbers

import mindspore as ms
import numpy as np

from .modes import MODE_NAMES

MAX_HEAD_DIM = 1024
MAX_POSITION_AXES = 4  # M-RoPE's position axes at most (HunYuan-VL: four; kernel/common kMaxPositionChannels)
FLOAT_DTYPES = (ms.float32, ms.float16, ms.bfloat16)
INT64_MAX = 2**63 - 1  # partial_slice values and tensor byte counts travel as int64
_PREFIX = "ms_rotary"
LAYER = "ms_rotary.RotaryEmbedding"  # the prefix of the positions' rules: only the layer reads a cache


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


def dtype_name(dtype):
    """float32 (as users spell it) from ms.float32, the TensorType an infer function receives, or a numpy dtype."""
    if hasattr(dtype, "element_type"):
        dtype = dtype.element_type()
    return getattr(dtype, "name", None) or str(dtype).replace("mindspore.", "").lower()


def element_dtype(dtype):
    """ms.float32 from either ms.float32 or the TensorType an infer function receives."""
    return dtype.element_type() if hasattr(dtype, "element_type") else dtype


def check_dtypes(dy_dtype, cos_dtype, sin_dtype, dy_name="dy"):
    """Checks the dtype rules (dy any float type; cos, sin the same float type, independent of dy's)."""
    for name, dtype in ((dy_name, dy_dtype), ("cos", cos_dtype), ("sin", sin_dtype)):
        if element_dtype(dtype) not in FLOAT_DTYPES:
            raise TypeError(f"{_PREFIX}: {name} has dtype {dtype_name(element_dtype(dtype))}; "
                            f"supported are float32, float16, bfloat16")
    cos_element, sin_element = element_dtype(cos_dtype), element_dtype(sin_dtype)
    if cos_element != sin_element:
        raise TypeError(f"{_PREFIX}: cos and sin must have the same dtype, got cos {dtype_name(cos_element)} "
                        f"and sin {dtype_name(sin_element)}")


def byte_span(tensor):
    """(first byte, end) of a tensor's memory; (0, 0) for an empty one, which overlaps nothing."""
    if not tensor.size:
        return 0, 0
    start = tensor.data_ptr()
    return start, start + tensor.nbytes


def spans_overlap(a, b):
    return a[0] < b[1] and b[0] < a[1]


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


def check_eager_inputs(tensors, names, cos, sin, in_place=True, writes_memory=True):
    """Rules live tensors show: types; an in-place call's rotated tensors contiguous, and, when the call writes
    their memory, apart from each other and from cos/sin. A tensor made with `init=` and not yet materialised
    is materialised here, as a graph does with its inputs: without it, an eager kernel would read no memory."""
    for name, value in zip((*names, "cos", "sin"), (*tensors, cos, sin)):
        if not isinstance(value, ms.Tensor):
            raise TypeError(f"{_PREFIX}: {name} must be a mindspore.Tensor, got {type(value).__name__}")
        if value.init is not None:
            value.init_data()
    if not in_place:
        return
    for tensor, name in zip(tensors, names):
        require_contiguous(tensor, name)
    if not writes_memory:
        return
    written = [(tensor, name) for tensor, name in zip(tensors, names) if tensor.size]
    for index, (tensor, name) in enumerate(written):
        for other, other_name in [*written[index + 1:], (cos, "cos"), (sin, "sin")]:
            if other.size and overlap(tensor, other):
                raise ValueError(shared_memory_error(_PREFIX, name, other_name))


def shared_memory_error(op, written, other):
    """The refusal of a call that writes `written` in place while `other` shares its memory: eagerly, and by the
    apart guard of a graph (targets/cpu.py, ApartGuard)."""
    return (f"{op}: {other} shares memory with {written}, which it writes in place; pass {other} in memory of "
            f"its own")


def overlap(a, b):
    return spans_overlap(byte_span(a), byte_span(b))


# --- positions: a cache read at each token's position (RotaryEmbedding) ----------------------------------
# The forms a layer takes, by (position channels a token, channel axis last): (shapes in words, the shape for
# q's B and S, what). Quarter mode's two channels come last; M-RoPE's axes (two or more) first.
_POSITIONS_FORMS = {(1, False): ("[S] or [B, S]", "[{b}, {s}]", ""),
                    (2, True): ("[S, 2] or [B, S, 2]", "[{b}, {s}, 2]", " (quarter mode: token and block position)"),
                    (3, False): ("[3, S] or [3, B, S]", "[3, {b}, {s}]", " (M-RoPE: time, height, width)")}
# Up to this many positions (a decode step's) are read and checked as Python lists: numpy's per-call costs
# exceed the work there.
FEW_POSITIONS = 64
# Integer dtypes whose every value int64 holds (uint64 does not: 2**64 - 1 would read as -1).
POSITION_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")


def positions_rule(channels, batch=None, seq=None, channel_last=False):
    """The positions a layer takes, with q's B and S when known."""
    forms, shape, what = _POSITIONS_FORMS.get((channels, channel_last)) or \
        (f"[{channels}, S] or [{channels}, B, S]", f"[{channels}, {{b}}, {{s}}]", " (M-RoPE: one row an axis)")
    return forms + (f" = {shape.format(b=batch, s=seq)}" if batch is not None else "") + what


def positions_form(shape, dtype, channels, channel_last=False):
    """Checks the caller's positions (positions_rule); raises naming the rule. channel_last: quarter mode's
    [.., S, 2] (moved first for the kernels). Shared by the eager path and a traced call (there at compile
    time: shape and dtype are constants)."""
    shape, name = tuple(shape), dtype_name(dtype)
    if name not in POSITION_DTYPES:
        raise TypeError(f"{LAYER}: positions must hold integers ({', '.join(POSITION_DTYPES)}), got dtype {name}"
                        + ("; cast them to int64" if name == "uint64" else ""))
    if channels == 1:
        fits = len(shape) in (1, 2)
    else:
        fits = len(shape) in (2, 3) and shape[-1 if channel_last else 0] == channels
    if not fits:
        raise ValueError(f"{LAYER}: positions of shape {shape} must be "
                         f"{positions_rule(channels, channel_last=channel_last)}")


def kernel_positions(positions, channels, channel_last=False):
    """positions in the caller's form (a tensor, a numpy array or a list) -> the kernels' form: int64, channels
    first ([S], [B, S], [channels, S] or [channels, B, S]; positions_view reads it as 3-D). One function for
    the eager path (numpy stays numpy, read on the host) and a traced call (a tensor, or a list or array
    that becomes a constant): both spell astype and transpose alike."""
    if not isinstance(positions, (ms.Tensor, np.ndarray)):
        positions = np.asarray(positions) if len(positions) else np.zeros(0, np.int64)
    positions_form(positions.shape, positions.dtype, channels, channel_last)
    if dtype_name(positions.dtype) != "int64":
        positions = positions.astype(np.int64 if isinstance(positions, np.ndarray) else ms.int64)
    if channel_last:
        positions = positions.transpose(1, 0) if len(positions.shape) == 2 else positions.transpose(2, 0, 1)
    return positions


def positions_view(shape, channels):
    """(channels, batch, S) of positions in the kernels' form (kernel_positions), or None if it is not one."""
    shape = tuple(shape)
    if len(shape) == 3 and shape[0] == channels:
        return shape
    if len(shape) == 2:
        return (channels, 1, shape[1]) if channels > 1 and shape[0] == channels else \
            (1, shape[0], shape[1]) if channels == 1 else None
    return (1, 1, shape[0]) if len(shape) == 1 and channels == 1 else None


def check_cache_read(call, shapes, cos_shape, sin_shape, positions_shape, names=None):
    """The shape rules of a call that reads cos/sin from a cache: each rotated tensor (`names`, default the
    call's) is [B, S, N, D] in the call's layout with D the layer's head_dim, and follows the op's rules for one
    cos/sin row; q and k share B and S; the cache is [1, P, 1, L]; positions are [channels, 1|B, S]."""
    cache, length = call.cache, call.partial_slice[1] - call.partial_slice[0]
    for name, shape in zip(names or call.rotated_names, shapes):
        shape = tuple(shape)
        if len(shape) != 4 or shape[-1] != cache.head_dim:
            raise ValueError(f"{LAYER}: {name} of shape {shape} must be 4-D {cache.layout} with D = "
                             f"head_dim={cache.head_dim}")
        check_shapes(shape, (1, 1, 1, length), (1, 1, 1, length), call.rotary_mode, call.partial_slice, name)
    b_axis, s_axis = cache.axes
    batch, seq = shapes[0][b_axis], shapes[0][s_axis]
    if len(shapes) == 2 and (shapes[1][b_axis], shapes[1][s_axis]) != (batch, seq):
        raise ValueError(f"{LAYER}: q {tuple(shapes[0])} and k {tuple(shapes[1])} must share B and S")
    for name, shape in (("cos_cache", cos_shape), ("sin_cache", sin_shape)):
        if len(shape) != 4 or (shape[0], shape[2], shape[3]) != (1, 1, length):
            raise ValueError(f"{LAYER}: {name} of shape {tuple(shape)} must be [1, P, 1, {length}]")
    if tuple(cos_shape) != tuple(sin_shape):
        raise ValueError(f"{LAYER}: the cos and sin caches differ in shape: {tuple(cos_shape)}, {tuple(sin_shape)}")
    view = positions_view(positions_shape, cache.channels)
    if view is None or view[1] not in (1, batch) or view[2] != seq:
        got = f"of shape {tuple(positions_shape)}" if view is None else f"for B = {view[1]}, S = {view[2]}"
        raise ValueError(f"{LAYER}: positions {got} do not fit q {tuple(shapes[0])}; they must be "
                         f"{positions_rule(cache.channels, batch, seq, call.rotary_mode == 2)}")


def check_cache_read_call(call, shapes, dtypes, cos_shape, sin_shape, cos_dtype, sin_dtype, positions_shape):
    """Every rule of a cache read that shapes and dtypes show: eagerly, and in a traced call at compile time."""
    for name, dtype in zip(call.rotated_names, dtypes):
        check_dtypes(dtype, cos_dtype, sin_dtype, name)
    if len(dtypes) == 2 and element_dtype(dtypes[0]) != element_dtype(dtypes[1]):
        raise TypeError(f"{LAYER}: q and k must share a dtype, got {dtype_name(dtypes[0])} and "
                        f"{dtype_name(dtypes[1])}")
    check_cache_read(call, shapes, cos_shape, sin_shape, positions_shape)


def position_outside_cache(position, cache_rows, rows_per_call=False):
    """The refusal of a position outside the cache (eagerly here; in a graph the compiled kernel fills it in).
    Rows computed per call (length_rope) are read at 0..n-1, so only a negative position reaches the check."""
    if rows_per_call:
        return f"{LAYER}: position {position} is negative; positions must be >= 0"
    return (f"{LAYER}: position {position} is outside the cos/sin cache [0, {cache_rows}); build the layer with "
            f"cache_positions above the largest position it will see")


def check_positions_range(positions, cache_rows, rows_per_call=False):
    """positions: a numpy integer array; each must lie in [0, cache_rows)."""
    if not positions.size:
        return
    if positions.size <= FEW_POSITIONS:  # a decode step's: Python's min and max, not numpy's slower reductions
        values = positions.ravel().tolist()
        low, high = min(values), max(values)
    else:
        low, high = positions.min(), positions.max()
    if low < 0 or high >= cache_rows:
        raise ValueError(position_outside_cache(int(low if low < 0 else high), cache_rows, rows_per_call))


def check_norm_weight(name, head_dim, shape=None, dtype=None):
    """A head norm's weight: [head_dim], a float dtype (any of the three, independent of q's)."""
    if shape is not None and tuple(shape) != (head_dim,):
        raise ValueError(f"{LAYER}: {name} of shape {tuple(shape)} must be [head_dim] = [{head_dim}]: the norm "
                         f"scales each lane of a head")
    if dtype is not None and element_dtype(dtype) not in FLOAT_DTYPES:
        raise TypeError(f"{LAYER}: {name} has dtype {dtype_name(element_dtype(dtype))}; supported are float32, "
                        f"float16, bfloat16")
