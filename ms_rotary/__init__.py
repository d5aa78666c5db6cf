"""ms_rotary: partial rotary position embedding (RoPE) for MindSpore, forward and backward, all four modes."""
from .backend import ENV_VAR as BACKEND_ENV_VAR
from .constraints import MAX_HEAD_DIM
from .embedding import RotaryEmbedding
from .library import compiled_kernel_path
from .modes import MODE_NAMES
from .ops import InplacePartialRotaryMul, InplacePartialRotaryMulGrad, PartialRotaryMul, partial_rotary_mul
from .rope_config import RopeConfig
from .tables import rope_cos_sin
from .version import __version__  # noqa: F401  (ms_rotary.__version__)

__all__ = [
    "InplacePartialRotaryMulGrad",
    "InplacePartialRotaryMul",
    "PartialRotaryMul",
    "partial_rotary_mul",
    "rope_cos_sin",
    "RopeConfig",
    "RotaryEmbedding",
    "MODE_NAMES",
    "MAX_HEAD_DIM",
    "BACKEND_ENV_VAR",
    "compiled_kernel_path",
]
