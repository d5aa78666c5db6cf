"""The rotation with its autograd. A RotaryFunction is one direction of the rotation, in place or out of place,
on one target; its bprop is the transposed direction, out of place (itself a RotaryFunction, so gradients of
any order), plus the gradients for cos and sin.

In place under autograd, per execution mode (README, "Autograd and in place"):
- GRAPH_MODE / ms.jit: the rotation is computed out of place and written back with MindSpore's own
  InplaceCopy, so MindSpore orders every read, view and gradient around the write as for its own in-place
  ops. (A custom kernel writing x in place was tried: a slice of x read before it saw the rotated values,
  the bprop was handed the written x when cos/sin were graph inputs, and a call whose result was dropped
  reached its bprop with the arguments packed into dout.)
- PyNative while autograd records: the rotation runs out of place and x is rebound to the result with
  Tensor.assign_value (as MindSpore's own Tensor.__setitem__ does under autograd), so later reads of x see
  the rotation and differentiate through it; an op that saved x itself for its backward then fails
  MindSpore's "modified by an inplace operation" check instead of reading the rotated values. x's old
  memory is not written: MindSpore 2.10's in-place autograd of views (Tensor.copy_ on
  q = linear(h).reshape(...)) returns zero gradients on CPU; so other views of that memory keep the old
  values. A leaf that requires grad is refused, as MindSpore refuses in-place writes to it.
- PyNative otherwise (inference, inside a first-order bprop): the kernel writes x's memory, nothing else."""
import mindspore as ms
from mindspore import context, nn, ops
from mindspore.ops import functional as F
from mindspore._c_expression import _unsafe_set_version_counter
from mindspore.graph.api import _pynative_executor
from mindspore.graph.jit_context import jit_context
from mindspore.ops.auto_generate import Identity, InplaceCopy

from .backend import choose_backend
from .kernels import KERNELS, alias_after_write, is_eager
from .layouts import MERGE, SPLIT
from .modes import MODE_LAYOUTS


def is_pynative():
    return context._get_mode() == ms.PYNATIVE_MODE and jit_context() is None


def is_recording():
    """True while PyNative autograd records ops for a later backward (the forward of ms.grad, value_and_grad,
    TrainOneStepCell; a bprop while an outer grad differentiates it)."""
    return _pynative_executor.grad_flag() and _pynative_executor.enable_grad()


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
    """(x, cos, sin, dout) -> (dx, dcos, dsin) of one RotaryFunction, x being its first input. Eagerly (PyNative on CPU), cos/sin gradients are computed only for a cos/sin that requires grad:
    by the target's kernel, or with MindSpore ops while an outer grad records this backward."""

    def __init__(self, call, backend):
        super().__init__(call)
        x_layout, y_layout = MODE_LAYOUTS[call.rotary_mode]
        self.split_x, self.merge_y = SPLIT[x_layout], MERGE[y_layout]
        if call.partial_slice is not None and call.partial_slice[0] == call.partial_slice[1]:
            self.cos_sin_grads = _no_cos_sin_grads  # empty work: nothing rotated, whatever cos's length
        else:
            self.cos_sin_grads = cos_sin_grads
        # (first input, dout) -> (y side, x side): the backward's input is in y's layout
        self.sides = _backward_sides if call.conjugate else _forward_sides
        self.device_target = ms.get_context("device_target")
        self._grads_kernel = KERNELS[backend](call.out_of_place())
        self.transpose = None  # the transposed RotaryFunction, set by the function this backward belongs to

    def __call__(self, x, cos, sin, dout):
        if is_eager(self.device_target):
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
        if is_recording():
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
    """One RotaryCall on the chosen target: the eager routing shared by both kinds of call."""

    def __init__(self, call, backend=None):
        super().__init__(call)
        self.call = call
        self.backend = choose_backend(backend, ms.get_context("device_target"))

    def __call__(self, x, cos, sin):
        if not is_pynative():  # traced: construct and the bprops go into the graph
            return super().__call__(x, cos, sin)
        try:
            if not is_recording():
                return self._call_now(x, cos, sin)
            return self._call_recorded(x, cos, sin)
        except Exception:
            # MindSpore 2.10 leaves PyNative autograd recording for good when a forward under ms.grad raises
            # (later first-order backwards then run as if second-order): reset it before the error leaves.
            if is_recording():
                _pynative_executor.clear_res()
            raise


class RotaryFunction(_Rotary):
    """The call with its bprop. Traced it computes out of place, so x is never written and the bprop can use
    it (an in-place call's graph writes the result back after: InPlaceRotary)."""

    def __init__(self, call, backend=None, transpose_of=None):
        super().__init__(call, backend)
        self.kernel = KERNELS[self.backend](call)
        self.backward = RotaryBackward(call, self.backend)
        # An out-of-place function and its transpose refer to each other (gradients of any order without
        # building more), outside the cell tree so it has no cycle. An in-place call's transpose gets an
        # out-of-place transpose of its own: autograd's dout must never be written.
        transpose = transpose_of or RotaryFunction(call.transpose(), self.backend,
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

    def __init__(self, call, backend=None):
        super().__init__(call, backend)
        self.function = RotaryFunction(call, self.backend)
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
                                                                    type(self).__name__))
        return self.__dict__["_out_of_place"]

    def _call_now(self, x, cos, sin):
        """Writes x's memory. The version bump holds even under ms._no_grad() inside a recorded forward: an op
        that saved x for its backward then fails MindSpore's "modified by an inplace operation" check instead
        of reading the rotated values."""
        self.kernel(x, cos, sin)
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

    def __init__(self, call, backend, op_name):
        super().__init__(call, backend)
        self.second_order_error = SECOND_ORDER_ERROR.format(op=op_name)

    def construct(self, x, cos, sin):
        out = self.kernel(x, cos, sin)
        advance_version(out, self.version_floor)
        return out

    def bprop(self, x, cos, sin, out, dout):
        if is_recording():
            raise ValueError(self.second_order_error)
        return super().bprop(x, cos, sin, out, dout)


def advance_version(x, at_least):
    """Moves x's version counter (shared with its views) up to `at_least`, as MindSpore's own in-place ops
    move it on each write (~1 us)."""
    if x._version < at_least:
        _unsafe_set_version_counter([x], [at_least])
