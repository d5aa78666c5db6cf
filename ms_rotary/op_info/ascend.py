"""Registration info of the Ascend C kernels (kernel/ascend/, built by kernel/ascend/build.sh). Input,
output and attribute names match the OpDef in kernel/ascend/op_host/ms_rotary_partial_rotary_mul.cpp: the
kernel writes the rotated slice into dy, so the output "dy" shares the input's name."""
import functools

from . import reg_info as _reg_info

OP_TYPES = {False: "MsRotaryPartialRotaryMul", True: "MsRotaryPartialRotaryMulGrad"}  # by `conjugate`
# The kernel's dtype ids (kernel/common/rotary_rules.h, DType): the tiling key's and the host runner's.
DTYPE_IDS = {"float32": 0, "float16": 1, "bfloat16": 2}
reg_info = functools.partial(_reg_info, target="Ascend", output_name="dy")  # (op_type, rotary_mode, slice)
