"""The rotation with its autograd and its in-place machinery, for every RotaryCall: on tables (the ops) or
reading a cache at positions (the layer), one tensor or q and k. A RotaryFunction is one direction of the
rotation, out of place, on one target; its bprop is the transposed direction (itself a RotaryFunction, so
gradients of any order) plus the gradients for cos and sin. An InPlaceRotary writes its rotated inputs.

In place, per route (routes.py; the user-facing statement is README, "Autograd and in place"; what was
tried before is in benchmarks/NOTES.md):
- TRACED: the rotation of copies taken ahead of the writes, out of place, written back with MindSpore's own
  InplaceCopy, which MindSpore orders reads, views and gradients around; before it, the target's write guard
  refuses a view passed into the graph (MindSpore 2.10 would write it in the wrong order).
- RECORDING: the rotation out of place, each input rebound to its result as MindSpore's own
  Tensor.__setitem__ does under autograd; the old memory is kept (MindSpore 2.10's autograd of an in-place
  write to a view gives zero gradients on CPU). Leaves that require grad are refused, as MindSpore refuses them.
- EAGER: the kernel writes the inputs' memory and moves their version counters."""
import functools

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore._c_expression import _unsafe_set_version_counter
from mindspore.graph.api import _pynative_executor
from mindspore.ops import functional as F
from mindspore.ops.auto_generate import Identity, InplaceCopy

from . import routes
from .backend import choose_backend
from .constraints import check_cache_read_call, check_eager_inputs, require_whole_storage, shared_memory_error
from .layouts import MERGE, SPLIT
from .modes import MODE_LAYOUTS, lane_pairs
from .routes import Route
from .targets import KERNELS
from .targets.base import positions_3d, result_after_write, tensor_positions


def cos_sin_grads(split_x, merge_y, y_part, x_part, cos):
    """dcos, dsin with MindSpore ops (differentiable; a graph drops them when unused). y_part is the rotated
    slice in y's lane layout and x_part in x's, float32: (dL/dy, x) for y = R x, (dy, dL/dx) for dx = R^T dy;
    split_x and merge_y are the mode's layouts.SPLIT and MERGE functions.
    dc[ya] = y[ya] x[xa], dc[yb] = y[yb] x[xb], ds[ya] = -y[ya] x[xb], ds[yb] = y[yb] x[xa]."""
    dcos, dsin = _cos_sin_products(split_x, merge_y, y_part, x_part)
    return dcos.sum_to_size(cos.shape).astype(cos.dtype), dsin.sum_to_size(cos.shape).astype(cos.dtype)


def _cos_sin_products(split_x, merge_y, y_part, x_part):
    xa, xb = split_x(x_part)
    return y_part * merge_y(xa, xb), y_part * merge_y(-xb, xa)


def _no_cos_sin_grads(split_x, merge_y, y_part, x_part, cos):
    return ops.zeros_like(cos), ops.zeros_like(cos)


def _forward_sides(first_input, dout):
    return dout, first_input


def _backward_sides(first_input, dout):
    return first_input, dout


class _SliceBounds(nn.Cell):
    """`part(t, cos)`: the slice of t the call rotates, as float32 (MindSpore's CPU slicing has no bf16 kernel),
    chosen here rather than branched on in the graph (graph-mode second-order autodiff fails on a branch):
    partial_slice=None ends at cos.shape[-1]."""

    def __init__(self, call):
        super().__init__()
        if call.partial_slice is None:
            self.part = self._part_to_cos_length
        else:
            self.start, self.end = call.partial_slice
            self.part = self._part_fixed

    def _part_fixed(self, t, cos):
        return t.astype(ms.float32)[..., self.start:self.end]

    def _part_to_cos_length(self, t, cos):
        return t.astype(ms.float32)[..., 0:cos.shape[-1]]


class CacheGrads(nn.Cell):
    """dcos, dsin of a cache read: each token's cos/sin gradient, summed over its heads (and q's and k's), added
    into the cache row it read; with several position channels each lane into the row of its channel's
    position. MindSpore primitives, few of them: a graph compiles them into every backward (and drops them when
    the cache is not trained), and graph second-order autodiff fails on the functional forms' branches."""

    def __init__(self, call):
        super().__init__()
        cache, (start, end) = call.cache, call.partial_slice
        length = end - start
        # dc[ya] = y[ya] x[xa], dc[yb] = y[yb] x[xb], ds[ya] = -y[ya] x[xb], ds[yb] = y[yb] x[xa]: for each lane of
        # the slice (in y's layout) the head's lane of x that multiplies it, and the sign
        xa, xb, ya, yb = lane_pairs(call.rotary_mode, length)
        cos_lanes, sin_lanes, sin_signs = (np.empty(length, np.int64), np.empty(length, np.int64),
                                           np.ones(length, np.float32))
        cos_lanes[ya], cos_lanes[yb], sin_lanes[ya], sin_lanes[yb] = xa, xb, xb, xa
        sin_signs[ya] = -1
        self.slice_lanes = ms.Tensor(np.arange(start, end))
        self.cos_lanes, self.sin_lanes = ms.Tensor(cos_lanes + start), ms.Tensor(sin_lanes + start)
        self.sin_signs = ms.Tensor(sin_signs)
        self.channels, self.length = cache.channels, length
        lanes = np.zeros(length, np.int64) if cache.lane_channels is None else np.array(cache.lane_channels)
        self.lane_channels, self.lanes = ms.Tensor(lanes), ms.Tensor(np.arange(length))
        self.cast, self.gather, self.sum = ops.Cast(), ops.Gather(), ops.ReduceSum()
        self.transpose, self.reshape, self.segment_sum = ops.Transpose(), ops.Reshape(), ops.UnsortedSegmentSum()
        # [.., .., .., L] in the call's layout -> [B, S, L], summed over the heads
        self.tokens = {(0, 1): self._tokens_bsnd, (1, 0): self._tokens_sbnd, (0, 2): self._tokens_bnsd}[cache.axes]

    def _tokens_bsnd(self, t):
        return self.sum(t, 2)

    def _tokens_sbnd(self, t):
        return self.transpose(self.sum(t, 2), (1, 0, 2))

    def _tokens_bnsd(self, t):
        return self.sum(t, 1)

    def per_token(self, y_side, x_side, cos):
        """[B, S, L] float32 gradients of each token's cos and sin rows."""
        y, x = self.cast(y_side, ms.float32), self.cast(x_side, ms.float32)
        y = self.gather(y, self.slice_lanes, 3)
        dcos = y * self.gather(x, self.cos_lanes, 3)
        dsin = y * self.gather(x, self.sin_lanes, 3) * self.sin_signs
        return self.tokens(dcos), self.tokens(dsin)

    def into_cache(self, token_dcos, token_dsin, cos, positions):
        positions = self.reshape(positions, positions_3d(positions.shape, self.channels))
        rows = self.transpose(self.gather(positions, self.lane_channels, 0), (1, 2, 0))  # [1|B, S, L]: lanes' rows
        index = self.reshape(rows * self.length + self.lanes, (-1,))
        slots = cos.shape[1] * self.length
        dcos = self.segment_sum(self.reshape(token_dcos.sum_to_size(rows.shape), (-1,)), index, slots)
        dsin = self.segment_sum(self.reshape(token_dsin.sum_to_size(rows.shape), (-1,)), index, slots)
        return (self.cast(self.reshape(dcos, cos.shape), cos.dtype),
                self.cast(self.reshape(dsin, cos.shape), cos.dtype))


class RotaryBackward(_SliceBounds):
    """(the function's inputs, dout) -> the gradients of its inputs. Eagerly (PyNative on the host), cos/sin
    gradients are computed only for a cos/sin that requires grad: by the target's kernel on tables, with
    MindSpore ops while an outer grad records this backward or for a cache."""

    def __init__(self, call, backend, device_target):
        super().__init__(call)
        x_layout, y_layout = MODE_LAYOUTS[call.rotary_mode]
        self.split_x, self.merge_y = SPLIT[x_layout], MERGE[y_layout]
        if call.partial_slice is not None and call.partial_slice[0] == call.partial_slice[1]:
            self.cos_sin_grads = _no_cos_sin_grads  # empty work: nothing rotated, whatever cos's length
        else:
            self.cos_sin_grads = cos_sin_grads
        # (first input, dout) -> (y side, x side): the backward's input is in y's layout
        self.sides = _backward_sides if call.conjugate else _forward_sides
        self.on_host = routes.on_host(device_target)
        if call.cache is None:
            self.grads_kernel = KERNELS[backend](call.out_of_place(), device_target)
            self.grads = self._tables
        else:
            self.cache_grads = CacheGrads(call)
            self.grads = self._q_and_k if call.cache.with_k else self._q
        self.transpose = None  # the transposed RotaryFunction, set by the function this backward belongs to

    def __call__(self, *args):
        """From Python: a recorded backward in PyNative."""
        route = routes.current()
        if route is Route.TRACED or not self.on_host:
            return super().__call__(*args)
        inputs, dout = args[:-1], args[-1]
        douts = dout if isinstance(dout, tuple) else (dout,)
        count = len(douts)
        cos, sin, extra = inputs[count], inputs[count + 1], inputs[count + 2:]
        d = self.transpose(*douts, cos, sin, *extra)
        d = d if isinstance(d, tuple) else (d,)
        # dout may come in another dtype (InplaceCopy's bprop)
        d = tuple(g if g.dtype == t.dtype else g.astype(t.dtype) for g, t in zip(d, inputs))
        if not (cos._requires_grad or sin._requires_grad):
            return (*d, None, None, *(None for _ in extra))  # nothing asks for them
        sides = [self.sides(t, g) for t, g in zip(inputs[:count], douts)]
        if extra:  # a cache read: its rows' sums, with MindSpore ops
            positions = extra[0] if isinstance(extra[0], ms.Tensor) else ms.Tensor(extra[0])
            dcos, dsin = self.cache_grads.per_token(*sides[0], cos)
            for y_side, x_side in sides[1:]:  # k's
                more_dcos, more_dsin = self.cache_grads.per_token(y_side, x_side, cos)
                dcos, dsin = dcos + more_dcos, dsin + more_dsin
            return (*d, *self.cache_grads.into_cache(dcos, dsin, cos, positions), None)
        if route is Route.RECORDING:
            y_side, x_side = sides[0]
            dcos, dsin = self.cos_sin_grads(self.split_x, self.merge_y, self.part(y_side, cos), self.part(x_side, cos),
                                            cos)
        else:
            dcos, dsin = self.grads_kernel.eager_cos_sin_grads(*sides[0], cos)
        return (*d, dcos, dsin)

    def construct(self, *args):
        return self.grads(*args)

    def _tables(self, x, cos, sin, dout):
        dx = self.transpose(dout, cos, sin)
        y_side, x_side = self.sides(x, dout)
        dcos, dsin = self.cos_sin_grads(self.split_x, self.merge_y, self.part(y_side, cos), self.part(x_side, cos), cos)
        return dx, dcos, dsin

    # Straight-line (graph second-order autodiff fails on a loop or a branch here).
    def _q(self, q, cos, sin, positions, dout):  # dout may come in another dtype (InplaceCopy's bprop)
        dq = self.transpose(dout, cos, sin, positions).astype(q.dtype)
        y_side, x_side = self.sides(q, dout)
        dcos, dsin = self.cache_grads.per_token(y_side, x_side, cos)
        dcos, dsin = self.cache_grads.into_cache(dcos, dsin, cos, positions)
        return dq, dcos, dsin, ops.zeros(positions.shape, positions.dtype)

    def _q_and_k(self, q, k, cos, sin, positions, dout):
        dq, dk = self.transpose(dout[0], dout[1], cos, sin, positions)
        q_y, q_x = self.sides(q, dout[0])
        k_y, k_x = self.sides(k, dout[1])
        q_dcos, q_dsin = self.cache_grads.per_token(q_y, q_x, cos)
        k_dcos, k_dsin = self.cache_grads.per_token(k_y, k_x, cos)
        dcos, dsin = self.cache_grads.into_cache(q_dcos + k_dcos, q_dsin + k_dsin, cos, positions)
        return dq.astype(q.dtype), dk.astype(k.dtype), dcos, dsin, ops.zeros(positions.shape, positions.dtype)


CONSTANT_TARGET_ERROR = (
    "ms_rotary: {name} is a compile-time constant in this graph (made by ops.ones/zeros/fill/ones_like or a "
    "Tensor captured from outside the graph), which MindSpore folds into the graph, so an in-place write to it "
    "would be lost (MindSpore's own Tensor.copy_ loses it too). Compute it from a graph input (e.g. x * 0 + 1), "
    "hold it in a Parameter, or use the out-of-place op.")
LEAF_ERROR = (
    "ms_rotary: {op} cannot rotate {name} in place while PyNative autograd records: {name} is a leaf tensor "
    "that requires grad (an input of the function being differentiated, or a trainable Parameter), and "
    "MindSpore forbids in-place writes to those. Rotate a copy ({name}.copy() or {name} * 1), or use "
    "the out-of-place call.")
UNTRACKED_ERROR = (
    "ms_rotary: {op} cannot rotate {name} in place while PyNative autograd records: {name} does not require "
    "grad but cos or sin does, so the result has a gradient that an in-place write to an untracked tensor "
    "cannot carry. Use the out-of-place call.")
SECOND_ORDER_ERROR = (
    "ms_rotary: {op}: second-order gradients (grad of grad) through an in-place call are not supported in "
    "PyNative: MindSpore 2.10's PyNative higher-order autograd does not follow the rebinding an in-place "
    "call records there. Use the out-of-place call, or run the network in GRAPH_MODE or under ms.jit. "
    "(Without a grad of grad, an exception raised inside an earlier PyNative ms.grad left MindSpore recording "
    "as if nested: MindSpore 2.10 does not reset that; mindspore.graph.api._pynative_executor.clear_res() does.)")
VIEW_WRITE_ERROR = (
    "ms_rotary: {op} cannot write {name} in place in this graph: {name} is a view (non-contiguous, or part of a "
    "larger tensor) passed into it, which MindSpore 2.10 would write in the wrong order (its own in-place ops "
    "too); nothing was written. Pass {name}.contiguous() and use the result, or call it in PyNative. MindSpore "
    "runs no compiled network again after one of its kernels failed (README, \"Refusals at run time\").")


class _Rotary(_SliceBounds):
    """One RotaryCall on a target (`backend`, a targets.KERNELS key, for `device_target`): the routing shared
    by both kinds of call, asked once per call."""

    def __init__(self, call, backend, device_target, op_name):
        super().__init__(call)
        self.call, self.op_name = call, op_name
        self.backend, self.device_target = backend, device_target
        self.names, self.count = call.rotated_names, len(call.rotated_names)

    def __call__(self, *inputs):
        route = routes.current()
        check_eager_inputs(inputs[:self.count], self.names, inputs[self.count], inputs[self.count + 1],
                           self.call.in_place, writes_memory=self.call.in_place and route is not Route.RECORDING)
        if route is Route.TRACED:  # construct and the bprops go into the graph
            return self._call_traced(*inputs)
        try:
            if route is Route.EAGER:
                return self._call_now(*inputs)
            return self._call_recorded(*inputs)
        except Exception:
            # MindSpore 2.10 leaves PyNative autograd recording for good when a forward under ms.grad raises
            # (later first-order backwards then run as if second-order): reset it before the error leaves.
            if routes.current() is Route.RECORDING:
                _pynative_executor.clear_res()
            raise

    def _call_traced(self, *inputs):
        return super().__call__(*inputs)


class RotaryFunction(_Rotary):
    """The call out of place with its bprop. Subclasses spell out the inputs (MindSpore reads a bprop's
    parameters): TableFunction (x, cos, sin), CacheFunction (q, cos, sin, positions), CacheQKFunction
    (q, k, cos, sin, positions)."""

    def __init__(self, call, backend, device_target, op_name="ms_rotary", transpose_of=None):
        super().__init__(call, backend, device_target, op_name)
        self.kernel = KERNELS[backend](call, device_target)
        self.backward = RotaryBackward(call, backend, device_target)
        # A function and its transpose refer to each other (gradients of any order without building more),
        # outside the cell tree so it has no cycle. An in-place call's transpose gets an out-of-place transpose
        # of its own: autograd's dout must never be written.
        transpose = transpose_of or function_class(call)(call.transpose(), backend, device_target, op_name,
                                                         transpose_of=None if call.in_place else self)
        object.__setattr__(self.backward, "transpose", transpose)

    def _call_now(self, *inputs):
        return self.kernel(*inputs)

    def _call_recorded(self, *inputs):
        return nn.Cell.__call__(self, *tensor_positions(self.call, inputs))  # records the bprop


class TableFunction(RotaryFunction):
    def construct(self, x, cos, sin):
        return self.kernel(x, cos, sin)

    def bprop(self, x, cos, sin, out, dout):
        return self.backward(x, cos, sin, dout)


class CacheFunction(RotaryFunction):
    def construct(self, q, cos, sin, positions):
        return self.kernel(q, cos, sin, positions)

    def bprop(self, q, cos, sin, positions, out, dout):
        return self.backward(q, cos, sin, positions, dout)


@ops.constexpr
def _checked_q_and_k(call, q_shape, k_shape, q_dtype, k_dtype, cos_shape, sin_shape, cos_dtype, sin_dtype,
                     positions_shape):
    """Traced, at compile time: the rules that span q and k, which the target's primitives (one a tensor on
    CPU) do not see together."""
    check_cache_read_call(call, (q_shape, k_shape), (q_dtype, k_dtype), cos_shape, sin_shape, cos_dtype, sin_dtype,
                          positions_shape)
    return True


class CacheQKFunction(RotaryFunction):
    def construct(self, q, k, cos, sin, positions):
        checked = _checked_q_and_k(self.call, q.shape, k.shape, q.dtype, k.dtype, cos.shape, sin.shape, cos.dtype,
                                   sin.dtype, positions.shape)
        return self.kernel(ops.depend(q, checked), k, cos, sin, positions)

    def bprop(self, q, k, cos, sin, positions, out, dout):
        return self.backward(q, k, cos, sin, positions, dout)


NORM_SECOND_ORDER_ERROR = (
    "ms_rotary.RotaryEmbedding: second-order gradients (grad of grad) through the head norm before the rotation "
    "are not supported; its first-order backward is one kernel pass. Take the norm out of the layer (norm q and k "
    "with MindSpore ops, then call the layer without norm weights) where a grad of grad is needed.")


def head_normalised(x, weight, eps, offset):
    """A head norm's output in fp32 with MindSpore ops (call.HeadNorm): the rotation's input, which cos/sin
    multiply; also Ascend's norm before its rotation kernel (embedding.ComposedNorm)."""
    x = x.astype(ms.float32)
    return x * ops.rsqrt((x * x).mean(-1, keep_dims=True) + eps) * (weight.astype(ms.float32) + offset)


class NormBackward(nn.Cell):
    """(a head norm's call's inputs, dout) -> their gradients: dq (dk) and the weights' from the target's backward
    (eagerly one pass a tensor; traced its dx and weight-gradient primitives), cos/sin as a cache read's
    (CacheGrads at the normalised input, with MindSpore ops: a graph drops them when the cache is not trained,
    PyNative computes them only for a cache that requires grad). A grad of grad is refused."""

    def __init__(self, call, backend, device_target):
        super().__init__()
        self.kernel = KERNELS[backend](call, device_target)
        self.cache_grads = CacheGrads(call)
        self.eps, self.offset = call.norm.eps, call.norm.offset
        self.on_host = routes.on_host(device_target)
        self.count = len(call.rotated_names)

    def __call__(self, *args):
        route = routes.current()
        if route is Route.RECORDING:  # an outer grad records this backward
            raise ValueError(NORM_SECOND_ORDER_ERROR)
        if route is Route.TRACED or not self.on_host:
            return super().__call__(*args)
        count = self.count
        tensors, (cos, sin, positions) = args[:count], args[count:count + 3]
        weights, douts = args[count + 3:2 * count + 3], args[-1] if count == 2 else (args[-1],)
        grads = [self.kernel.norm_grads_now(dout, x, cos, sin, positions, weight)
                 for dout, x, weight in zip(douts, tensors, weights)]
        dcos = dsin = None
        if cos._requires_grad or sin._requires_grad:
            positions = positions if isinstance(positions, ms.Tensor) else ms.Tensor(positions)
            dcos, dsin = self._cache_grads(tensors, weights, douts, cos, positions)
        return (*(dx for dx, _ in grads), dcos, dsin, None, *(dw for _, dw in grads))

    def normalised(self, x, weight):
        return head_normalised(x, weight, self.eps, self.offset)

    def _cache_grads(self, tensors, weights, douts, cos, positions):
        dcos, dsin = self.cache_grads.per_token(douts[0], self.normalised(tensors[0], weights[0]), cos)
        if len(tensors) == 2:
            more_dcos, more_dsin = self.cache_grads.per_token(douts[1], self.normalised(tensors[1], weights[1]), cos)
            dcos, dsin = dcos + more_dcos, dsin + more_dsin
        return self.cache_grads.into_cache(dcos, dsin, cos, positions)


class NormBackwardQ(NormBackward):
    # Straight-line (graph autodiff of a bprop fails on a loop or a branch).
    def construct(self, q, cos, sin, positions, q_weight, dout):
        dq, dw = self.kernel.norm_grads_q(dout, q, cos, sin, positions, q_weight)
        dcos, dsin = self.cache_grads.per_token(dout, self.normalised(q, q_weight), cos)
        dcos, dsin = self.cache_grads.into_cache(dcos, dsin, cos, positions)
        return dq, dcos, dsin, ops.zeros(positions.shape, positions.dtype), dw.astype(q_weight.dtype)

    def bprop(self, q, cos, sin, positions, q_weight, dout, out, dout_of_out):
        raise ValueError(NORM_SECOND_ORDER_ERROR)


class NormBackwardQK(NormBackward):
    def construct(self, q, k, cos, sin, positions, q_weight, k_weight, dout):
        dq, dwq = self.kernel.norm_grads_q(dout[0], q, cos, sin, positions, q_weight)
        dk, dwk = self.kernel.norm_grads_k(dout[1], k, cos, sin, positions, k_weight)
        q_dcos, q_dsin = self.cache_grads.per_token(dout[0], self.normalised(q, q_weight), cos)
        k_dcos, k_dsin = self.cache_grads.per_token(dout[1], self.normalised(k, k_weight), cos)
        dcos, dsin = self.cache_grads.into_cache(q_dcos + k_dcos, q_dsin + k_dsin, cos, positions)
        return (dq, dk, dcos, dsin, ops.zeros(positions.shape, positions.dtype), dwq.astype(q_weight.dtype),
                dwk.astype(k_weight.dtype))

    def bprop(self, q, k, cos, sin, positions, q_weight, k_weight, dout, out, dout_of_out):
        raise ValueError(NORM_SECOND_ORDER_ERROR)


class NormFunction(_Rotary):
    """A cache read with a head norm first (RotaryCall.norm), out of place, with its bprop (NormBackward)."""

    def __init__(self, call, backend, device_target, op_name="ms_rotary"):
        super().__init__(call, backend, device_target, op_name)
        self.kernel = KERNELS[backend](call, device_target)
        self.backward = (NormBackwardQK if call.cache.with_k else NormBackwardQ)(call, backend, device_target)

    def _call_now(self, *inputs):
        return self.kernel(*inputs)

    def _call_recorded(self, *inputs):
        return nn.Cell.__call__(self, *tensor_positions(self.call, inputs))  # records the bprop


class NormFunctionQ(NormFunction):
    def construct(self, q, cos, sin, positions, q_weight):
        return self.kernel(q, cos, sin, positions, q_weight)

    def bprop(self, q, cos, sin, positions, q_weight, out, dout):
        return self.backward(q, cos, sin, positions, q_weight, dout)


class NormFunctionQK(NormFunction):
    def construct(self, q, k, cos, sin, positions, q_weight, k_weight):
        checked = _checked_q_and_k(self.call, q.shape, k.shape, q.dtype, k.dtype, cos.shape, sin.shape, cos.dtype,
                                   sin.dtype, positions.shape)
        return self.kernel(ops.depend(q, checked), k, cos, sin, positions, q_weight, k_weight)

    def bprop(self, q, k, cos, sin, positions, q_weight, k_weight, out, dout):
        return self.backward(q, k, cos, sin, positions, q_weight, k_weight, dout)


def function_class(call):
    if call.cache is None:
        return TableFunction
    if call.norm is not None:
        return NormFunctionQK if call.cache.with_k else NormFunctionQ
    return CacheQKFunction if call.cache.with_k else CacheFunction


class _Rebound:
    """The out-of-place call whose results an in-place call rebinds its inputs to (PyNative, recording): each
    result is bumped to `version_floor` before autograd saves it as the op's output; a grad of grad through
    it is refused (SECOND_ORDER_ERROR)."""

    version_floor = 0

    def bumped(self, out):
        for result in out if isinstance(out, tuple) else (out,):
            advance_version(result, self.version_floor)
        return out

    def refuse_second_order(self):
        if routes.current() is Route.RECORDING:
            raise ValueError(SECOND_ORDER_ERROR.format(op=self.op_name))


class _ReboundTable(_Rebound, TableFunction):
    def construct(self, x, cos, sin):
        return self.bumped(self.kernel(x, cos, sin))

    def bprop(self, x, cos, sin, out, dout):
        self.refuse_second_order()
        return self.backward(x, cos, sin, dout)


class _ReboundCache(_Rebound, CacheFunction):
    def construct(self, q, cos, sin, positions):
        return self.bumped(self.kernel(q, cos, sin, positions))

    def bprop(self, q, cos, sin, positions, out, dout):
        self.refuse_second_order()
        return self.backward(q, cos, sin, positions, dout)


class _ReboundCacheQK(_Rebound, CacheQKFunction):
    def construct(self, q, k, cos, sin, positions):
        return self.bumped(self.kernel(q, k, cos, sin, positions))

    def bprop(self, q, k, cos, sin, positions, out, dout):
        self.refuse_second_order()
        return self.backward(q, k, cos, sin, positions, dout)


class _ReboundNormQ(_Rebound, NormFunctionQ):
    def construct(self, q, cos, sin, positions, q_weight):
        return self.bumped(self.kernel(q, cos, sin, positions, q_weight))

    def bprop(self, q, cos, sin, positions, q_weight, out, dout):
        self.refuse_second_order()
        return self.backward(q, cos, sin, positions, q_weight, dout)


class _ReboundNormQK(_Rebound, NormFunctionQK):
    def construct(self, q, k, cos, sin, positions, q_weight, k_weight):
        return self.bumped(self.kernel(q, k, cos, sin, positions, q_weight, k_weight))

    def bprop(self, q, k, cos, sin, positions, q_weight, k_weight, out, dout):
        self.refuse_second_order()
        return self.backward(q, k, cos, sin, positions, q_weight, k_weight, dout)


def _rebound_class(call):
    if call.cache is None:
        return _ReboundTable
    if call.norm is not None:
        return _ReboundNormQK if call.cache.with_k else _ReboundNormQ
    return _ReboundCacheQK if call.cache.with_k else _ReboundCache


class InPlaceRotary(_Rotary):
    """In place. Traced: the target's write guard for each written tensor, `function` (this call, computed out
    of place on copies) then MindSpore's InplaceCopy into each. PyNative: the kernel writes them, or, while
    autograd records, they are rebound to the out-of-place results."""

    def __init__(self, call, backend, device_target, op_name):
        super().__init__(call, backend, device_target, op_name)
        self.function = function_class(call)(call, backend, device_target, op_name)
        self.kernel = self.function.kernel
        self.before_write = Identity()
        self.inplace_copy = InplaceCopy()
        self.constant_target_errors = [CONSTANT_TARGET_ERROR.format(name=name) for name in self.names]
        self.guards = nn.CellList([self.kernel.write_guard(VIEW_WRITE_ERROR.format(op=op_name, name=name))
                                   for name in self.names])
        # the tensors written, then those read (cos, sin, the norm weights: read_inputs), none sharing memory
        # with a written one, as check_eager_inputs and checked_norm_weights refuse eagerly
        read = ("cos", "sin", *(call.weight_names if call.norm is not None else ()))
        self.apart = self.kernel.apart_guard((*self.names, *read), self.count, (self.count, 2, *(1,) * (len(read) - 2)),
                                             functools.partial(shared_memory_error, "ms_rotary"))
        self.traced = self._traced_two if self.count == 2 else self._traced_one

    def _call_traced(self, *inputs):
        """Called from Python in GRAPH_MODE: this call compiles its own graph, whose inputs the caller holds:
        a view of part of one is refused here, before the graph exists."""
        for tensor, name in zip(inputs[:self.count], self.names):
            require_whole_storage(tensor, name)
        super()._call_traced(*inputs)
        return inputs[0] if self.count == 1 else inputs[:2]  # the caller's tensors, written

    def construct(self, *inputs):
        return self.traced(*inputs)

    def _copy_before_write(self, x):
        """The rotation reads a copy of x taken ahead of the write, which its bprop keeps for the cos/sin
        gradients: given x itself, MindSpore 2.10 hands the bprop the already written x when the call follows
        another in-place write or sits in an `if` branch (its own Tensor.copy_ fails the same way). CPU has no
        bf16 Identity: bf16 x is copied by its exact fp32 cast, rotated in fp32 and rounded once by the write
        back, as the kernel rounds."""
        return x.astype(ms.float32) if x.dtype == ms.bfloat16 else self.before_write(x)

    def _in_dtype_of(self, x, rotated):
        """The rotation of a bf16 x, computed in fp32 from its exact copy, rounded once to bf16: the values both
        the write and the result take (no fp32 -> fp32 Cast for other dtypes: MindSpore 2.10 then loses the
        write)."""
        return rotated.astype(x.dtype) if x.dtype == ms.bfloat16 else rotated

    @staticmethod
    def read_inputs(rest):
        """Of the inputs after the rotated ones, those the apart guard checks: cos, sin and any norm weights
        (positions, rest[2], are never float)."""
        return (*rest[:2], *rest[3:])

    def _traced_one(self, x, *rest):
        if F.isconstant(x):
            raise ValueError(self.constant_target_errors[0])
        before = self._copy_before_write(x)
        checked = (self.guards[0](x), self.apart(x, *self.read_inputs(rest)))
        rotated = ops.depend(self._in_dtype_of(x, self.function(before, *rest)), checked)
        return result_after_write(rotated, self.inplace_copy(x, rotated))

    def _traced_two(self, q, k, *rest):
        return self.written_two(q, k, *self.rotated_two(q, k, *rest))

    def rotated_two(self, q, k, *rest):
        """Traced: the values q and k are to take, ordered after the guards; nothing written yet (the prologue
        writes the KV caches first: kv_cache.Prologue)."""
        if F.isconstant(q):
            raise ValueError(self.constant_target_errors[0])
        if F.isconstant(k):
            raise ValueError(self.constant_target_errors[1])
        checked = (self.guards[0](q), self.guards[1](k), self.apart(q, k, *self.read_inputs(rest)))
        q_rot, k_rot = self.function(self._copy_before_write(q), self._copy_before_write(k), *rest)
        return ops.depend(self._in_dtype_of(q, q_rot), checked), ops.depend(self._in_dtype_of(k, k_rot), checked)

    def written_two(self, q, k, q_rot, k_rot):
        """Traced: q_rot and k_rot written into q and k; the values, ordered after the writes."""
        return (result_after_write(q_rot, self.inplace_copy(q, q_rot)),
                result_after_write(k_rot, self.inplace_copy(k, k_rot)))

    @property
    def out_of_place(self):
        """This call out of place, built on first use: what PyNative autograd records for it."""
        if "_out_of_place" not in self.__dict__:
            object.__setattr__(self, "_out_of_place", _rebound_class(self.call)(
                self.call.out_of_place(), self.backend, self.device_target, self.op_name))
        return self.__dict__["_out_of_place"]

    def _call_now(self, *inputs):
        """Writes the inputs' memory. The version bump holds even under ms._no_grad() inside a recorded forward:
        an op that saved an input for its backward then fails MindSpore's "modified by an inplace operation"
        check instead of reading the rotated values. On a device whose memory the host does not write (Ascend),
        the kernel rotates copies (targets.AscendKernel) and MindSpore's InplaceCopy writes them."""
        tensors = inputs[:self.count]
        rotated = self.kernel(*inputs)
        if not self.kernel.on_host:
            for tensor, values in zip(tensors, rotated if self.count == 2 else (rotated,)):
                self.inplace_copy(tensor, values)
        for tensor in tensors:
            advance_version(tensor, tensor._version + 1)
        return tensors[0] if self.count == 1 else tensors

    def _call_recorded(self, *inputs):
        tensors, (cos, sin) = inputs[:self.count], inputs[self.count:self.count + 2]
        if not any(t._requires_grad for t in tensors):
            if cos._requires_grad or sin._requires_grad:
                raise ValueError(UNTRACKED_ERROR.format(op=self.op_name, name=self.names[0]))
            return self._call_now(*inputs)
        for tensor, name in zip(tensors, self.names):
            if tensor._requires_grad and tensor._is_leaf:
                raise ValueError(LEAF_ERROR.format(op=self.op_name, name=name))
        # The rotation reads views of the inputs: tensor objects of their own that keep their memory and version
        # counters when the inputs are rebound, so the recorded op keeps what it was given. Its results leave
        # the op with a version above any input was saved at, and the inputs take results and versions over: an
        # op that saved an input itself then fails MindSpore's version check at backward instead of reading the
        # rotated values.
        source = self.out_of_place
        source.version_floor = max(t._version for t in tensors) + 1
        results = source(*(t.view(t.shape) for t in tensors), *inputs[self.count:])
        for tensor, result in zip(tensors, results if self.count == 2 else (results,)):
            tensor.assign_value(result)
        return tensors[0] if self.count == 1 else tensors


def advance_version(x, at_least):
    """Moves x's version counter (shared with its views) up to `at_least`, as MindSpore's own in-place ops
    move it on each write."""
    if x._version < at_least:
        _unsafe_set_version_counter([x], [at_least])


def rotary(call, backend=None, op_name="ms_rotary"):
    """The Cell that runs `call` on the backend chosen for this device (backend.choose_backend): an
    InPlaceRotary or the RotaryFunction."""
    device_target = routes.device_target()
    backend = choose_backend(backend, device_target)
    if call.norm is not None and call.conjugate:
        raise ValueError(f"{op_name}: a head norm's call is a forward")
    if call.in_place:
        return InPlaceRotary(call, backend, device_target, op_name)
    return function_class(call)(call, backend, device_target, op_name)
