"""Registration info of the Ascend C kernels (kernel/ascend/, built by kernel/ascend/build.sh).
Input, output and attribute names match the OpDef in kernel/ascend/op_host/ms_rotary_partial_rotary_mul.cpp."""
import itertools

from mindspore.ops import CustomRegOp, DataType

from .cpu import SLICE_FROM_COS

_FLOATS = (DataType.F32_Default, DataType.F16_Default, DataType.BF16_Default)

OP_TYPES = {False: "MsRotaryPartialRotaryMul", True: "MsRotaryPartialRotaryMulGrad"}  # by `conjugate`


def reg_info(op_name, rotary_mode, partial_slice):
    """The kernel writes the rotated slice into dy; output "dy" shares the name, as the OpDef declares."""
    slice_attr = list(partial_slice) if partial_slice is not None else SLICE_FROM_COS
    info = (CustomRegOp(op_name)
            .input(0, "dy").input(1, "cos").input(2, "sin")
            .output(0, "dy")
            .attr("rotary_mode", "required", "int", value=int(rotary_mode))
            .attr("partial_slice", "required", "listInt", value=slice_attr))
    for dy_type, cos_type in itertools.product(_FLOATS, _FLOATS):
        info = info.dtype_format(dy_type, cos_type, cos_type, dy_type)
    return info.target("Ascend").get_op_info()
