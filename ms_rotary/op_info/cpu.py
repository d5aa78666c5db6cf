"""Registration info of the CPU AOT kernels (kernel/cpu/aot_entry.cc)."""
import functools

from ..library import AOT_ENTRIES
from . import reg_info as _reg_info

ENTRIES = dict(zip((False, True), AOT_ENTRIES))  # entry point by direction (backward?)
reg_info = functools.partial(_reg_info, target="CPU", output_name="dx")  # (entry, rotary_mode, partial_slice)
