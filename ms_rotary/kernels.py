"""One rotary kernel call as a Cell: infer functions, registration and the chosen backend side by side.

Every backend takes (dy, cos, sin) and returns dy with its slice rotated, either written into dy (in place)
or into a new tensor. "aot" runs kernel/cpu (in place it reads and writes only the slice); "pyfunc" runs
numpy_kernel.rotate out of place and, in place, copies the result back into dy; on an Ascend device the
same call runs the Ascend C kernel (kernel/ascend), which writes in place (out of place: into a clone)."""
import mindspore as ms
from mindspore import nn, ops
from mindspore.ops.auto_generate import Clone, InplaceCopy
from mindspore.ops import signature as sig

from . import eager, numpy_kernel
from .backend import choose_backend, compiled_kernel_path
from .constraints import check_dtypes, check_shapes, element_dtype, resolve_slice


class _InPlaceCustom(ops.Custom):
    """An ops.Custom that writes its first input: RW_WRITE plus side_effect_mem make graph mode keep
    reads of dy before the call before it, and reads after it after it."""
    __mindspore_signature__ = (sig.make_sig("dy", sig.sig_rw.RW_WRITE), sig.make_sig("cos"), sig.make_sig("sin"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_prim_attr("side_effect_mem", True)


def _infer_functions(rotary_mode, partial_slice, returns_token, dy_name, bf16_as_float32=False):
    """out_shape/out_dtype callables; they check every rule, so bad input fails before a kernel runs."""

    def infer_shape(dy_shape, cos_shape, sin_shape):
        check_shapes(dy_shape, cos_shape, sin_shape, rotary_mode, partial_slice, dy_name)
        return [1] if returns_token else list(dy_shape)

    def infer_dtype(dy_dtype, cos_dtype, sin_dtype):
        check_dtypes(dy_dtype, cos_dtype, sin_dtype, dy_name)
        if returns_token:
            return ms.int32
        return ms.float32 if bf16_as_float32 and element_dtype(dy_dtype) == ms.bfloat16 else dy_dtype

    return infer_shape, infer_dtype


def _numpy_compute(rotary_mode, partial_slice, conjugate):
    def compute(dy, cos, sin):
        start, end = resolve_slice(partial_slice, cos.shape)
        return numpy_kernel.rotate(dy, cos, sin, rotary_mode, start, end, conjugate, keep_float32=True)

    return compute


class RotaryKernel(nn.Cell):
    """dy -> dy rotated on partial_slice (conjugate=True: the backward), in place or out of place.
    Eager calls run in eager.py; traced calls (GRAPH_MODE, ms.jit) run the ops.Custom below."""

    def __init__(self, rotary_mode, partial_slice, conjugate, in_place, backend=None, dy_name="dy"):
        super().__init__()
        self.device_target = ms.get_context("device_target")  # read once: it costs ~20 us
        self.backend = choose_backend(backend, self.device_target)
        self.rotary_mode = rotary_mode
        self.partial_slice = partial_slice
        self.conjugate = conjugate
        self.in_place = in_place
        self.dy_name = dy_name
        self.lib_path = compiled_kernel_path()
        self.num_threads = 0  # automatic, or $MS_ROTARY_NUM_THREADS (read by the library)
        self.copy_back = in_place and self.backend == "pyfunc"
        if self.backend == "ascend":
            from .op_info import ascend as ascend_op_info

            op_name = ascend_op_info.OP_NAMES[conjugate]
            infer_shape, infer_dtype = _infer_functions(rotary_mode, partial_slice, False, dy_name)
            self.prim = _InPlaceCustom(op_name, infer_shape, infer_dtype, func_type="aot",
                                       reg_info=ascend_op_info.reg_info(op_name, rotary_mode, partial_slice))
            self.clone = Clone()
        elif self.backend == "aot":
            from .op_info import cpu as cpu_op_info  # installed beside the compiled kernel

            entry = cpu_op_info.entry_name(conjugate, in_place)
            custom = _InPlaceCustom if in_place else ops.Custom
            infer_shape, infer_dtype = _infer_functions(rotary_mode, partial_slice, in_place, dy_name)
            self.prim = custom(f"{compiled_kernel_path()}:{entry}", infer_shape, infer_dtype, func_type="aot",
                               reg_info=cpu_op_info.reg_info(entry, rotary_mode, partial_slice))
        else:
            # MindSpore cannot take a bf16 numpy array back from a pyfunc: bf16 results leave numpy as
            # unrounded fp32 and are rounded once by the cast (or copy) below.
            infer_shape, infer_dtype = _infer_functions(rotary_mode, partial_slice, False, dy_name,
                                                        bf16_as_float32=True)
            self.prim = ops.Custom(_numpy_compute(rotary_mode, partial_slice, conjugate), infer_shape, infer_dtype,
                                   func_type="pyfunc")
            self.inplace_copy = InplaceCopy()

    def __call__(self, dy, cos, sin):
        if eager.is_eager(self.device_target):
            return eager.run(self, dy, cos, sin)
        return super().__call__(dy, cos, sin)

    def construct(self, dy, cos, sin):
        if self.backend == "ascend":  # the kernel writes into its first input
            target = dy if self.in_place else self.clone(dy)
            return ops.depend(target, self.prim(target, cos, sin))
        out = self.prim(dy, cos, sin)
        if self.copy_back:
            return self.inplace_copy(dy, out)
        if self.in_place:
            return ops.depend(dy, out)
        if self.backend == "pyfunc" and dy.dtype == ms.bfloat16:
            return out.astype(ms.bfloat16)
        return out
