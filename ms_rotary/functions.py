"""The rotation with its autograd. A RotaryFunction is one direction of the rotation, in place or out of place,
on one target; its bprop is the transposed direction, out of place (itself a RotaryFunction, so gradients of
any order), plus the gradients for cos and sin.

In place, per route (routes.py; the user-facing statement is README, "Autograd and in place"; what was
tried before is in benchmarks/NOTES.md):
- TRACED: the rotation of a copy of x, out of place, written back with MindSpore's own InplaceCopy, which
  MindSpore orders reads, views and gradients around (InPlaceRotary.construct).
- RECORDING: the rotation out of place, x rebound to the result as MindSpore's own Tensor.__setitem__ does
  under autograd; x's old memory is kept (MindSpore 2.10's autograd of an in-place write to a view gives
  zero gradients on CPU). Leaves that require grad are refused, as MindSpore refuses them.
- EAGER: the kernel writes x's memory and moves its version counter."""
import mindspore as ms
from mindspore import nn, ops
from mindspore._c_expression import _unsafe_set_version_counter
from mindspore.graph.api import _pynative_executor
from mindspore.ops import functional as F
from mindspore.ops.auto_generate import Identity, InplaceCopy

from . import routes
from .kernels import KERNELS, alias_after_write
from .layouts import MERGE, SPLIT
from .modes import MODE_LAYOUTS
from .routes import Route


def cos_sin_grads(split_x, merge_y, y_part, x_part, cos):
    """dcos, dsin with MindSpore ops (differentiable; a graph drops them when unused). y_part is the rotated
    slice in y's lane layout and x_part in x's, float32: (dL/dy, x) for y = R x, (dy, dL/dx) for dx = R^T dy;
    split_x and merge_y are the mode's layouts.SPLIT and MERGE functions.
    dc[ya] = y[ya] x[xa], dc[yb] = y[yb] x[xb], ds[ya] = -y[ya] x[xb], ds[yb] = y[yb] x[xa]."""
    xa, xb = split_x(x_part)
    dcos = y_part * merge_y(xa, xb)
    dsin = y_part * merge_y(-xb, xa)
    return dcos.sum_to_size(cos.shape).astype(cos.dtype), dsin.sum_to_size(cos.shape).astype(cos.dtype)


def _forward_sides(first_input, dout):
    return dout, first_input


def _backward_sides(first_input, dout):
    return first_input, dout


def _no_cos_sin_grads(split_x, merge_y, y_part, x_part, cos):
    return ops.zeros_like(cos), ops.zeros_like(cos)


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


class RotaryBackward(_SliceBounds):
    """(x, cos, sin, dout) -> (dx, dcos, dsin) of one RotaryFunction, x being its first input. Eagerly
    (PyNative on CPU), cos/sin gradients are computed only for a cos/sin that requires grad:
    by the target's kernel, or with MindSpore ops while an outer grad records this backward."""

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
        self.device_target = device_target
        self._grads_kernel = KERNELS[backend](call.out_of_place(), device_target)
        self.transpose = None  # the transposed RotaryFunction, set by the function this backward belongs to

    def __call__(self, x, cos, sin, dout):
        if routes.runs_now_on_host(self.device_target):
            return self._eager(x, cos, sin, dout)
        return super().__call__(x, cos, sin, dout)

    def construct(self, x, cos, sin, dout):
        dx = self.transpose(dout, cos, sin)
        y_side, x_side = self.sides(x, dout)
        dcos, dsin = self.cos_sin_grads(self.split_x, self.merge_y, self.part(y_side, cos), self.part(x_side, cos), cos)
        return dx, dcos, dsin

    def _eager(self, x, cos, sin, dout):
        dx = self.transpose(dout, cos, sin)
        if not (cos._requires_grad or sin._requires_grad):
            return dx, None, None  # nothing asks for them (MindSpore makes zeros if something does)
        y_side, x_side = self.sides(x, dout)
        if routes.current() is Route.RECORDING:
            dcos, dsin = self.cos_sin_grads(self.split_x, self.merge_y, self.part(y_side, cos), self.part(x_side, cos),
                                            cos)
        else:
            dcos, dsin = self._grads_kernel.eager_cos_sin_grads(y_side, x_side, cos)
        return dx, dcos, dsin


CONSTANT_TARGET_ERROR = (
    "ms_rotary: {name} is a compile-time constant in this graph (made by ops.ones/zeros/fill/ones_like or a "
    "Tensor captured from outside the graph), which MindSpore folds into the graph, so an in-place write to it "
    "would be lost (MindSpore's own Tensor.copy_ loses it too). Compute it from a graph input (e.g. x * 0 + 1), "
    "hold it in a Parameter, or use the out-of-place op.")
LEAF_ERROR = (
    "ms_rotary: {op} cannot rotate {name} in place while PyNative autograd records: {name} is a leaf tensor "
    "that requires grad (an input of the function being differentiated, or a trainable Parameter), and "
    "MindSpore forbids in-place writes to those. Rotate a copy ({name}.copy() or {name} * 1), or use "
    "PartialRotaryMul.")
UNTRACKED_ERROR = (
    "ms_rotary: {op} cannot rotate {name} in place while PyNative autograd records: {name} does not require "
    "grad but cos or sin does, so the result has a gradient that an in-place write to an untracked tensor "
    "cannot carry. Use PartialRotaryMul.")
SECOND_ORDER_ERROR = (
    "ms_rotary: {op}: second-order gradients (grad of grad) through an in-place call are not supported in "
    "PyNative: MindSpore 2.10's PyNative higher-order autograd does not follow the rebinding an in-place "
    "call records there. Use PartialRotaryMul, or run the network in GRAPH_MODE or under ms.jit. (Without a "
    "grad of grad, an exception raised inside an earlier PyNative ms.grad left MindSpore recording as if "
    "nested: MindSpore 2.10 does not reset that; mindspore.graph.api._pynative_executor.clear_res() does.)")


class _Rotary(_SliceBounds):
    """One RotaryCall on a target (`backend`, a kernels.KERNELS key, for `device_target`): the routing shared
    by both kinds of call."""

    def __init__(self, call, backend, device_target):
        super().__init__(call)
        self.call = call
        self.backend, self.device_target = backend, device_target

    def __call__(self, x, cos, sin):
        route = routes.current()
        if route is Route.TRACED:  # construct and the bprops go into the graph
            return super().__call__(x, cos, sin)
        try:
            if route is Route.EAGER:
                return self._call_now(x, cos, sin)
            return self._call_recorded(x, cos, sin)
        except Exception:
            # MindSpore 2.10 leaves PyNative autograd recording for good when a forward under ms.grad raises
            # (later first-order backwards then run as if second-order): reset it before the error leaves.
            if routes.current() is Route.RECORDING:
                _pynative_executor.clear_res()
            raise


class RotaryFunction(_Rotary):
    """The call with its bprop. Traced it computes out of place, so x is never written and the bprop can use
    it (an in-place call's graph writes the result back after: InPlaceRotary)."""

    def __init__(self, call, backend, device_target, transpose_of=None):
        super().__init__(call, backend, device_target)
        self.kernel = KERNELS[backend](call, device_target)
        self.backward = RotaryBackward(call, backend, device_target)
        # An out-of-place function and its transpose refer to each other (gradients of any order without
        # building more), outside the cell tree so it has no cycle. An in-place call's transpose gets an
        # out-of-place transpose of its own: autograd's dout must never be written.
        transpose = transpose_of or RotaryFunction(call.transpose(), backend, device_target,
                                                   transpose_of=None if call.in_place else self)
        object.__setattr__(self.backward, "transpose", transpose)

    def _call_now(self, x, cos, sin):
        return self.kernel(x, cos, sin)

    def _call_recorded(self, x, cos, sin):
        return nn.Cell.__call__(self, x, cos, sin)  # records the bprop

    def construct(self, x, cos, sin):
        return self.kernel(x, cos, sin)

    def bprop(self, x, cos, sin, out, dout):
        return self.backward(x, cos, sin, dout)


class InPlaceRotary(_Rotary):
    """In place. Traced: `function` (this call, computed out of place) then MindSpore's InplaceCopy into x.
    PyNative: the kernel writes x, or, while autograd records, x is rebound to the out-of-place result."""

    def __init__(self, call, backend, device_target):
        super().__init__(call, backend, device_target)
        self.function = RotaryFunction(call, backend, device_target)
        self.kernel = self.function.kernel
        self.before_write = Identity()
        self.constant_target_error = CONSTANT_TARGET_ERROR.format(name=call.input_name)
        self.inplace_copy = InplaceCopy()

    def construct(self, x, cos, sin):
        # The rotation reads a copy of x taken ahead of the write, which its bprop keeps for the cos/sin
        # gradients: given x itself, MindSpore 2.10 hands the bprop the already written x when the call
        # follows another in-place write or sits in an `if` branch (its own Tensor.copy_ fails the same way).
        # CPU has no bf16 Identity: bf16 x is copied by its exact fp32 cast, rotated in fp32 and rounded once
        # by the write back, as the kernel rounds.
        if F.isconstant(x):
            raise ValueError(self.constant_target_error)
        before = x.astype(ms.float32) if x.dtype == ms.bfloat16 else self.before_write(x)
        return alias_after_write(x, self.inplace_copy(x, self.function(before, cos, sin)))

    @property
    def out_of_place(self):
        """This call out of place, built on first use: what PyNative autograd records for it."""
        if "_out_of_place" not in self.__dict__:
            object.__setattr__(self, "_out_of_place", _RebindSource(self.call.out_of_place(), self.backend,
                                                                    self.device_target, type(self).__name__))
        return self.__dict__["_out_of_place"]

    def _call_now(self, x, cos, sin):
        """Writes x's memory. The version bump holds even under ms._no_grad() inside a recorded forward: an op
        that saved x for its backward then fails MindSpore's "modified by an inplace operation" check instead
        of reading the rotated values. On a device whose memory the host does not write (Ascend), the kernel
        rotates a copy (kernels.AscendKernel) and MindSpore's InplaceCopy writes it into x."""
        rotated = self.kernel(x, cos, sin)
        if not routes.on_host(self.device_target):
            self.inplace_copy(x, rotated)
        advance_version(x, x._version + 1)
        return x

    def _call_recorded(self, x, cos, sin):
        name, op = self.call.input_name, type(self).__name__
        if not x._requires_grad:
            if cos._requires_grad or sin._requires_grad:
                raise ValueError(UNTRACKED_ERROR.format(op=op, name=name))
            return self._call_now(x, cos, sin)
        if x._is_leaf:
            raise ValueError(LEAF_ERROR.format(op=op, name=name))
        # The rotation reads a view of x: a tensor object of its own that keeps x's memory and version
        # counter when x is rebound, so the recorded op keeps the x it was given. Its result leaves the op
        # with a version above any x was saved at, and x takes result and version over: an op that saved x
        # itself then fails MindSpore's version check at backward instead of reading the rotated values.
        source = self.out_of_place
        source.version_floor = x._version + 1
        x.assign_value(source(x.view(x.shape), cos, sin))
        return x


class _RebindSource(RotaryFunction):
    """The out-of-place call whose result an in-place call rebinds x to (PyNative, recording): the result is
    bumped to `version_floor` before autograd saves it as the op's output."""

    version_floor = 0

    def __init__(self, call, backend, device_target, op_name):
        super().__init__(call, backend, device_target)
        self.second_order_error = SECOND_ORDER_ERROR.format(op=op_name)

    def construct(self, x, cos, sin):
        out = self.kernel(x, cos, sin)
        advance_version(out, self.version_floor)
        return out

    def bprop(self, x, cos, sin, out, dout):
        if routes.current() is Route.RECORDING:
            raise ValueError(self.second_order_error)
        return super().bprop(x, cos, sin, out, dout)


def advance_version(x, at_least):
    """Moves x's version counter (shared with its views) up to `at_least`, as MindSpore's own in-place ops
    move it on each write."""
    if x._version < at_least:
        _unsafe_set_version_counter([x], [at_least])
