"""Registration info of the CPU AOT kernels (kernel/cpu/aot_entry.cc)."""
import itertools

from mindspore.ops import CustomRegOp, DataType

from ..library import AOT_ENTRIES

_FLOATS = (DataType.F32_Default, DataType.F16_Default, DataType.BF16_Default)

ENTRIES = dict(zip((False, True), AOT_ENTRIES))  # entry point by direction (backward?)

# partial_slice=None reaches the kernel as [0, -1]: "up to cos.shape[-1]".
SLICE_FROM_COS = [0, -1]


def reg_info(entry, rotary_mode, partial_slice):
    """Reg info for one instance; attribute values are per instance, their names are shared by all."""
    slice_attr = list(partial_slice) if partial_slice is not None else SLICE_FROM_COS
    info = (CustomRegOp(entry)
            .input(0, "dy").input(1, "cos").input(2, "sin")
            .output(0, "dx")
            .attr("rotary_mode", "required", "int", value=int(rotary_mode))
            .attr("partial_slice", "required", "listInt", value=slice_attr))
    for dy_type, cos_type in itertools.product(_FLOATS, _FLOATS):
        info = info.dtype_format(dy_type, cos_type, cos_type, dy_type)
    return info.target("CPU").get_op_info()
