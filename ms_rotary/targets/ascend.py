"""kernel/ascend (built by kernel/ascend/build.sh) as a target: its ops write their rotated inputs, here clones,
through ops.Custom(func_type="aot") on the device, traced and in PyNative alike. Input, output and attribute
names match the OpDefs in kernel/ascend/op_host/ms_rotary_partial_rotary_mul.cpp."""
import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.ops import DataType
from mindspore.ops import signature as sig
from mindspore.ops.auto_generate import Clone

from ..constraints import position_outside_cache
from .base import RotaryKernel, WritesFirstInput, infer_functions, positions_3d, reg_info

# By `conjugate`: on tables; reading a cache at positions, q alone; q and k in one launch.
OP_TYPES = {False: "MsRotaryPartialRotaryMul", True: "MsRotaryPartialRotaryMulGrad"}
CACHE_READ_OP_TYPES = {False: "MsRotaryPartialRotaryMulPositions", True: "MsRotaryPartialRotaryMulPositionsGrad"}
CACHE_READ_QK_OP_TYPES = {False: "MsRotaryPartialRotaryMulPositionsQK", True: "MsRotaryPartialRotaryMulPositionsQKGrad"}
# The kernel's dtype ids (kernel/common/rotary_rules.h, DType): the tiling key's and the host runner's.
DTYPE_IDS = {"float32": 0, "float16": 1, "bfloat16": 2}


class _WritesFirstInputAtPositions(WritesFirstInput):
    __mindspore_signature__ = (*WritesFirstInput.__mindspore_signature__, sig.make_sig("positions"),
                               sig.make_sig("lane_masks"))


class _WritesQAndK(WritesFirstInput):
    """The q+k op: its kernel writes q and k, its first two inputs."""
    __mindspore_signature__ = (sig.make_sig("q", sig.sig_rw.RW_WRITE), sig.make_sig("k", sig.sig_rw.RW_WRITE),
                               sig.make_sig("cos"), sig.make_sig("sin"), sig.make_sig("positions"),
                               sig.make_sig("lane_masks"))


def lane_masks(lane_channels, channels, length, cos_dtype_name):
    """The cache-reading ops' lane_masks input, int16 [channels, length * cos bytes / 2]: per position channel,
    the bits of the cos/sin lanes it gives set (each lane's 2 or 4 bytes), the others clear. The kernel keeps
    each channel's cache row on its lanes and ORs them (kernel/ascend/op_kernel/rotary_kernel.h,
    CombineChannels); with one channel it reads none."""
    lanes = np.zeros(length, np.int64) if lane_channels is None else np.asarray(lane_channels, np.int64)
    words = 2 if cos_dtype_name == "float32" else 1
    given = np.repeat(lanes[None, :] == np.arange(channels)[:, None], words, axis=1)
    return np.where(given, -1, 0).astype(np.int16)


class PositionsInCache(nn.Cell):
    """positions, after a check that each lies in the cache [0, rows): the Ascend kernel cannot raise (it clamps
    a position outside the cache into it), so the graph refuses one before the kernel runs, naming it."""

    def __init__(self, rows_per_call=False):
        super().__init__()
        self.rows_per_call = rows_per_call

    def construct(self, positions, cos):
        rows, low, high = cos.shape[1], positions.min(), positions.max()
        if low < 0 or high >= rows:
            raise ValueError(position_outside_cache(low if low < 0 else high, rows, self.rows_per_call))
        return positions


class AscendKernel(RotaryKernel):
    def __init__(self, call, device_target):
        super().__init__(call, device_target)
        self.clone = Clone()
        self.in_cache = PositionsInCache(bool(call.cache and call.cache.rows_per_call))
        cache = call.cache
        if cache is None:
            op_type = OP_TYPES[call.conjugate]
            self.prim = WritesFirstInput(op_type, *infer_functions(call), func_type="aot",
                                         reg_info=reg_info(op_type, call, "Ascend", ["dy"]))
            self.traced = self._traced_tables
            return
        op_type = (CACHE_READ_QK_OP_TYPES if cache.with_k else CACHE_READ_OP_TYPES)[call.conjugate]
        extra_inputs = (("positions", DataType.I64_Default), ("lane_masks", DataType.I16_Default))
        self.prim = (_WritesQAndK if cache.with_k else _WritesFirstInputAtPositions)(
            op_type, *infer_functions(call), func_type="aot",
            reg_info=reg_info(op_type, call, "Ascend", ["q", "k"] if cache.with_k else ["dy"],
                              {"positions_axes": cache.axes}, extra_inputs))
        self.lane_masks = ms.Tensor(lane_masks(cache.lane_channels, cache.channels,
                                               call.partial_slice[1] - call.partial_slice[0], cache.cache_dtype))
        self.channels = cache.channels
        self.traced = self._traced_q_and_k if cache.with_k else self._traced_q

    def construct(self, *inputs):
        return self.traced(*inputs)

    def _traced_tables(self, dy, cos, sin):
        target = self.clone(dy)
        return ops.depend(target, self.prim(target, cos, sin))

    def _traced_q(self, q, cos, sin, positions):
        positions = self.in_cache(positions.reshape(positions_3d(positions.shape, self.channels)), cos)
        target = self.clone(q)
        return ops.depend(target, self.prim(target, cos, sin, positions, self.lane_masks))

    def _traced_q_and_k(self, q, k, cos, sin, positions):  # q and k in one launch
        positions = self.in_cache(positions.reshape(positions_3d(positions.shape, self.channels)), cos)
        q_target, k_target = self.clone(q), self.clone(k)
        written = self.prim(q_target, k_target, cos, sin, positions, self.lane_masks)
        return ops.depend(q_target, written), ops.depend(k_target, written)
