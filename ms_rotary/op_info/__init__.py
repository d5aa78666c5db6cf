"""CustomRegOp registration info, one module per target, built by one function."""
import itertools

from mindspore.ops import CustomRegOp, DataType

_FLOATS = (DataType.F32_Default, DataType.F16_Default, DataType.BF16_Default)
# partial_slice=None reaches the kernels as [0, -1]: "up to cos.shape[-1]" (kSliceFromCosEnd in
# kernel/common/rotary_rules.h).
SLICE_FROM_COS = [0, -1]


def reg_info(op_name, rotary_mode, partial_slice, *, target, output_name):
    """Reg info for one instance: inputs dy, cos, sin and one output, every (dy, cos/sin) float dtype pair;
    attribute values are per instance, their names are shared by every target."""
    slice_attr = list(partial_slice) if partial_slice is not None else SLICE_FROM_COS
    info = (CustomRegOp(op_name)
            .input(0, "dy").input(1, "cos").input(2, "sin")
            .output(0, output_name)
            .attr("rotary_mode", "required", "int", value=int(rotary_mode))
            .attr("partial_slice", "required", "listInt", value=slice_attr))
    for dy_type, cos_type in itertools.product(_FLOATS, _FLOATS):
        info = info.dtype_format(dy_type, cos_type, cos_type, dy_type)
    return info.target(target).get_op_info()
