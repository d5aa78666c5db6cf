"""numpy_kernel as a target: the fallback when the compiled kernel is missing, and its bit-exact statement.
Traced through ops.Custom(func_type="pyfunc"), eagerly on the tensors' memory."""
from dataclasses import replace

import numpy as np
from mindspore import ops

from .. import library, numpy_kernel
from ..constraints import check_positions_range, element_dtype, is_empty_work, resolve_slice
from .base import (
    DTYPE_NAMES,
    RefusedWrite,
    RotaryKernel,
    host_array,
    host_float32,
    infer_functions,
    norm_infer_functions,
    positions_3d,
)
from .cpu import ApartGuard, WriteGuard


def gather_rotate(call, t, cos, sin, positions):
    """The numpy statement of a cache read (float32 out): the kernel's rows, cos/sin picked by position
    (several channels: each lane by its channel's position). positions [channels, 1|B, S], all in the cache."""
    cache, (start, end) = call.cache, call.partial_slice
    positions = np.asarray(positions)
    channels = np.zeros(end - start, np.int64) if cache.lane_channels is None else np.asarray(cache.lane_channels)
    tables = []
    for values in (cos, sin):
        rows = np.asarray(values, np.float32)[0, :, 0][positions]  # [channels, 1|B, S, L]
        table = np.take_along_axis(rows, channels.reshape(1, 1, 1, -1), 0)[0]  # [1|B, S, L]
        tables.append({(0, 1): table[:, :, None], (1, 0): table.transpose(1, 0, 2)[:, :, None],
                       (0, 2): table[:, None]}[cache.axes])
    with numpy_kernel.default_fp_environment():
        return numpy_kernel.rotate(t, *tables, call.rotary_mode, start, end, call.conjugate)


def _gain(call, weight):
    return np.float32(call.norm.offset) + np.asarray(weight).astype(np.float32)


def norm_rotate(call, t, cos, sin, positions, weight):
    """The numpy statement of a head norm's call (float32 out): each head normalised (numpy_kernel.head_norm),
    then rotated as gather_rotate."""
    with numpy_kernel.default_fp_environment():
        normed = numpy_kernel.head_norm(np.asarray(t).astype(np.float32), _gain(call, weight), call.norm.eps)
    return gather_rotate(call, normed, cos, sin, positions)


def norm_rotate_grads(call, dy, x, cos, sin, positions, weight):
    """(dx float32, the weight's gradient float64) of norm_rotate at x for its output's gradient dy."""
    d = gather_rotate(replace(call, conjugate=True), dy, cos, sin, positions)
    with numpy_kernel.default_fp_environment():
        return numpy_kernel.head_norm_grad(d, np.asarray(x).astype(np.float32), _gain(call, weight), call.norm.eps)


class NumpyKernel(RotaryKernel):
    def __init__(self, call, device_target):
        super().__init__(call, device_target)

        def compute(dy, cos, sin):
            start, end = resolve_slice(call.partial_slice, cos.shape)
            out = dy.astype(np.float32)
            if not is_empty_work(dy.shape, cos.shape, start, end):
                with numpy_kernel.default_fp_environment():
                    out = numpy_kernel.rotate(dy, cos, sin, call.rotary_mode, start, end, call.conjugate)
            return out if dy.dtype.name == "bfloat16" else out.astype(dy.dtype)

        def compute_at(dy, cos, sin, positions):
            check_positions_range(positions, cos.shape[1], call.cache.rows_per_call)  # raised in the graph as is
            out = gather_rotate(call, dy, cos, sin, positions) if dy.size else dy.astype(np.float32)
            return out if dy.dtype.name == "bfloat16" else out.astype(dy.dtype)

        # MindSpore cannot take a bf16 numpy array back from a pyfunc: bf16 results leave numpy as unrounded
        # fp32 and are rounded once by the cast in construct.
        def compute_norm(x, cos, sin, positions, weight):
            check_positions_range(positions, cos.shape[1], call.cache.rows_per_call)
            out = norm_rotate(call, x, cos, sin, positions, weight) if x.size else x.astype(np.float32)
            return out if x.dtype.name == "bfloat16" else out.astype(x.dtype)

        def compute_dx(dy, x, cos, sin, positions, weight):
            check_positions_range(positions, cos.shape[1], call.cache.rows_per_call)
            dx = norm_rotate_grads(call, dy, x, cos, sin, positions, weight)[0] if x.size else x.astype(np.float32)
            return dx if x.dtype.name == "bfloat16" else dx.astype(x.dtype)

        def compute_weight_grad(dy, x, cos, sin, positions, weight):
            check_positions_range(positions, cos.shape[1], call.cache.rows_per_call)
            if not x.size:
                return np.zeros(weight.shape, np.float32)
            return norm_rotate_grads(call, dy, x, cos, sin, positions, weight)[1].astype(np.float32)

        if call.cache is None:
            self.prim = ops.Custom(compute, *infer_functions(call, float32_for_bf16=True), func_type="pyfunc")
            self.traced = self._traced_tables
        elif call.norm is not None:
            for name, weight in zip(call.rotated_names, call.weight_names):
                setattr(self, f"norm_{name}", ops.Custom(compute_norm, *norm_infer_functions(
                    call, name, weight, float32_for_bf16=True), func_type="pyfunc"))
                setattr(self, f"dx_{name}", ops.Custom(compute_dx, *norm_infer_functions(
                    call, name, weight, 2, float32_for_bf16=True), func_type="pyfunc"))
                setattr(self, f"dweight_{name}", ops.Custom(compute_weight_grad, *norm_infer_functions(
                    call, name, weight, 2, weight_grad=True), func_type="pyfunc"))
            self.channels = call.cache.channels
            self.traced = self._traced_norm_q_and_k if call.cache.with_k else self._traced_norm_q
        else:
            self.prim_q = ops.Custom(compute_at, *infer_functions(call, ("q",), True), func_type="pyfunc")
            if call.cache.with_k:
                self.prim_k = ops.Custom(compute_at, *infer_functions(call, ("k",), True), func_type="pyfunc")
            self.channels = call.cache.channels
            self.traced = self._traced_q_and_k if call.cache.with_k else self._traced_q

    def construct(self, *inputs):
        return self.traced(*inputs)

    def write_guard(self, message):
        """The compiled kernel's guard (targets/cpu.py) where it is installed; without it a graph's in-place
        write is refused: nothing else can tell a view passed into the graph."""
        if not self.on_host:
            return super().write_guard(message)
        if library.compiled_kernel_path() is None:
            return RefusedWrite(f"ms_rotary: an in-place call in a graph needs the compiled kernel's write guard "
                                f"({library.LIB_PATH} is missing); reinstall ms_rotary (`pip install .`) or call it "
                                f"in PyNative")
        return WriteGuard(message)

    def apart_guard(self, names, written, dtype_groups, message):
        """The compiled kernel's (where it is missing, write_guard refuses the write itself)."""
        if not self.on_host or library.compiled_kernel_path() is None:
            return super().apart_guard(names, written, dtype_groups, message)
        return ApartGuard(names, written, dtype_groups, message)

    def _traced_tables(self, dy, cos, sin):
        return self.prim(dy, cos, sin).astype(dy.dtype)

    def _traced_q(self, q, cos, sin, positions):
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return self.prim_q(q, cos, sin, positions).astype(q.dtype)

    def _traced_q_and_k(self, q, k, cos, sin, positions):
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return self.prim_q(q, cos, sin, positions).astype(q.dtype), self.prim_k(k, cos, sin, positions).astype(k.dtype)

    def _traced_norm_q(self, q, cos, sin, positions, q_weight):
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return self.norm_q(q, cos, sin, positions, q_weight).astype(q.dtype)

    def _traced_norm_q_and_k(self, q, k, cos, sin, positions, q_weight, k_weight):
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return (self.norm_q(q, cos, sin, positions, q_weight).astype(q.dtype),
                self.norm_k(k, cos, sin, positions, k_weight).astype(k.dtype))

    def norm_grads_q(self, dout, q, cos, sin, positions, weight):
        """Traced: (dq, the weight's gradient in fp32) of a head norm's call."""
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return (self.dx_q(dout, q, cos, sin, positions, weight).astype(q.dtype),
                self.dweight_q(dout, q, cos, sin, positions, weight))

    def norm_grads_k(self, dout, k, cos, sin, positions, weight):
        positions = positions.reshape(positions_3d(positions.shape, self.channels))
        return (self.dx_k(dout, k, cos, sin, positions, weight).astype(k.dtype),
                self.dweight_k(dout, k, cos, sin, positions, weight))

    def rotate_now(self, src, out, cos, sin, start, end):
        """Only the slice's bytes of `out` are written in place (threads rotating disjoint slices of one
        tensor must not undo each other's writes); out of place `out` first gets all of src."""
        call = self.call
        dtype_name = DTYPE_NAMES[element_dtype(src.dtype)]
        target = host_array(out)
        if not call.in_place:
            target[...] = host_array(src)
        with numpy_kernel.default_fp_environment():
            rotated = numpy_kernel.rotate_slice(host_float32(src)[..., start:end], host_float32(cos),
                                                host_float32(sin), call.rotary_mode, call.conjugate)
        target[..., start:end] = numpy_kernel.from_float32(rotated, dtype_name)

    def rotate_at_now(self, tensors, outs, cos, sin, positions, *weights):
        """All tensors are rotated before any is written (positions may share memory with them)."""
        dtype_name = DTYPE_NAMES[element_dtype(tensors[0].dtype)]
        if self.call.norm is not None:
            rotated = [norm_rotate(self.call, host_float32(t), host_float32(cos), host_float32(sin), positions,
                                   host_float32(weight)) for t, weight in zip(tensors, weights)]
        else:
            rotated = [gather_rotate(self.call, host_float32(t), host_float32(cos), host_float32(sin), positions)
                       for t in tensors]
        for target, values in zip(tensors if outs is None else outs, rotated):
            (target if isinstance(target, np.ndarray) else host_array(target))[...] = \
                numpy_kernel.from_float32(values, dtype_name)

    def norm_grads_at_now(self, dy, x, dx, weight, weight_grad, cos, sin, positions):
        dx_values, weight_values = norm_rotate_grads(self.call, host_float32(dy), host_float32(x), host_float32(cos),
                                                     host_float32(sin), positions, host_float32(weight))
        host_array(dx)[...] = numpy_kernel.from_float32(dx_values, DTYPE_NAMES[element_dtype(x.dtype)])
        host_array(weight_grad)[...] = weight_values.astype(np.float32)

    def cos_sin_grads_now(self, y_side, x_side, dcos, dsin, start, end):
        cos_dtype = DTYPE_NAMES[element_dtype(dcos.dtype)]
        with numpy_kernel.default_fp_environment():
            grads = numpy_kernel.cos_sin_grads(host_float32(y_side)[..., start:end],
                                               host_float32(x_side)[..., start:end], tuple(dcos.shape),
                                               self.call.rotary_mode)
        for target, grad in zip((dcos, dsin), grads):
            host_array(target)[...] = numpy_kernel.from_float64(grad, cos_dtype)
