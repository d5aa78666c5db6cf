"""What every target shares: the kernel Cell of one RotaryCall (traced through its primitive, eagerly on the
tensors' memory), the primitives' registration and infer functions, and the eager call's checks.

Traced (construct), every target computes out of place; an in-place call writes the result back with
MindSpore's own InplaceCopy (functions.InPlaceRotary), whose ordering of reads, views and autograd around the
write MindSpore knows, and it does not for a custom op (a slice of x read before a custom in-place write saw
the write).

In PyNative an in-place call bypasses ops.Custom: MindSpore 2.10's PyNative ops.Custom hands an AOT kernel a
private copy of any view tensor (reshape, view and slicing outputs, e.g. q after a linear layer), so an
in-place write there would be lost. The eager kernel writes through Tensor.data_ptr() after MindSpore's async
op queue has drained, so earlier reads see the old values and later ops the new. A small out-of-place call on
tables goes through ops.Custom in PyNative: it joins MindSpore's queue instead of draining it, which costs more
than its dispatch whenever other work is queued (a backward); a large one runs eagerly, where the wait is
small beside the kernel (figures: benchmarks/NOTES.md, "Routes"). A call that reads a cache reads its
positions on the host, so it runs eagerly at every size."""
import ctypes
import functools
import itertools

import mindspore as ms
import numpy as np
from mindspore import mint, nn, ops
from mindspore.graph.api import _pynative_executor
from mindspore.ops import CustomRegOp, DataType
from mindspore.ops import signature as sig

from .. import numpy_kernel, routes
from ..constraints import (
    FEW_POSITIONS,
    check_cache_read,
    check_cache_read_call,
    check_dtypes,
    check_norm_weight,
    check_positions_range,
    check_shapes,
    element_dtype,
    is_empty_work,
    overlap,
    positions_view,
    require_contiguous,
    resolve_slice,
    shared_memory_error,
)

# Out of place on tables, PyNative: from this many elements (a kernel of a few ms, beside which the queue's
# drain is small) the eager kernel, below it ops.Custom (module docstring).
EAGER_OUT_OF_PLACE_MIN_SIZE = 1 << 22
DTYPE_NAMES = {ms.float32: "float32", ms.float16: "float16", ms.bfloat16: "bfloat16"}
FLOAT_FORMATS = (DataType.F32_Default, DataType.F16_Default, DataType.BF16_Default)
# partial_slice=None reaches the kernels as [0, -1]: "up to cos.shape[-1]" (kSliceFromCosEnd, rotary_rules.h).
SLICE_FROM_COS = [0, -1]
HOST_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": numpy_kernel.BF16_BITS}


@functools.lru_cache(maxsize=256)
def checked_slice(rotary_mode, partial_slice, dy_name, dy_shape, cos_shape, sin_shape, dy_dtype, cos_dtype,
                  sin_dtype):
    """The constraint checks of a call on tables, remembered per signature (a training loop repeats a few).
    A failing check raises, and lru_cache does not remember raised calls."""
    check_dtypes(dy_dtype, cos_dtype, sin_dtype, dy_name)
    return check_shapes(dy_shape, cos_shape, sin_shape, rotary_mode, partial_slice, dy_name)


@functools.lru_cache(maxsize=256)
def _checked_cache_read(call, shapes, cos_shape, sin_shape, positions_shape, dtypes, cos_dtype, sin_dtype):
    """check_cache_read_call, remembered per signature."""
    check_cache_read_call(call, shapes, dtypes, cos_shape, sin_shape, cos_dtype, sin_dtype, positions_shape)


class WritesFirstInput(ops.Custom):
    """An ops.Custom whose kernel writes its first input: RW_WRITE plus side_effect_mem keep the graph's
    reads of it before and after the call in order."""
    __mindspore_signature__ = (sig.make_sig("dy", sig.sig_rw.RW_WRITE), sig.make_sig("cos"), sig.make_sig("sin"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_prim_attr("side_effect_mem", True)


def result_after_write(rotated, written):
    """What an in-place call returns in a graph: the values it wrote (`rotated`), ordered after the write
    `written`. Not the written tensor itself: a read of it after the write makes MindSpore 2.10 copy it
    (TensorMove) ahead of every earlier read, the write guard's too, which then cannot tell a view; and returning
    it from a network wrapped by ms.amp.auto_mixed_precision O2/O3 is a graph cycle there (with MindSpore's own
    InplaceCopy too). Its gradient is the rotation's, for the value the tensor held at the call."""
    return ops.depend(rotated, written)


def _with_attrs(info, call, attrs):
    """rotary_mode, partial_slice and `attrs` (strings, floats or lists of ints), values per instance."""
    slice_attr = list(call.partial_slice) if call.partial_slice is not None else SLICE_FROM_COS
    info = (info.attr("rotary_mode", "required", "int", value=int(call.rotary_mode))
            .attr("partial_slice", "required", "listInt", value=slice_attr))
    for name, value in (attrs or {}).items():
        if isinstance(value, str):
            info = info.attr(name, "required", "str", value=value)
        elif isinstance(value, float):
            info = info.attr(name, "required", "float", value=value)
        else:
            info = info.attr(name, "required", "listInt", value=list(value))
    return info


def norm_reg_info(op_name, call, target, input_names, attrs, weight_grad=False):
    """CustomRegOp info of a head norm's primitive: inputs `input_names` (the rotated-like tensors, then cos, sin,
    positions, weight), one output shaped like the first input (the weight's gradient: fp32 [D]); every dtype of
    the tensors, of cos/sin and of the weight."""
    info = CustomRegOp(op_name)
    for index, name in enumerate(input_names):
        info = info.input(index, name)
    info = _with_attrs(info.output(0, "weight_grad" if weight_grad else "out"), call, attrs)
    tensors = len(input_names) - 4
    for x_type, cos_type, weight_type in itertools.product(FLOAT_FORMATS, repeat=3):
        info = info.dtype_format(*[x_type] * tensors, cos_type, cos_type, DataType.I64_Default, weight_type,
                                 DataType.F32_Default if weight_grad else x_type)
    return info.target(target).get_op_info()


def norm_infer_functions(call, name, weight_name, tensors=1, weight_grad=False, float32_for_bf16=False):
    """out_shape/out_dtype of a head norm's primitive (norm_reg_info's inputs; `tensors` 1 for the forward's x,
    2 for the backward's dy and x): every rule checked, so bad input fails before a kernel runs."""
    def infer_shape(*shapes):
        x_shape, (cos_shape, sin_shape, positions_shape, weight_shape) = shapes[tensors - 1], shapes[tensors:]
        check_cache_read(call, (x_shape,), cos_shape, sin_shape, positions_shape, (name,))
        check_norm_weight(weight_name, call.cache.head_dim, shape=weight_shape)
        return [call.cache.head_dim] if weight_grad else list(x_shape)

    def infer_dtype(*dtypes):
        x_dtype, (cos_dtype, sin_dtype, _, weight_dtype) = dtypes[tensors - 1], dtypes[tensors:]
        check_dtypes(x_dtype, cos_dtype, sin_dtype, name)
        check_norm_weight(weight_name, call.cache.head_dim, dtype=weight_dtype)
        if weight_grad or (float32_for_bf16 and element_dtype(x_dtype) == ms.bfloat16):
            return ms.float32
        return x_dtype

    return infer_shape, infer_dtype


def reg_info(op_name, call, target, output_names, attrs=None, extra_inputs=()):
    """CustomRegOp info of one primitive: inputs the rotated tensors, cos, sin and `extra_inputs` ((name,
    DataType) pairs: the positions of a cache read, the Ascend ops' lane masks), outputs `output_names`, every
    (rotated, cos/sin) float dtype pair; attributes rotary_mode, partial_slice and `attrs` (list-of-int ones,
    or strings), values per instance."""
    rotated = [name for name in ("q", "k") if name in output_names] or ["dy"]
    inputs = [*rotated, "cos", "sin", *(name for name, _ in extra_inputs)]
    info = CustomRegOp(op_name)
    for index, name in enumerate(inputs):
        info = info.input(index, name)
    for index, name in enumerate(output_names):
        info = info.output(index, name)
    info = _with_attrs(info, call, attrs)
    extra = tuple(data_type for _, data_type in extra_inputs)
    for dy_type, cos_type in itertools.product(FLOAT_FORMATS, FLOAT_FORMATS):
        info = info.dtype_format(*[dy_type] * len(rotated), cos_type, cos_type, *extra,
                                 *[dy_type] * len(output_names))
    return info.target(target).get_op_info()


def infer_functions(call, names=None, float32_for_bf16=False):
    """out_shape/out_dtype callables of a primitive rotating the tensors `names` (default: the call's); they check
    every rule, so bad input fails before a kernel runs. Inputs: the rotated tensors, cos, sin (and a cache
    read's positions, then anything else the target adds)."""
    names = names or call.rotated_names
    count = len(names)

    def infer_shape(*shapes):
        rotated, (cos_shape, sin_shape) = shapes[:count], shapes[count:count + 2]
        if call.cache is None:
            check_shapes(rotated[0], cos_shape, sin_shape, call.rotary_mode, call.partial_slice, names[0])
        else:
            check_cache_read(call, rotated, cos_shape, sin_shape, shapes[count + 2], names)
        return list(rotated[0]) if count == 1 else [list(shape) for shape in rotated]

    def infer_dtype(*dtypes):
        rotated, (cos_dtype, sin_dtype) = dtypes[:count], dtypes[count:count + 2]
        for name, dtype in zip(names, rotated):
            check_dtypes(dtype, cos_dtype, sin_dtype, name)
        out = [ms.float32 if float32_for_bf16 and element_dtype(dtype) == ms.bfloat16 else dtype for dtype in rotated]
        return out[0] if count == 1 else out

    return infer_shape, infer_dtype


def host_array(tensor):
    """A numpy array over a contiguous tensor's own memory (bf16 as its uint16 bits): reads and writes
    go straight to the tensor."""
    dtype = np.dtype(HOST_DTYPES[DTYPE_NAMES[element_dtype(tensor.dtype)]])
    if tensor.size == 0:
        return np.empty(tuple(tensor.shape), dtype)
    buffer = (ctypes.c_char * (tensor.size * dtype.itemsize)).from_address(tensor.data_ptr())
    return np.frombuffer(buffer, dtype).reshape(tuple(tensor.shape))


def host_float32(tensor):
    return numpy_kernel.to_float32(host_array(tensor), DTYPE_NAMES[element_dtype(tensor.dtype)])


def new_outputs(tensors):
    """Buffers for an eager call's results, shaped and typed as `tensors`: numpy buffers the new tensors will
    share (as_tensor) while small; from MindSpore's memory pool, whose pages are already mapped, once fresh
    pages would cost more than the pool's queued allocation (then sync before the kernel writes them)."""
    if sum(t.size for t in tensors) >= EAGER_OUT_OF_PLACE_MIN_SIZE:
        return [mint.empty_like(t) for t in tensors]
    return [np.empty(tuple(t.shape), HOST_DTYPES[DTYPE_NAMES[element_dtype(t.dtype)]]) for t in tensors]


def as_tensor(out):
    """A result of new_outputs as a tensor (a numpy buffer shared, not copied; bf16 from its uint16 bits)."""
    if isinstance(out, ms.Tensor):
        return out
    return tensor_sharing(out, "bfloat16" if out.dtype == HOST_DTYPES["bfloat16"] else str(out.dtype))


def tensor_sharing(array, dtype_name):
    """A tensor over the numpy buffer (no copy); bf16 reinterprets its uint16 bits."""
    tensor = ms.Tensor.from_numpy(array)
    return tensor.view(ms.bfloat16) if dtype_name == "bfloat16" else tensor


@ops.constexpr
def positions_3d(shape, channels):
    """The [channels, 1|B, S] view the kernels read of positions in the kernels' form (constraints.kernel_positions);
    a traced call reshapes to it at compile time."""
    view = positions_view(shape, channels)
    if view is None:
        raise ValueError(f"ms_rotary.RotaryEmbedding: positions of shape {tuple(shape)} are not in the kernels' form "
                         f"(int64, channels first); constraints.kernel_positions makes it")
    return view


def positions_index(call):
    """Where a cache read's positions sit in its inputs: after the rotated tensors, cos and sin."""
    return len(call.rotated_names) + 2


def tensor_positions(call, inputs):
    """inputs with a cache read's positions as a tensor: a primitive called in PyNative (and autograd's
    record) takes a numpy array for a shapeless constant."""
    if call.cache is None:
        return inputs
    at = positions_index(call)
    if isinstance(inputs[at], ms.Tensor):
        return inputs
    return (*inputs[:at], ms.Tensor(inputs[at]), *inputs[at + 1:])


def host_integers(tensor):
    """An integer tensor's values as numpy, its dtype kept (a float one still reaches its refusal): a decode
    step's few int64 read with tolist, which syncs and reads them 4x faster than asnumpy."""
    if tensor.size <= FEW_POSITIONS and tensor.dtype == ms.int64:
        return np.array(tensor.tolist(), np.int64)
    return tensor.asnumpy()


def host_positions(positions, channels):
    """A cache read's positions (the kernels' form, a numpy array or a tensor) as a C-contiguous numpy int64
    [channels, 1|B, S] on the host."""
    array = host_integers(positions) if isinstance(positions, ms.Tensor) else positions
    return np.ascontiguousarray(array, np.int64).reshape(positions_3d(array.shape, channels))


def checked_norm_weights(call, weights, written=()):
    """A head norm's weights (none without a norm), checked and contiguous; apart from the tensors an in-place
    call writes (`written`: (tensor, name) pairs), which the kernel writes before it reads k's weight."""
    if call.norm is None:
        return ()
    for name, weight in zip(call.weight_names, weights):
        if not isinstance(weight, ms.Tensor):
            raise TypeError(f"ms_rotary.RotaryEmbedding: {name} must be a mindspore.Tensor, got "
                            f"{type(weight).__name__}")
        check_norm_weight(name, call.cache.head_dim, tuple(weight.shape), weight.dtype)
        if weight.init is not None:  # made with init= and not yet materialised
            weight.init_data()
        for tensor, tensor_name in written:
            if tensor.size and overlap(weight, tensor):
                raise ValueError(shared_memory_error("ms_rotary", tensor_name, name))
    return tuple(weight if weight.is_contiguous() else weight.contiguous() for weight in weights)


class Unguarded(nn.Cell):
    """A target's write guard where it has none: the tensor itself, as the token the write depends on."""

    def construct(self, x):
        return x


class UnguardedApart(nn.Cell):
    """A target's apart guard where it has none: the first tensor, as the token the writes depend on."""

    def construct(self, *tensors):
        return tensors[0]


class RefusedWrite(nn.Cell):
    """A target's write guard where a graph's in-place write cannot be guarded: refused at compile time."""

    def __init__(self, message):
        super().__init__()
        self.message = message

    def construct(self, x):
        raise ValueError(self.message)


class RotaryKernel(nn.Cell):
    """One RotaryCall on one target: `construct` traced (new tensors), `run_now` eagerly on host memory (in
    place or new tensors). Subclasses give `construct` and, where the host can run them, `rotate_now`,
    `rotate_at_now` and `cos_sin_grads_now`."""

    def __init__(self, call, device_target):
        super().__init__()
        self.call = call
        self.device_target = device_target
        self.count = len(call.rotated_names)
        self.on_host = routes.on_host(device_target)

    def __call__(self, *inputs):
        """From Python only while PyNative autograd records (or off the host): on the host the kernel runs now,
        except a small out-of-place call on tables, which joins MindSpore's queue through ops.Custom."""
        if self.on_host and (self.call.in_place or self.call.cache is not None or
                             inputs[0].size >= EAGER_OUT_OF_PLACE_MIN_SIZE):
            return self.run_now(*inputs)
        if self.call.cache is not None:  # off the host: a clear error before the device's kernel, as on the host
            check_positions_range(host_positions(inputs[positions_index(self.call)], self.call.cache.channels),
                                  inputs[self.count].shape[1], self.call.cache.rows_per_call)
        return super().__call__(*tensor_positions(self.call, inputs))

    def write_guard(self, message):
        """What a graph's in-place write into a tensor depends on: a Cell `guard(x) -> token` that refuses
        (`message`) a tensor the write would scramble, before anything is written."""
        return Unguarded()

    def apart_guard(self, names, written, dtype_groups, message):
        """What a graph's in-place writes into the first `written` of `names` depend on: a Cell
        `guard(*tensors) -> token` that refuses (`message(a, b)`: a written, b another) two of them sharing
        memory, before anything is written. dtype_groups: how many consecutive tensors share each dtype."""
        return UnguardedApart()

    def run_now(self, *inputs):
        """One call on live tensors: the rotated inputs themselves (in place) or new tensors."""
        rotated, (cos, sin) = inputs[:self.count], inputs[self.count:self.count + 2]
        if self.call.cache is None:
            return self._run_tables_now(rotated[0], cos, sin)
        positions = host_positions(inputs[self.count + 2], self.call.cache.channels)
        return self._run_cache_read_now(rotated, cos, sin, positions, inputs[self.count + 3:])

    def _run_tables_now(self, dy, cos, sin):
        call = self.call
        start, end = checked_slice(call.rotary_mode, call.partial_slice, call.input_name, tuple(dy.shape),
                                   tuple(cos.shape), tuple(sin.shape), dy.dtype, cos.dtype, sin.dtype)
        if call.in_place:
            require_contiguous(dy, call.input_name)
        if is_empty_work(dy.shape, cos.shape, start, end):
            return dy if call.in_place else dy.copy()
        src = dy if call.in_place else dy.contiguous()
        out = dy if call.in_place else mint.empty_like(src)
        cos, sin = cos.contiguous(), sin.contiguous()
        _pynative_executor.sync()  # ops queued before this call have read (or written) their inputs
        self.rotate_now(src, out, cos, sin, start, end)
        return out

    def _run_cache_read_now(self, tensors, cos, sin, positions, weights=()):
        """By positions [channels, 1|B, S] read on the host (with a head norm, its `weights` too). No op of its
        own joins MindSpore's queue (each would cost a round trip through it before the kernel could run): small
        results are numpy buffers the new tensors share; large ones come from MindSpore's memory pool, whose pages
        are already mapped (fresh pages would cost more than the wait for the allocation)."""
        call = self.call
        tensors, weights = self.checked_cache_read_now(tensors, cos, sin, positions, weights)
        outs = list(tensors) if call.in_place else new_outputs(tensors)
        _pynative_executor.sync()  # the ops that produce q and k (and the pooled results) have run
        self.rotate_at_now(tensors, None if call.in_place else outs, cos.contiguous(), sin.contiguous(), positions,
                           *weights)
        outs = [as_tensor(out) for out in outs]
        return outs[0] if self.count == 1 else tuple(outs)

    def checked_cache_read_now(self, tensors, cos, sin, positions, weights=()):
        """A cache read's rules on live tensors (positions on the host), before anything is written: (the rotated
        tensors, contiguous where the call is out of place; the head norm's weights, checked and contiguous)."""
        call = self.call
        _checked_cache_read(call, tuple(tuple(t.shape) for t in tensors), tuple(cos.shape), tuple(sin.shape),
                            positions.shape, tuple(t.dtype for t in tensors), cos.dtype, sin.dtype)
        check_positions_range(positions, cos.shape[1], call.cache.rows_per_call)
        weights = checked_norm_weights(call, weights, tuple(zip(tensors, call.rotated_names)) if call.in_place else ())
        if call.in_place:
            for tensor, name in zip(tensors, call.rotated_names):
                require_contiguous(tensor, name)
            return tensors, weights
        return [t if t.is_contiguous() else t.contiguous() for t in tensors], weights

    def norm_grads_now(self, dy, x, cos, sin, positions, weight):
        """The backward of a head norm's call for one tensor x (its forward input) from dy, its output's
        gradient: (dx, the weight's gradient in the weight's dtype), on host memory, in one pass."""
        call = self.call
        positions = host_positions(positions, call.cache.channels)
        dy = dy.astype(x.dtype) if dy.dtype != x.dtype else dy
        dy, x, weight, cos, sin = (t.contiguous() for t in (dy, x, weight, cos, sin))
        dx, weight_grad = mint.empty_like(x), mint.empty((call.cache.head_dim,), dtype=ms.float32)
        _pynative_executor.sync()
        self.norm_grads_at_now(dy, x, dx, weight, weight_grad, cos, sin, positions)
        return dx, weight_grad.astype(weight.dtype)

    def eager_cos_sin_grads(self, y_side, x_side, cos):
        """dcos, dsin (cos's shape and dtype) of this call's rotation on tables: y_side in y's lane layout, x_side
        in x's (functions.RotaryBackward picks them), both shaped like the call's first input."""
        start, end = resolve_slice(self.call.partial_slice, cos.shape)
        if is_empty_work(y_side.shape, cos.shape, start, end):
            return ops.zeros_like(cos), ops.zeros_like(cos)
        y_side, x_side = y_side.astype(x_side.dtype).contiguous(), x_side.contiguous()
        dcos, dsin = mint.empty(cos.shape, dtype=cos.dtype), mint.empty(cos.shape, dtype=cos.dtype)
        _pynative_executor.sync()
        self.cos_sin_grads_now(y_side, x_side, dcos, dsin, start, end)
        return dcos, dsin
