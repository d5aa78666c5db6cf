"""RotaryEmbedding: the layer a model calls with positions, over a cos/sin cache built once from its config.

    rope = ms_rotary.RotaryEmbedding.from_config(config)
    q_rot, k_rot = rope(q, k, positions)       # q [B, S, Nq, D], k [B, S, Nk, D], positions int [S] or [B, S]

The kernel reads each token's cos/sin row from the cache at its position (no gathered table is built) and
rotates q and k in one call; the backward is the same call transposed. Decoding passes the new tokens'
positions; packed sequences are B = 1 with positions that restart per sequence. Every mode (M-RoPE and
quarter mode read each lane at the position of its own channel), BSND/SBND/BNSD. CPU (the compiled kernel, or
the numpy fallback) and Ascend (kernel/ascend's ops that gather by position); PyNative, ms.jit and GRAPH_MODE;
out of place with gradients for q and k to any order, or in place."""
import dataclasses
import functools
import numbers

import mindspore as ms
import numpy as np
from mindspore import mint, nn, ops
from mindspore.graph.api import _pynative_executor
from mindspore.ops import functional as F
from mindspore.ops.auto_generate import Clone, Identity, InplaceCopy

from . import library, numpy_kernel, routes
from .backend import choose_backend
from .constraints import FLOAT_DTYPES, check_dtypes, check_shapes, element_dtype, normalize_mode
from .functions import CONSTANT_TARGET_ERROR, advance_version
from .kernels import (
    _HOST_DTYPES,
    DTYPE_NAMES,
    EAGER_OUT_OF_PLACE_MIN_SIZE,
    AscendKernel,
    _host_array,
    _host_float32,
    alias_after_write,
    reg_info,
)
from .modes import lane_pairs
from .rope_config import RopeConfig
from .rope_scaling import rope_type_of
from .routes import Route
from .tables import mrope_channels, rope_cos_sin

_PREFIX = "ms_rotary.RotaryEmbedding"
# Tables whose frequencies depend on the current sequence length: one cache cannot hold them.
_LENGTH_DEPENDENT = ("dynamic", "longrope")


# Each layout's (B axis, S axis) of q and k.
LAYOUT_AXES = {"BSND": (0, 1), "SBND": (1, 0), "BNSD": (0, 2)}


@dataclasses.dataclass(frozen=True)
class _GatherCall:
    rotary_mode: int
    start: int
    end: int
    conjugate: bool
    heads: int  # 1: q alone, 2: q and k
    axes: tuple = LAYOUT_AXES["BSND"]
    # Several positions per token: the channel each cos lane reads its position from. M-RoPE: 0 time, 1 height,
    # 2 width; quarter mode (ChatGLM-6B): 0 the token's position, 1 its block position.
    lane_channels: tuple = None
    cache_dtype: str = "float32"  # the cos/sin cache's (the Ascend ops' lane masks follow its bytes)

    @property
    def channels(self):
        if self.lane_channels is None:
            return 1
        return 2 if self.rotary_mode == 2 else 3

    def transpose(self):
        return dataclasses.replace(self, conjugate=not self.conjugate)


def _check(call, q_shape, k_shape, positions_shape):
    """The layer's shape rules (the op's rules for each of q and k with one cos/sin row, then the positions',
    normalised to [channels, 1 or B, S]): raises naming the argument before any kernel runs."""
    one_row = (1, 1, 1, call.end - call.start)
    for name, shape in (("q", q_shape), ("k", k_shape))[:call.heads]:
        check_shapes(shape, one_row, one_row, call.rotary_mode, (call.start, call.end), name)
    b_axis, s_axis = call.axes
    batch, seq = q_shape[b_axis], q_shape[s_axis]
    if call.heads == 2 and (k_shape[b_axis], k_shape[s_axis]) != (batch, seq):
        raise ValueError(f"{_PREFIX}: q {tuple(q_shape)} and k {tuple(k_shape)} must share B and S")
    channels, positions_batch, positions_seq = positions_shape
    if channels != call.channels or positions_batch not in (1, batch) or positions_seq != seq:
        raise ValueError(f"{_PREFIX}: positions do not fit q {tuple(q_shape)}; they must be "
                         f"{_positions_rule(call.channels, batch, seq)}")


_POSITIONS_FORMS = {1: ("[S] or [B, S]", "[{b}, {s}]", ""),
                   2: ("[S, 2] or [B, S, 2]", "[{b}, {s}, 2]", " (quarter mode: token and block position)"),
                   3: ("[3, S] or [3, B, S]", "[3, {b}, {s}]", " (M-RoPE: time, height, width)")}


def _positions_rule(channels, batch=None, seq=None):
    """The positions a layer takes, with q's B and S when known."""
    forms, shape, what = _POSITIONS_FORMS[channels]
    return forms + (f" = {shape.format(b=batch, s=seq)}" if batch is not None else "") + what


class _GatherKernel(nn.Cell):
    """One direction of the gathered rotation on one target: traced (and on Ascend always) through
    ops.Custom, eagerly on the tensors' memory (CPU)."""

    def __init__(self, call, backend, device_target):
        super().__init__()
        self.call, self.backend, self.device_target = call, backend, device_target

        # Traced on CPU, one primitive per tensor (MindSpore 2.10's CPU AOT kernels take one output): q, then k.
        # On Ascend, q and k take one launch of the q+k op.
        single = dataclasses.replace(call, heads=1)

        def infer_shape(shape, cos_shape, sin_shape, positions_shape, *lane_masks_shape):
            _check(single, shape, None, positions_shape)
            return list(shape)

        def infer_dtype(dtype, cos_dtype, sin_dtype, positions_dtype, *lane_masks_dtype):
            check_dtypes(dtype, cos_dtype, sin_dtype, "q")
            return dtype

        if backend == "ascend":  # the op writes its first input (q and k: two), clones (construct); lane masks
            if call.heads == 2:
                infer_shape, infer_dtype = _qk_infer_functions(call)
            self.prim = AscendKernel.gathering_primitive(call.conjugate, call.rotary_mode, (call.start, call.end),
                                                         infer_shape, infer_dtype, {"positions_axes": call.axes},
                                                         qk=call.heads == 2)
            self.clone = Clone()
            self.lane_masks = ms.Tensor(lane_masks(call.lane_channels, call.channels, call.end - call.start,
                                                   call.cache_dtype))
        elif backend == "aot":
            entry = library.AOT_POSITIONS_ENTRIES[call.conjugate]
            library.load()
            self.prim = ops.Custom(f"{library.LIB_PATH}:{entry}", infer_shape, infer_dtype, func_type="aot",
                                   reg_info=reg_info(entry, call.rotary_mode, (call.start, call.end), "CPU", "dx",
                                                     positions=_positions_attrs(call)))
        else:
            def compute(t, cos, sin, positions):
                return _numpy_gather_rotate(call, t, cos, sin, positions)

            # bf16 leaves numpy as unrounded fp32, rounded once by the cast in construct
            self.prim = ops.Custom(compute, infer_shape, lambda *dtypes: ms.float32, func_type="pyfunc")

    def __call__(self, *inputs):
        if routes.runs_now_on_host(self.device_target):
            heads = self.call.heads
            return self.run_now(inputs[:heads], *inputs[heads:])
        return super().__call__(*inputs)

    def run_now(self, tensors, cos, sin, positions, in_place=False):
        """Eagerly, on host memory, by positions [channels, 1|B, S]: new tensors with the slices rotated
        (in_place: the tensors themselves, contiguous). No op of its own joins MindSpore's queue (each would
        cost a round trip through it before the kernel could run): positions are read on the host, the
        results are numpy buffers the new tensors share."""
        call = self.call
        positions = np.ascontiguousarray(positions.asnumpy() if isinstance(positions, ms.Tensor) else positions,
                                         np.int64)  # [channels, 1|B, S]: the layer's construct or __call__ made it
        _check(call, tensors[0].shape, tensors[1].shape if call.heads == 2 else None, positions.shape)
        _check_positions_range(positions, cos.shape[1])
        if not in_place:
            tensors = [t if t.is_contiguous() else t.contiguous() for t in tensors]
        dy_dtype, cos_dtype = DTYPE_NAMES[element_dtype(tensors[0].dtype)], DTYPE_NAMES[element_dtype(cos.dtype)]
        # Small results in fresh numpy buffers (no queue round trip); large ones from MindSpore's memory pool,
        # whose pages are already mapped (fresh pages would cost more than the wait for the allocation).
        pooled = sum(t.size for t in tensors) >= EAGER_OUT_OF_PLACE_MIN_SIZE
        if in_place:
            outs = tensors
        else:
            outs = [mint.empty_like(t) if pooled else np.empty(tuple(t.shape), _HOST_DTYPES[dy_dtype])
                    for t in tensors]
        tensor_outs = in_place or pooled  # else numpy buffers
        _pynative_executor.sync()  # the ops that produce q and k (and the pooled results) have run
        if self.backend == "aot":
            out_ptrs = [None if in_place else out.data_ptr() if tensor_outs else out.ctypes.data for out in outs]
            k, k_out = (tensors[1].data_ptr(), out_ptrs[1]) if call.heads == 2 else (None, None)
            status = library.load().rotate_by_positions(
                tensors[0].data_ptr(), out_ptrs[0], k, k_out, cos.data_ptr(), sin.data_ptr(),
                positions.ctypes.data, positions.shape, _lane_channels_pointer(call), call.axes, tensors[0].shape,
                tensors[1].shape if call.heads == 2 else None, cos.shape, dy_dtype, cos_dtype, call.rotary_mode,
                call.start, call.end, call.conjugate)
            library.raise_for_status(status)
        else:
            rotated = [_numpy_gather_rotate(call, _host_float32(t), _host_float32(cos), _host_float32(sin),
                                            positions) for t in tensors]  # all computed before any write
            for out, values in zip(outs, rotated):
                (_host_array(out) if tensor_outs else out)[...] = numpy_kernel.from_float32(values, dy_dtype)
        return tuple(outs) if tensor_outs else tuple(_tensor_sharing(out, dy_dtype) for out in outs)


# Straight-line constructs (graph second-order autodiff needs them): the compiled kernel returns q's dtype;
# the numpy kernel returns fp32, cast to q's. Only the numpy ones cast: a graph that writes the result into q
# (inplace=True) and then read q by an fp32 astype of its own saw q before the write when an fp32 -> fp32 Cast
# sat between (MindSpore 2.10, CPU).
class _GatherKernelQ(_GatherKernel):
    def construct(self, q, cos, sin, positions):
        return (self.prim(q, cos, sin, positions),)


class _GatherKernelQK(_GatherKernel):
    def construct(self, q, k, cos, sin, positions):
        return self.prim(q, cos, sin, positions), self.prim(k, cos, sin, positions)


class _AscendGatherKernelQ(_GatherKernel):
    def construct(self, q, cos, sin, positions):
        target = self.clone(q)
        return (ops.depend(target, self.prim(target, cos, sin, positions, self.lane_masks)),)


class _AscendGatherKernelQK(_GatherKernel):
    def construct(self, q, k, cos, sin, positions):  # q and k in one launch
        q_target, k_target = self.clone(q), self.clone(k)
        written = self.prim(q_target, k_target, cos, sin, positions, self.lane_masks)
        return ops.depend(q_target, written), ops.depend(k_target, written)


def _qk_infer_functions(call):
    """The Ascend q+k op's out_shape/out_dtype: the layer's rules for q and k together."""

    def infer_shape(q_shape, k_shape, cos_shape, sin_shape, positions_shape, lane_masks_shape):
        _check(call, q_shape, k_shape, positions_shape)
        return list(q_shape), list(k_shape)

    def infer_dtype(q_dtype, k_dtype, cos_dtype, sin_dtype, positions_dtype, lane_masks_dtype):
        check_dtypes(q_dtype, cos_dtype, sin_dtype, "q")
        check_dtypes(k_dtype, cos_dtype, sin_dtype, "k")
        return q_dtype, k_dtype

    return infer_shape, infer_dtype


class _NumpyGatherKernelQ(_GatherKernel):
    def construct(self, q, cos, sin, positions):
        return (self.prim(q, cos, sin, positions).astype(q.dtype),)


class _NumpyGatherKernelQK(_GatherKernel):
    def construct(self, q, k, cos, sin, positions):
        return self.prim(q, cos, sin, positions).astype(q.dtype), self.prim(k, cos, sin, positions).astype(k.dtype)


def _tensor_sharing(array, dtype_name):
    """A tensor over the numpy buffer (no copy); bf16 reinterprets its uint16 bits."""
    tensor = ms.Tensor.from_numpy(array)
    return tensor.view(ms.bfloat16) if dtype_name == "bfloat16" else tensor


def lane_masks(lane_channels, channels, length, cos_dtype_name):
    """The Ascend gathering ops' lane_masks input, int16 [channels, length * cos bytes / 2]: per position
    channel, the bits of the cos/sin lanes it gives set (each lane's 2 or 4 bytes), the others clear. The kernel
    keeps each channel's cache row on its lanes and ORs them (kernel/ascend/op_kernel/rotary_kernel.h,
    CombineChannels); with one channel it reads none."""
    lanes = np.zeros(length, np.int64) if lane_channels is None else np.asarray(lane_channels, np.int64)
    words = 2 if cos_dtype_name == "float32" else 1
    given = np.repeat(lanes[None, :] == np.arange(channels)[:, None], words, axis=1)
    return np.where(given, -1, 0).astype(np.int16)


def _positions_attrs(call):
    """The AOT kernel's attributes beyond mode and slice: the layout's axes, M-RoPE's lane channels."""
    attrs = {"positions_axes": list(call.axes)}
    if call.lane_channels is not None:
        attrs["lane_channels"] = list(call.lane_channels)
    return attrs


@functools.lru_cache(maxsize=None)
def _lane_channels_array(lane_channels):
    return np.ascontiguousarray(lane_channels, np.int64)


def _lane_channels_pointer(call):
    return None if call.lane_channels is None else _lane_channels_array(call.lane_channels).ctypes.data


def _host_positions(positions, channels):
    """int64 [channels, 1|B, S] on the host, C-contiguous, from a tensor or an array of integers in the form
    the layer takes (_positions_rule)."""
    array = positions.asnumpy() if isinstance(positions, ms.Tensor) else np.asarray(positions)
    if channels == 2:
        array = np.moveaxis(array, -1, 0)
    shape = (channels, 1, -1) if array.ndim - (channels > 1) == 1 else (channels, *array.shape[-2:])
    return np.ascontiguousarray(array.reshape(shape), np.int64)


def _check_positions_range(positions, cache_rows):
    if positions.size and (positions.min() < 0 or positions.max() >= cache_rows):
        bad = positions.min() if positions.min() < 0 else positions.max()
        raise ValueError(f"{_PREFIX}: position {int(bad)} is outside the cos/sin cache [0, {cache_rows}); build the "
                         f"layer with cache_positions above the largest position it will see")


def _numpy_gather_rotate(call, t, cos, sin, positions):
    """The numpy statement of the gathered rotation (float32 out): the kernel's rows, cos/sin picked by
    position (M-RoPE: each lane by its channel's position)."""
    positions = np.asarray(positions)  # [channels, 1|B, S]
    channels = np.zeros(call.end - call.start, np.int64) if call.lane_channels is None else \
        np.asarray(call.lane_channels)
    tables = []
    for cache in (cos, sin):
        rows = np.asarray(cache, np.float32)[0, :, 0][positions]  # [channels, 1|B, S, L]
        table = np.take_along_axis(rows, channels.reshape(1, 1, 1, -1), 0)[0]  # [1|B, S, L]
        tables.append({(0, 1): table[:, :, None], (1, 0): table.transpose(1, 0, 2)[:, :, None],
                       (0, 2): table[:, None]}[call.axes])
    with numpy_kernel.default_fp_environment():
        return numpy_kernel.rotate(t, *tables, call.rotary_mode, call.start, call.end, call.conjugate)


class _GatherRotary(nn.Cell):
    """The gathered rotation with its bprop: the transposed call with the same positions (which refers back
    to this one, so gradients of any order build nothing more). The cache and positions get no gradient.
    Two subclasses spell out the inputs (MindSpore reads a bprop's parameters): q alone, q and k."""

    def __init__(self, call, backend, device_target, transpose_of=None):
        super().__init__()
        self.call, self.device_target = call, device_target
        self.kernel = _GATHER_KERNELS[backend][call.heads - 1](call, backend, device_target)
        self.no_grads = _NoGrads(device_target)
        transpose = transpose_of or type(self)(call.transpose(), backend, device_target, transpose_of=self)
        object.__setattr__(self, "transpose", transpose)

    def __call__(self, *inputs):
        if routes.current() is not Route.EAGER or not routes.on_host(self.device_target):
            return super().__call__(*inputs)  # traced; recording the bprop; or an Ascend op in PyNative
        return self.construct(*inputs)


class _NoGrads(nn.Cell):
    """The gradients of the cache and the positions: none eagerly (the cache is no parameter to train), zeros
    in a graph (which drops them)."""

    def __init__(self, device_target):
        super().__init__()
        self.device_target = device_target

    def __call__(self, cos, sin, positions):
        if routes.runs_now_on_host(self.device_target):
            return None, None, None
        return super().__call__(cos, sin, positions)

    def construct(self, cos, sin, positions):  # ops.zeros: graph second-order autodiff fails on zeros_like here
        return (ops.zeros(cos.shape, cos.dtype), ops.zeros(sin.shape, sin.dtype),
                ops.zeros(positions.shape, positions.dtype))


# Each backend's kernels: q alone, q and k.
_GATHER_KERNELS = {"aot": (_GatherKernelQ, _GatherKernelQK), "pyfunc": (_NumpyGatherKernelQ, _NumpyGatherKernelQK),
                   "ascend": (_AscendGatherKernelQ, _AscendGatherKernelQK)}


class _PositionsGuard(nn.Cell):
    """positions, after a check that each lies in the cache [0, rows): on Ascend, whose kernel cannot raise
    (it clamps a position outside the cache into it), the graph asserts the range before the kernel runs."""

    def __init__(self, rows):
        super().__init__()
        self.rows = rows
        self.check = ops.Assert()

    def construct(self, positions):
        inside = ops.logical_and(positions.min() >= 0, positions.max() < self.rows)
        return ops.depend(positions, self.check(inside, [positions.min(), positions.max()]))


class _GatherRotaryQ(_GatherRotary):
    def construct(self, q, cos, sin, positions):
        return self.kernel(q, cos, sin, positions)[0]

    def bprop(self, q, cos, sin, positions, out, dout):  # dout may come in another dtype (InplaceCopy's bprop)
        return (self.transpose(dout, cos, sin, positions).astype(q.dtype), *self.no_grads(cos, sin, positions))


class _GatherRotaryQK(_GatherRotary):
    def construct(self, q, k, cos, sin, positions):
        return self.kernel(q, k, cos, sin, positions)

    def bprop(self, q, k, cos, sin, positions, out, dout):
        dq, dk = self.transpose(dout[0], dout[1], cos, sin, positions)
        return (dq.astype(q.dtype), dk.astype(k.dtype), *self.no_grads(cos, sin, positions))


def _positions_argument(positions, channels):
    """An integer tensor, or anything numpy makes an integer array of (kept as int64 numpy: an eager call
    reads it on the host), of the form _positions_rule states."""
    if not isinstance(positions, ms.Tensor):
        array = np.asarray(positions)
        if array.dtype.kind not in "iu":
            raise TypeError(f"{_PREFIX}: positions must hold integers, got dtype {array.dtype}")
        positions = array.astype(np.int64)
    elif positions.dtype not in (ms.int64, ms.int32, ms.int16, ms.int8, ms.uint8):
        raise TypeError(f"{_PREFIX}: positions must be an integer tensor, got dtype {positions.dtype}")
    shape = tuple(positions.shape)
    fits = {1: len(shape) in (1, 2), 2: len(shape) in (2, 3) and shape[-1] == 2,
            3: len(shape) in (2, 3) and shape[0] == 3}[channels]
    if not fits:
        raise ValueError(f"{_PREFIX}: positions of shape {shape} must be {_positions_rule(channels)}")
    return positions


def _overlap(a, b):
    a_begin, b_begin = a.data_ptr(), b.data_ptr()
    return a_begin < b_begin + b.nbytes and b_begin < a_begin + a.nbytes


def mrope_lane_channels(rotary_mode, rotary_dim, mrope_section, mrope_interleaved):
    """The position channel of each cos/sin lane: the frequency of pair k sits on lanes ya[k] and yb[k]."""
    frequency_channels = mrope_channels(mrope_section, bool(mrope_interleaved), rotary_dim // 2)
    lanes = np.empty(rotary_dim, np.int64)
    _, _, ya, yb = lane_pairs(rotary_mode, rotary_dim)
    lanes[ya] = frequency_channels
    lanes[yb] = frequency_channels
    return tuple(int(c) for c in lanes)


class RotaryEmbedding(nn.Cell):
    """RotaryEmbedding(head_dim, partial_slice, rotary_mode, rope_theta=10000.0, rope_scaling=None,
    max_position_embeddings=None, cache_positions=None, cache_dtype=ms.float32, backend=None, layout="BSND",
    mrope_section=None, mrope_interleaved=False, inplace=False)

    `rope(q, k, positions)` -> (q_rot, k_rot); `rope(q, None, positions)` -> q_rot. q [B, S, Nq, D] and k
    [B, S, Nk, D] (their own head counts: GQA, MQA; layout "SBND": [S, B, N, D], "BNSD": [B, N, S, D]) of one
    float dtype, D = head_dim; positions integer [S] or [B, S], each in [0, cache_positions). M-RoPE (an
    mrope_section of three frequency counts; mrope_interleaved for Qwen3-VL): positions [3, S] or [3, B, S]
    (time, height, width), each lane's cos/sin read at its channel's position; quarter mode (rotary_mode 2,
    ChatGLM-6B): positions [S, 2] or [B, S, 2] (token, block). The cache holds cos/sin for
    positions [0, cache_positions) (default max_position_embeddings), computed in float64 and stored in
    cache_dtype: fp32 by default; a bf16 cache rounds cos/sin to 8 bits, whose angle error grows with the
    position. inplace=True writes q and k themselves (contiguous, apart) and returns them: eagerly by the
    kernel, in a graph through MindSpore's InplaceCopy (gradients as out of place); refused while PyNative
    autograd records their gradient. Use `from_config` for a model.
    """

    def __init__(self, head_dim, partial_slice, rotary_mode, rope_theta=10000.0, rope_scaling=None,
                 max_position_embeddings=None, cache_positions=None, cache_dtype=ms.float32, backend=None,
                 layout="BSND", mrope_section=None, mrope_interleaved=False, inplace=False):
        super().__init__()
        mode = normalize_mode(rotary_mode)
        start, end = (int(v) for v in partial_slice)
        if not (isinstance(head_dim, numbers.Integral) and 0 <= start < end <= head_dim):
            raise ValueError(f"{_PREFIX}: partial_slice={list(partial_slice)} must be a non-empty part of "
                             f"[0, head_dim={head_dim}]")
        if layout not in LAYOUT_AXES:
            raise ValueError(f"{_PREFIX}: layout={layout!r} must be one of {list(LAYOUT_AXES)}")
        rope_type = rope_type_of(rope_scaling)
        if rope_type in _LENGTH_DEPENDENT:
            raise ValueError(f"{_PREFIX}: rope_type {rope_type!r} changes its frequencies with the sequence length, "
                             f"which one cache cannot hold; build tables per call with rope_cos_sin(seq_len=...)")
        positions = cache_positions if cache_positions is not None else max_position_embeddings
        if isinstance(positions, bool) or not isinstance(positions, numbers.Integral) or positions < 1:
            raise ValueError(f"{_PREFIX}: cache_positions={positions!r} (default max_position_embeddings) must be a "
                             f"positive integer: the cache covers positions [0, cache_positions)")
        if cache_dtype not in FLOAT_DTYPES:
            raise TypeError(f"{_PREFIX}: cache_dtype={cache_dtype} must be float32, float16 or bfloat16")
        self.head_dim, self.partial_slice, self.rotary_mode, self.layout = int(head_dim), (start, end), mode, layout
        quarter = mode == 2
        if quarter and mrope_section is not None:
            raise ValueError(f"{_PREFIX}: mrope_section does not combine with rotary_mode 2 (quarter)")
        # Quarter: row p holds both halves' cos/sin at position p; a token reads its first half at its
        # position and its second at its block position.
        cache_rows = np.stack([np.arange(positions)] * 2, -1) if quarter else np.arange(positions)
        cos, sin = rope_cos_sin(cache_rows, end - start, mode, rope_theta=rope_theta, rope_scaling=rope_scaling,
                                max_position_embeddings=max_position_embeddings, dtype=cache_dtype,
                                head_dim=int(head_dim))
        if quarter:
            lane_channels = (0,) * ((end - start) // 2) + (1,) * ((end - start) // 2)
        elif mrope_section is not None:
            lane_channels = mrope_lane_channels(mode, end - start, mrope_section, mrope_interleaved)
        else:
            lane_channels = None
        self.cos_cache = ms.Parameter(cos.reshape(1, positions, 1, end - start), name="cos_cache", requires_grad=False)
        self.sin_cache = ms.Parameter(sin.reshape(1, positions, 1, end - start), name="sin_cache", requires_grad=False)
        device_target = routes.device_target()
        self.backend = backend = choose_backend(backend, device_target)
        call = _GatherCall(mode, start, end, False, 1, LAYOUT_AXES[layout], lane_channels,
                           DTYPE_NAMES[cache_dtype])
        self.guard = _PositionsGuard(positions) if backend == "ascend" else None
        self.channels = call.channels
        self.inplace = bool(inplace)
        self.before_write, self.inplace_copy = Identity(), InplaceCopy()
        self.rotate_q = _GatherRotaryQ(call, backend, device_target)
        self.rotate_qk = _GatherRotaryQK(dataclasses.replace(call, heads=2), backend, device_target)

    @classmethod
    def from_config(cls, config, rotary_mode=None, cache_positions=None, cache_dtype=ms.float32, backend=None,
                    layout="BSND", inplace=False):
        """From a Hugging Face config (dict or object): RopeConfig.from_config's facts (M-RoPE included), a
        cache of cache_positions (default max_position_embeddings) positions."""
        rope = RopeConfig.from_config(config, rotary_mode)
        return cls(rope.head_dim, rope.partial_slice, rope.rotary_mode, rope.rope_theta, rope.rope_scaling,
                   rope.max_position_embeddings, cache_positions, cache_dtype, backend, layout, rope.mrope_section,
                   rope.mrope_interleaved, inplace)

    def __call__(self, q, k=None, positions=None):
        if positions is None:
            raise TypeError(f"{_PREFIX} takes (q, k, positions): positions are required")
        for name, value in (("q", q), ("k", k)):
            if value is None and name == "k":
                continue
            if not isinstance(value, ms.Tensor):
                raise TypeError(f"{_PREFIX}: {name} must be a mindspore.Tensor, got {type(value).__name__}")
            if value.ndim != 4 or value.shape[-1] != self.head_dim:
                raise ValueError(f"{_PREFIX}: {name} of shape {tuple(value.shape)} must be {self.layout} with "
                                 f"D = head_dim={self.head_dim}")
        if k is not None and k.dtype != q.dtype:
            raise TypeError(f"{_PREFIX}: q and k must share a dtype, got {q.dtype} and {k.dtype}")
        positions = _positions_argument(positions, self.channels)
        route = routes.current()
        on_host = routes.on_host(self.rotate_q.device_target)
        if route is not Route.TRACED and not on_host:  # a clear error before the graph's assertion
            _check_positions_range(_host_positions(positions, self.channels), self.cos_cache.shape[1])
        if self.inplace and route is not Route.TRACED:
            return self._rotate_in_place_now(q, k, positions, route, on_host)
        if route is Route.EAGER and on_host:
            # nothing records: the kernel runs now, past the Cell machinery
            tensors = (q,) if k is None else (q, k)
            outs = (self.rotate_q if k is None else self.rotate_qk).kernel.run_now(
                tensors, self.cos_cache, self.sin_cache, _host_positions(positions, self.channels))
            return outs[0] if k is None else outs
        return super().__call__(q, k, positions if isinstance(positions, ms.Tensor) else ms.Tensor(positions))

    def _rotate_in_place_now(self, q, k, positions, route, on_host):
        """inplace=True outside a graph: the kernel writes q and k (checked first), whose version counters then
        move as MindSpore's own in-place ops move them. On a device whose memory the host does not write
        (Ascend), the kernel rotates copies and MindSpore's InplaceCopy writes them into q and k."""
        tensors = (q,) if k is None else (q, k)
        for name, tensor in zip(("q", "k"), tensors):
            if route is Route.RECORDING and tensor._requires_grad:
                raise ValueError(f"{_PREFIX}: inplace=True cannot write {name} while PyNative autograd records "
                                 f"its gradient; use the default out-of-place layer (inplace=False) to train")
            if on_host and not tensor.is_contiguous():
                raise ValueError(f"{_PREFIX}: inplace=True writes {name} in place, but {name} "
                                 f"{tuple(tensor.shape)} is a non-contiguous view; pass a contiguous tensor or "
                                 f"use the out-of-place layer")
        if k is not None and _overlap(q, k):
            raise ValueError(f"{_PREFIX}: inplace=True needs q and k in memory of their own; they overlap")
        if not on_host:
            positions = positions if isinstance(positions, ms.Tensor) else ms.Tensor(positions)
            rotated = self._rotate(q, k, self._kernel_positions(positions))
            for tensor, values in zip(tensors, (rotated,) if k is None else rotated):
                self.inplace_copy(tensor, values)
            return q if k is None else (q, k)
        (self.rotate_q if k is None else self.rotate_qk).kernel.run_now(
            tensors, self.cos_cache, self.sin_cache, _host_positions(positions, self.channels), in_place=True)
        for tensor in tensors:
            advance_version(tensor, tensor._version + 1)
        return q if k is None else (q, k)

    def _kernel_positions(self, positions):
        """positions as the kernels read them: int64 [channels, 1|B, S] (asserted inside the cache on Ascend)."""
        positions = positions.astype(ms.int64)
        if self.channels == 2:  # quarter: [S, 2] / [B, S, 2], channel last
            positions = positions.transpose(1, 0) if positions.ndim == 2 else positions.transpose(2, 0, 1)
        if positions.ndim == 1 or (positions.ndim == 2 and self.channels > 1):
            positions = positions.reshape(self.channels, 1, -1)
        elif self.channels == 1:
            positions = positions.reshape(1, positions.shape[0], positions.shape[1])
        if self.guard is not None:
            positions = self.guard(positions)
        return positions

    def _rotate(self, q, k, positions):
        if k is None:
            return self.rotate_q(q, self.cos_cache, self.sin_cache, positions)
        return self.rotate_qk(q, k, self.cos_cache, self.sin_cache, positions)

    def construct(self, q, k, positions):
        positions = self._kernel_positions(positions)
        if self.inplace:
            return self._construct_in_place(q, k, positions)
        return self._rotate(q, k, positions)

    def _construct_in_place(self, q, k, positions):
        """Traced: the rotation of copies taken ahead of the writes (as the in-place ops do: MindSpore 2.10
        otherwise hands a bprop the written tensor in chained and control-flow calls; bf16 is copied by its
        exact fp32 cast and rounded once after), then MindSpore's InplaceCopy into q and k."""
        if F.isconstant(q):
            raise ValueError(CONSTANT_TARGET_ERROR.format(name="q"))
        q_before = q.astype(ms.float32) if q.dtype == ms.bfloat16 else self.before_write(q)
        if k is None:
            q_rot = self.rotate_q(q_before, self.cos_cache, self.sin_cache, positions)
            q_rot = q_rot.astype(q.dtype) if q.dtype == ms.bfloat16 else q_rot
            return alias_after_write(q, self.inplace_copy(q, q_rot))
        if F.isconstant(k):
            raise ValueError(CONSTANT_TARGET_ERROR.format(name="k"))
        k_before = k.astype(ms.float32) if k.dtype == ms.bfloat16 else self.before_write(k)
        q_rot, k_rot = self.rotate_qk(q_before, k_before, self.cos_cache, self.sin_cache, positions)
        if q.dtype == ms.bfloat16:  # rounded once, from fp32 (an fp32 -> fp32 Cast here loses the write)
            q_rot, k_rot = q_rot.astype(q.dtype), k_rot.astype(k.dtype)
        return (alias_after_write(q, self.inplace_copy(q, q_rot)),
                alias_after_write(k, self.inplace_copy(k, k_rot)))

    def extend_repr(self):
        return (f"head_dim={self.head_dim}, partial_slice={list(self.partial_slice)}, "
                f"rotary_mode={self.rotary_mode}, layout={self.layout}, cache_positions={self.cos_cache.shape[1]}"
                f"{', M-RoPE' if self.channels == 3 else ''}{', inplace' if self.inplace else ''}")
