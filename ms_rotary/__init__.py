"""ms_rotary: partial rotary position embedding (RoPE) for MindSpore, forward and backward, all four modes."""
from .backend import ENV_VAR as BACKEND_ENV_VAR
from .constraints import MAX_HEAD_DIM
from .library import compiled_kernel_path
from .modes import MODE_NAMES
from .ops import InplacePartialRotaryMul, InplacePartialRotaryMulGrad, PartialRotaryMul, partial_rotary_mul

__version__ = "0.1.0"

__all__ = [
    "InplacePartialRotaryMulGrad",
    "InplacePartialRotaryMul",
    "PartialRotaryMul",
    "partial_rotary_mul",
    "MODE_NAMES",
    "MAX_HEAD_DIM",
    "BACKEND_ENV_VAR",
    "compiled_kernel_path",
]
