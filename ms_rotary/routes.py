"""Where a call runs, decided in one place: each call asks `current()` once (functions.py), a recorded backward
once more for itself:

  TRACED     GRAPH_MODE or inside ms.jit: the call becomes nodes of a graph (construct and the bprops)
  EAGER      PyNative with nothing recording: the call runs now
  RECORDING  PyNative while autograd records ops for a later backward (the forward of ms.grad,
             value_and_grad, TrainOneStepCell; a bprop while an outer grad differentiates it)

An eager call touches the tensors' memory itself only where that memory is the host's (`on_host`)."""
import enum

import mindspore as ms
from mindspore import context
from mindspore.graph.api import _pynative_executor
from mindspore.graph.jit_context import jit_context


class Route(enum.Enum):
    TRACED = "traced"
    EAGER = "eager"
    RECORDING = "recording"


def current():
    if context._get_mode() != ms.PYNATIVE_MODE or jit_context() is not None:
        return Route.TRACED
    if _pynative_executor.grad_flag() and _pynative_executor.enable_grad():
        return Route.RECORDING
    return Route.EAGER


def device_target():
    """The device the ops are built for: read once per op (it costs ~20 us) and handed to its parts."""
    return ms.get_context("device_target")


def on_host(device_target):
    """True when an eager call can run the kernel on the tensors' own memory (CPU)."""
    return device_target == "CPU"


def runs_now_on_host(device_target):
    """Eager (recording or not) on CPU: the kernel runs now, on host memory."""
    return on_host(device_target) and current() is not Route.TRACED
