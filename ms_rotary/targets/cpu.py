"""The compiled CPU kernel (kernel/cpu): traced through ops.Custom(func_type="aot"), eagerly through its plain C
entries on the tensors' memory. In place it reads and writes only the slice of each row."""
import itertools

import mindspore as ms
from mindspore import nn, ops
from mindspore.ops import DataType

from .. import library
from ..constraints import element_dtype, position_outside_cache
from .base import (
    DTYPE_NAMES,
    FLOAT_FORMATS,
    RotaryKernel,
    infer_functions,
    norm_infer_functions,
    norm_reg_info,
    positions_3d,
    reg_info,
)


def cache_read_attrs(call):
    """The attributes of a primitive reading a cache: the layout's axes, with several position channels each
    lane's channel, with a head norm its epsilon and offset."""
    attrs = {"positions_axes": list(call.cache.axes)}
    if call.cache.lane_channels is not None:
        attrs["lane_channels"] = list(call.cache.lane_channels)
    if call.norm is not None:
        attrs.update(norm_eps=float(call.norm.eps), norm_offset=float(call.norm.offset))
    return attrs


class CpuKernel(RotaryKernel):
    def __init__(self, call, device_target):
        super().__init__(call, device_target)
        library.load()  # a clear error now for a library that cannot serve the call, on every route
        if call.cache is None:
            entry = library.AOT_ENTRIES[int(call.conjugate)]
            self.prim = self._primitive(entry, (call.input_name,), {})
            self.traced = self.prim
        elif call.norm is not None:  # per tensor: the forward, the backward's dx and its weight gradient
            error = position_outside_cache("{position}", "{cache_rows}", call.cache.rows_per_call)
            attrs = {**cache_read_attrs(call), "position_error": error}
            forward, dx, weight_grad = library.AOT_NORM_ENTRIES
            for name, weight in zip(call.rotated_names, call.weight_names):
                setattr(self, f"norm_{name}", self._norm_primitive(forward, (name,), weight, attrs))
                setattr(self, f"dx_{name}", self._norm_primitive(dx, ("dout", name), weight, attrs))
                setattr(self, f"dweight_{name}", self._norm_primitive(weight_grad, ("dout", name), weight, attrs,
                                                                       True))
            self.channels = call.cache.channels
            self.traced = self._traced_norm_q_and_k if call.cache.with_k else self._traced_norm_q
        else:  # one primitive per tensor: MindSpore 2.10's CPU AOT kernels take one output
            entry = library.AOT_POSITIONS_ENTRIES[int(call.conjugate)]
            error = position_outside_cache("{position}", "{cache_rows}", call.cache.rows_per_call)
            attrs = {**cache_read_attrs(call), "position_error": error}
            positions = (("positions", DataType.I64_Default),)
            self.prim_q = self._primitive(entry, ("q",), attrs, positions)
            if call.cache.with_k:
                self.prim_k = self._primitive(entry, ("k",), attrs, positions)
            self.channels = call.cache.channels
            self.traced = self._traced_q_and_k if call.cache.with_k else self._traced_q

    def _primitive(self, entry, names, attrs, extra_inputs=()):
        infer_shape, infer_dtype = infer_functions(self.call, names)
        return ops.Custom(f"{library.LIB_PATH}:{entry}", infer_shape, infer_dtype, func_type="aot",
                          reg_info=reg_info(entry, self.call, "CPU", ["dx"], attrs, extra_inputs))

    def _norm_primitive(self, entry, tensor_names, weight_name, attrs, weight_grad=False):
        names = (*tensor_names, "cos", "sin", "positions", weight_name)
        infer_shape, infer_dtype = norm_infer_functions(self.call, tensor_names[-1], weight_name, len(tensor_names),
                                                        weight_grad)
        return ops.Custom(f"{library.LIB_PATH}:{entry}", infer_shape, infer_dtype, func_type="aot",
                          reg_info=norm_reg_info(entry, self.call, "CPU", names, attrs, weight_grad))

    def construct(self, *inputs):
        return self.traced(*inputs)

    def _traced_norm_q(self, q, cos, sin, positions, q_weight):
        return self.norm_q(q, cos, sin, positions.reshape(positions_3d(positions.shape, self.channels)), q_weight)

    def _traced_norm_q_and_k(self, q, k, cos, sin, positions, q_weight, k_weight):
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return self.norm_q(q, cos, sin, positions, q_weight), self.norm_k(k, cos, sin, positions, k_weight)

    def norm_grads_q(self, dout, q, cos, sin, positions, weight):
        """Traced: (dq, the weight's gradient in fp32) of a head norm's call."""
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return self.dx_q(dout, q, cos, sin, positions, weight), self.dweight_q(dout, q, cos, sin, positions, weight)

    def norm_grads_k(self, dout, k, cos, sin, positions, weight):
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return self.dx_k(dout, k, cos, sin, positions, weight), self.dweight_k(dout, k, cos, sin, positions, weight)

    def write_guard(self, message):
        return WriteGuard(message) if self.on_host else super().write_guard(message)

    def apart_guard(self, names, written, dtype_groups, message):
        if not self.on_host:
            return super().apart_guard(names, written, dtype_groups, message)
        return ApartGuard(names, written, dtype_groups, message)

    def _traced_q(self, q, cos, sin, positions):
        return self.prim_q(q, cos, sin, positions.reshape(positions_3d(positions.shape, self.channels)))

    def _traced_q_and_k(self, q, k, cos, sin, positions):
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return self.prim_q(q, cos, sin, positions), self.prim_k(k, cos, sin, positions)

    def rotate_now(self, src, out, cos, sin, start, end):
        call = self.call
        status = library.load().rotate(
            src.data_ptr(), None if call.in_place else out.data_ptr(), cos.data_ptr(), sin.data_ptr(), src.shape,
            cos.shape, sin.shape, DTYPE_NAMES[element_dtype(src.dtype)], DTYPE_NAMES[element_dtype(cos.dtype)],
            DTYPE_NAMES[element_dtype(sin.dtype)], call.rotary_mode, start, end, call.conjugate)
        library.raise_for_status(status)

    def rotate_at_now(self, tensors, outs, cos, sin, positions, *weights):
        out_ptrs = [None] * len(tensors) if outs is None else \
            [out.data_ptr() if isinstance(out, ms.Tensor) else out.ctypes.data for out in outs]
        entry = self.cache_read_entry([t.shape for t in tensors], tensors[0].dtype, positions.shape, cos.shape,
                                      cos.dtype, [weight.dtype for weight in weights])
        k, k_out = (tensors[1].data_ptr(), out_ptrs[1]) if self.call.cache.with_k else (None, None)
        status = entry(tensors[0].data_ptr(), out_ptrs[0], k, k_out, cos.data_ptr(), sin.data_ptr(),
                       positions.ctypes.data, *(weight.data_ptr() for weight in weights))
        library.raise_for_status(status)

    def cache_read_entry(self, shapes, dtype, positions_shape, cos_shape, cos_dtype, weight_dtypes=()):
        """The C entry of this call's cache read for one signature (shapes of q and k, their dtype, positions
        [channels, 1|B, S], the cache's shape and dtype, the norm weights' dtypes), every argument but the
        pointers bound: f(q, q_out, k, k_out, cos, sin, positions, *weights) -> status (k, k_out None without
        k; out pointers None in place)."""
        call, cache = self.call, self.call.cache
        static = (positions_shape, library.lane_channels_pointer(cache.lane_channels), cache.axes, shapes[0],
                  shapes[1] if cache.with_k else None, cos_shape, DTYPE_NAMES[element_dtype(dtype)],
                  DTYPE_NAMES[element_dtype(cos_dtype)], call.rotary_mode, call.partial_slice[0],
                  call.partial_slice[1])
        if call.norm is None:
            return library.load().rotate_by_positions_entry(*static, call.conjugate)
        names = [DTYPE_NAMES[element_dtype(dtype)] for dtype in weight_dtypes]
        entry = library.load().norm_by_positions_entry(names, call.norm.eps, call.norm.offset, *static)
        return lambda q, q_out, k, k_out, cos, sin, positions, q_weight, k_weight=None: entry(
            q, q_out, k, k_out, q_weight, k_weight, cos, sin, positions)

    def norm_grads_at_now(self, dy, x, dx, weight, weight_grad, cos, sin, positions):
        call, cache = self.call, self.call.cache
        status = library.load().norm_by_positions_grad(
            dy.data_ptr(), x.data_ptr(), dx.data_ptr(), weight.data_ptr(), weight_grad.data_ptr(),
            DTYPE_NAMES[element_dtype(weight.dtype)], call.norm.eps, call.norm.offset, cos.data_ptr(), sin.data_ptr(),
            positions.ctypes.data, positions.shape, library.lane_channels_pointer(cache.lane_channels), cache.axes,
            x.shape, cos.shape, DTYPE_NAMES[element_dtype(x.dtype)], DTYPE_NAMES[element_dtype(cos.dtype)],
            call.rotary_mode, call.partial_slice[0], call.partial_slice[1])
        library.raise_for_status(status)

    def cos_sin_grads_now(self, y_side, x_side, dcos, dsin, start, end):
        status = library.load().cos_sin_grad(
            y_side.data_ptr(), x_side.data_ptr(), dcos.data_ptr(), dsin.data_ptr(), y_side.shape, dcos.shape,
            DTYPE_NAMES[element_dtype(y_side.dtype)], DTYPE_NAMES[element_dtype(dcos.dtype)], self.call.rotary_mode,
            start, end)
        library.raise_for_status(status)


class WriteGuard(nn.Cell):
    """Refuses, before a graph's in-place write into `name`, a tensor MindSpore 2.10 would write in the wrong
    order: a view (non-contiguous, or part of a larger tensor) passed into the graph (kernel/cpu/aot_entry.cc,
    write_guard). `guard(x)` -> a token the write must depend on."""

    def __init__(self, message):
        super().__init__()
        self.prim = ops.Custom(f"{library.LIB_PATH}:{library.AOT_WRITE_GUARD}", lambda *shapes: [1],
                               lambda *dtypes: ms.int32, func_type="aot",
                               reg_info=_write_guard_info(message))

    def construct(self, x):
        x = ops.stop_gradient(x)  # a check, no function of x: no gradient path (nor a bf16 AddN) through it
        return self.prim(x, x)


class ApartGuard(nn.Cell):
    """Refuses, before a graph's in-place writes into the first `written` of `names`, two of the tensors that
    share memory, as the eager path refuses them (kernel/cpu/aot_entry.cc, apart_guard): MindSpore hands the
    kernel each whole tensor's own memory. That holds for the graphs the calls build (the tests of each case
    hold it); in one arrangement of the same ops tried first (q's and k's rotation and both writes in one method)
    MindSpore handed q and k copies, and the guard saw nothing. `guard(*tensors)` -> a token the writes
    must depend on."""

    def __init__(self, names, written, dtype_groups, message):
        super().__init__()
        from mindspore.ops import CustomRegOp

        pairs = [message(names[i], names[j]) for i in range(written) for j in range(i + 1, len(names))]
        # MindSpore keeps one registration per op name: one for each set of inputs and dtype formats
        info = CustomRegOp(f"{library.AOT_APART_GUARD}_{'_'.join(names)}_{written}_{'_'.join(map(str, dtype_groups))}")
        for index, name in enumerate(names):
            info = info.input(index, name)
        info = info.output(0, "ok").attr("written", "required", "int", value=written)
        info = info.attr("messages", "required", "str", value="\n".join(pairs))
        for chosen in itertools.product(FLOAT_FORMATS, repeat=len(dtype_groups)):  # each group's dtype
            info = info.dtype_format(*(dtype for dtype, size in zip(chosen, dtype_groups) for _ in range(size)),
                                     DataType.I32_Default)
        self.prim = ops.Custom(f"{library.LIB_PATH}:{library.AOT_APART_GUARD}", lambda *shapes: [1],
                               lambda *dtypes: ms.int32, func_type="aot", reg_info=info.target("CPU").get_op_info())

    def construct(self, *tensors):
        return self.prim(*(ops.stop_gradient(t) for t in tensors))


def _write_guard_info(message):
    from mindspore.ops import CustomRegOp

    info = CustomRegOp(library.AOT_WRITE_GUARD).input(0, "x").input(1, "x_again").output(0, "ok")
    info = info.attr("message", "required", "str", value=message)
    for data_type in (DataType.F32_Default, DataType.F16_Default, DataType.BF16_Default):
        info = info.dtype_format(data_type, data_type, DataType.I32_Default)
    return info.target("CPU").get_op_info()

