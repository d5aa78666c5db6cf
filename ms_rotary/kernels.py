"""One kernel call (a RotaryCall) on one target, as a Cell. Each target is one class that owns its primitive
(graph mode, ms.jit), its graph-mode tail and its eager call (PyNative on CPU):

  CpuKernel     kernel/cpu through ops.Custom(func_type="aot"); eagerly through ctypes on the tensors' memory
  NumpyKernel   numpy_kernel through ops.Custom(func_type="pyfunc"); eagerly on the tensors' memory
  AscendKernel  kernel/ascend through ops.Custom(func_type="aot", target Ascend)

Traced (construct), every target computes out of place; an in-place call writes the result back with
MindSpore's own InplaceCopy (functions.InPlaceRotary), whose ordering of reads, views and autograd around
the write MindSpore knows, and it does not for a custom op (a slice of x read before a custom in-place
write saw the write). Eagerly, an in-place call writes x's memory itself.

In PyNative an in-place call bypasses ops.Custom: MindSpore 2.10's PyNative ops.Custom hands an AOT kernel a
private copy of any view tensor (reshape, view and slicing outputs, e.g. q after a linear layer), so an
in-place write there would be lost. The eager kernel writes through Tensor.data_ptr() after MindSpore's async
op queue has drained, so earlier reads of dy see the old values and later ops the new. A small out-of-place
call goes through ops.Custom in PyNative: it joins MindSpore's queue instead of draining it, which costs
more than its dispatch whenever other work is queued (a backward); a large one runs eagerly, where the wait
is small beside the kernel (figures: benchmarks/NOTES.md, "Routes")."""
import ctypes
import functools
import itertools

import mindspore as ms
import numpy as np
from mindspore import mint, nn, ops
from mindspore.graph.api import _pynative_executor
from mindspore.ops import CustomRegOp, DataType
from mindspore.ops import signature as sig
from mindspore.ops.auto_generate import Clone

from . import library, numpy_kernel, routes
from .constraints import check_dtypes, check_shapes, element_dtype, is_empty_work, require_contiguous, resolve_slice

# Out of place, PyNative: from this many elements (a kernel of a few ms, beside which the queue's drain is
# small) the eager kernel, below it ops.Custom (module docstring).
EAGER_OUT_OF_PLACE_MIN_SIZE = 1 << 22
DTYPE_NAMES = {ms.float32: "float32", ms.float16: "float16", ms.bfloat16: "bfloat16"}
FLOAT_FORMATS = (DataType.F32_Default, DataType.F16_Default, DataType.BF16_Default)
# partial_slice=None reaches the kernels as [0, -1]: "up to cos.shape[-1]" (kSliceFromCosEnd, rotary_rules.h).
SLICE_FROM_COS = [0, -1]
_HOST_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": numpy_kernel.BF16_BITS}


@functools.lru_cache(maxsize=256)
def checked_slice(rotary_mode, partial_slice, dy_name, dy_shape, cos_shape, sin_shape, dy_dtype, cos_dtype,
                  sin_dtype):
    """The constraint checks, remembered per signature (a training loop repeats a few).
    A failing check raises, and lru_cache does not remember raised calls."""
    check_dtypes(dy_dtype, cos_dtype, sin_dtype, dy_name)
    return check_shapes(dy_shape, cos_shape, sin_shape, rotary_mode, partial_slice, dy_name)


class _WritesFirstInput(ops.Custom):
    """An ops.Custom whose kernel writes its first input: RW_WRITE plus side_effect_mem keep the graph's
    reads of it before and after the call in order."""
    __mindspore_signature__ = (sig.make_sig("dy", sig.sig_rw.RW_WRITE), sig.make_sig("cos"), sig.make_sig("sin"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_prim_attr("side_effect_mem", True)


class _WritesFirstInputGathering(_WritesFirstInput):
    """The same for the ops that gather cos/sin rows by position: inputs positions and lane_masks too."""
    __mindspore_signature__ = (*_WritesFirstInput.__mindspore_signature__, sig.make_sig("positions"),
                               sig.make_sig("lane_masks"))


class _WritesQAndK(_WritesFirstInput):
    """The Ascend q+k op that gathers by position: its kernel writes q and k, its first two inputs."""
    __mindspore_signature__ = (sig.make_sig("q", sig.sig_rw.RW_WRITE), sig.make_sig("k", sig.sig_rw.RW_WRITE),
                               sig.make_sig("cos"), sig.make_sig("sin"), sig.make_sig("positions"),
                               sig.make_sig("lane_masks"))


def alias_after_write(dy, written):
    """dy, ordered after the op `written` that wrote it: what an in-place call returns in a graph. A no-op
    reshape makes it a new node: returning the written tensor itself from a network wrapped by
    ms.amp.auto_mixed_precision O2/O3 makes MindSpore 2.10 report a graph cycle (with its own InplaceCopy
    too). Not for bf16: MindSpore then copies a graph input returned this way with TensorMove, which has no
    bf16 kernel on CPU."""
    aliased = ops.depend(dy, written)
    if dy.dtype == ms.bfloat16:
        return aliased
    return ops.reshape(aliased, dy.shape)


def reg_info(op_name, rotary_mode, partial_slice, target, output_name, positions=None, lane_masks=False,
             qk=False):
    """CustomRegOp info of one instance: inputs dy (q and k for the Ascend q+k ops, `qk`), cos, sin (and int64
    positions, for the kernels that gather cos/sin rows by position: `positions` is then their list-of-int
    attributes; and the Ascend ones' int16 lane_masks) and one output (q and k: two), every (dy, cos/sin) float
    dtype pair; attribute values are per instance, their names are shared by every target."""
    slice_attr = list(partial_slice) if partial_slice is not None else SLICE_FROM_COS
    rotated = ("q", "k") if qk else ("dy",)
    inputs = [*rotated, "cos", "sin"] + (["positions"] if positions is not None else []) + \
        (["lane_masks"] if lane_masks else [])
    info = CustomRegOp(op_name)
    for index, name in enumerate(inputs):
        info = info.input(index, name)
    for index, name in enumerate(rotated if qk else (output_name,)):
        info = info.output(index, name)
    info = (info.attr("rotary_mode", "required", "int", value=int(rotary_mode))
            .attr("partial_slice", "required", "listInt", value=slice_attr))
    for name, value in (positions or {}).items():
        info = info.attr(name, "required", "listInt", value=list(value))
    extra = (DataType.I64_Default,) if positions is not None else ()
    extra += (DataType.I16_Default,) if lane_masks else ()
    for dy_type, cos_type in itertools.product(FLOAT_FORMATS, FLOAT_FORMATS):
        info = info.dtype_format(*[dy_type] * len(rotated), cos_type, cos_type, *extra, *[dy_type] * len(rotated))
    return info.target(target).get_op_info()


def _infer_functions(call, bf16_as_float32=False):
    """out_shape/out_dtype callables; they check every rule, so bad input fails before a kernel runs."""

    def infer_shape(dy_shape, cos_shape, sin_shape):
        check_shapes(dy_shape, cos_shape, sin_shape, call.rotary_mode, call.partial_slice, call.input_name)
        return list(dy_shape)

    def infer_dtype(dy_dtype, cos_dtype, sin_dtype):
        check_dtypes(dy_dtype, cos_dtype, sin_dtype, call.input_name)
        return ms.float32 if bf16_as_float32 and element_dtype(dy_dtype) == ms.bfloat16 else dy_dtype

    return infer_shape, infer_dtype


class RotaryKernel(nn.Cell):
    """dy -> dy rotated on the call's slice. Eagerly written into dy (in place) or into a new tensor; traced
    always into a new tensor. Subclasses give `construct` (traced) and `rotate_now`/`cos_sin_grads_now`
    (eager)."""

    def __init__(self, call, device_target):
        super().__init__()
        self.call = call
        self.device_target = device_target

    def _custom(self, func, func_type, bf16_as_float32=False, **kwargs):
        """The target's traced primitive."""
        infer_shape, infer_dtype = _infer_functions(self.call, bf16_as_float32)
        return ops.Custom(func, infer_shape, infer_dtype, func_type=func_type, **kwargs)

    def __call__(self, dy, cos, sin):
        if routes.runs_now_on_host(self.device_target) and (self.call.in_place or
                                                              dy.size >= EAGER_OUT_OF_PLACE_MIN_SIZE):
            return self.run_eager(dy, cos, sin)
        return super().__call__(dy, cos, sin)

    def run_eager(self, dy, cos, sin):
        """One call on live tensors; returns dy (in place) or a new tensor."""
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

    def eager_cos_sin_grads(self, y_side, x_side, cos):
        """dcos, dsin (cos's shape and dtype) of this call's rotation: y_side in y's lane layout, x_side in x's
        (functions.RotaryBackward picks them), both shaped like the call's first input."""
        start, end = resolve_slice(self.call.partial_slice, cos.shape)
        if is_empty_work(y_side.shape, cos.shape, start, end):
            return ops.zeros_like(cos), ops.zeros_like(cos)
        y_side, x_side = y_side.astype(x_side.dtype).contiguous(), x_side.contiguous()
        dcos, dsin = mint.empty(cos.shape, dtype=cos.dtype), mint.empty(cos.shape, dtype=cos.dtype)
        _pynative_executor.sync()
        self.cos_sin_grads_now(y_side, x_side, dcos, dsin, start, end)
        return dcos, dsin


class CpuKernel(RotaryKernel):
    """kernel/cpu: in place it reads and writes only the slice of each row."""

    def __init__(self, call, device_target):
        super().__init__(call, device_target)
        entry = library.AOT_ENTRIES[int(call.conjugate)]  # kernel/cpu/aot_entry.cc; the output is "dx"
        library.load()  # a clear error now for a library that cannot serve the call, on every route
        self.prim = self._custom(f"{library.LIB_PATH}:{entry}", "aot",
                                 reg_info=reg_info(entry, call.rotary_mode, call.partial_slice, "CPU", "dx"))

    def construct(self, dy, cos, sin):
        return self.prim(dy, cos, sin)

    def rotate_now(self, src, out, cos, sin, start, end):
        call = self.call
        status = library.load().rotate(
            src.data_ptr(), None if call.in_place else out.data_ptr(), cos.data_ptr(), sin.data_ptr(), src.shape,
            cos.shape, sin.shape, DTYPE_NAMES[element_dtype(src.dtype)], DTYPE_NAMES[element_dtype(cos.dtype)],
            DTYPE_NAMES[element_dtype(sin.dtype)], call.rotary_mode, start, end, call.conjugate)
        library.raise_for_status(status)

    def cos_sin_grads_now(self, y_side, x_side, dcos, dsin, start, end):
        status = library.load().cos_sin_grad(
            y_side.data_ptr(), x_side.data_ptr(), dcos.data_ptr(), dsin.data_ptr(), y_side.shape, dcos.shape,
            DTYPE_NAMES[element_dtype(y_side.dtype)], DTYPE_NAMES[element_dtype(dcos.dtype)], self.call.rotary_mode,
            start, end)
        library.raise_for_status(status)


def _host_array(tensor):
    """A numpy array over a contiguous tensor's own memory (bf16 as its uint16 bits): reads and writes
    go straight to the tensor."""
    dtype = np.dtype(_HOST_DTYPES[DTYPE_NAMES[element_dtype(tensor.dtype)]])
    if tensor.size == 0:
        return np.empty(tuple(tensor.shape), dtype)
    buffer = (ctypes.c_char * (tensor.size * dtype.itemsize)).from_address(tensor.data_ptr())
    return np.frombuffer(buffer, dtype).reshape(tuple(tensor.shape))


def _host_float32(tensor):
    return numpy_kernel.to_float32(_host_array(tensor), DTYPE_NAMES[element_dtype(tensor.dtype)])


class NumpyKernel(RotaryKernel):
    """numpy_kernel: the fallback when the compiled kernel is missing, and its bit-exact statement."""

    def __init__(self, call, device_target):
        super().__init__(call, device_target)

        def compute(dy, cos, sin):
            start, end = resolve_slice(call.partial_slice, cos.shape)
            out = dy.astype(np.float32)
            if not is_empty_work(dy.shape, cos.shape, start, end):
                with numpy_kernel.default_fp_environment():
                    out = numpy_kernel.rotate(dy, cos, sin, call.rotary_mode, start, end, call.conjugate)
            return out if dy.dtype.name == "bfloat16" else out.astype(dy.dtype)

        # MindSpore cannot take a bf16 numpy array back from a pyfunc: bf16 results leave numpy as unrounded
        # fp32 and are rounded once by the cast in construct.
        self.prim = self._custom(compute, "pyfunc", bf16_as_float32=True)

    def construct(self, dy, cos, sin):
        return self.prim(dy, cos, sin).astype(dy.dtype)

    def rotate_now(self, src, out, cos, sin, start, end):
        """Only the slice's bytes of `out` are written in place (threads rotating disjoint slices of one
        tensor must not undo each other's writes); out of place `out` first gets all of src."""
        call = self.call
        dtype_name = DTYPE_NAMES[element_dtype(src.dtype)]
        target = _host_array(out)
        if not call.in_place:
            target[...] = _host_array(src)
        with numpy_kernel.default_fp_environment():
            rotated = numpy_kernel.rotate_slice(_host_float32(src)[..., start:end], _host_float32(cos),
                                                _host_float32(sin), call.rotary_mode, call.conjugate)
        target[..., start:end] = numpy_kernel.from_float32(rotated, dtype_name)

    def cos_sin_grads_now(self, y_side, x_side, dcos, dsin, start, end):
        cos_dtype = DTYPE_NAMES[element_dtype(dcos.dtype)]
        with numpy_kernel.default_fp_environment():
            grads = numpy_kernel.cos_sin_grads(_host_float32(y_side)[..., start:end],
                                               _host_float32(x_side)[..., start:end], tuple(dcos.shape),
                                               self.call.rotary_mode)
        for target, grad in zip((dcos, dsin), grads):
            _host_array(target)[...] = numpy_kernel.from_float64(grad, cos_dtype)


class AscendKernel(RotaryKernel):
    """kernel/ascend (built by kernel/ascend/build.sh): the kernel writes its first input, here a clone. Input,
    output and attribute names match the OpDef in kernel/ascend/op_host/ms_rotary_partial_rotary_mul.cpp, whose
    output "dy" shares the input's name."""

    OP_TYPES = {False: "MsRotaryPartialRotaryMul", True: "MsRotaryPartialRotaryMulGrad"}  # by `conjugate`
    # The twins that gather cos/sin rows by position from a cache (embedding.RotaryEmbedding): inputs int64
    # positions [channels, 1|B, S] and int16 lane_masks (embedding.lane_masks), the attribute positions_axes.
    GATHER_OP_TYPES = {False: "MsRotaryPartialRotaryMulPositions", True: "MsRotaryPartialRotaryMulPositionsGrad"}
    # ... and their q+k twins: inputs q and k (written), then the same; outputs q and k.
    GATHER_QK_OP_TYPES = {False: "MsRotaryPartialRotaryMulPositionsQK",
                          True: "MsRotaryPartialRotaryMulPositionsQKGrad"}
    # The kernel's dtype ids (kernel/common/rotary_rules.h, DType): the tiling key's and the host runner's.
    DTYPE_IDS = {"float32": 0, "float16": 1, "bfloat16": 2}

    def __init__(self, call, device_target):
        super().__init__(call, device_target)
        op_type = self.OP_TYPES[call.conjugate]
        infer_shape, infer_dtype = _infer_functions(call)
        self.prim = _WritesFirstInput(op_type, infer_shape, infer_dtype, func_type="aot",
                                      reg_info=reg_info(op_type, call.rotary_mode, call.partial_slice, "Ascend", "dy"))
        self.clone = Clone()

    def construct(self, dy, cos, sin):
        target = self.clone(dy)
        return ops.depend(target, self.prim(target, cos, sin))

    @classmethod
    def gathering_primitive(cls, conjugate, rotary_mode, partial_slice, infer_shape, infer_dtype, attrs, qk=False):
        """The primitive of the op that gathers cos/sin rows by position (`attrs`: its list attributes; `qk`: the
        q+k op); it writes its first input (two: q and k), clones the caller makes."""
        op_type = (cls.GATHER_QK_OP_TYPES if qk else cls.GATHER_OP_TYPES)[conjugate]
        return (_WritesQAndK if qk else _WritesFirstInputGathering)(
            op_type, infer_shape, infer_dtype, func_type="aot",
            reg_info=reg_info(op_type, rotary_mode, partial_slice, "Ascend", "dy", positions=attrs, lane_masks=True,
                              qk=qk))


KERNELS = {"aot": CpuKernel, "pyfunc": NumpyKernel, "ascend": AscendKernel}
