"""cos/sin tables for the ops: positions and a model's RoPE config in, [B|1, S, 1, rotary_dim] tensors out, with
each frequency on the lane pair the mode rotates (modes.lane_pairs, so the table always matches the kernel)."""
import numbers

import mindspore as ms
import numpy as np

from .constraints import FLOAT_DTYPES, normalize_mode
from .modes import lane_pairs
from .rope_scaling import inverse_frequencies

_PREFIX = "ms_rotary.rope_cos_sin"


def _positions(positions, quarter):
    if isinstance(positions, ms.Tensor):
        positions = positions.asnumpy()
    positions = np.asarray(positions)
    if positions.dtype.kind not in "iu":
        raise TypeError(f"{_PREFIX}: positions must hold integers, got dtype {positions.dtype}")
    rank = positions.ndim - (1 if quarter else 0)
    if rank not in (1, 2) or (quarter and positions.shape[-1] != 2):
        expected = "[S, 2] or [B, S, 2] (token and block position)" if quarter else "[S] or [B, S]"
        raise ValueError(f"{_PREFIX}: positions of shape {positions.shape} do not fit; the mode takes {expected}")
    if positions.size and positions.min() < 0:
        raise ValueError(f"{_PREFIX}: positions must be >= 0, got a minimum of {positions.min()}")
    positions = positions.astype(np.float64)
    return positions[None] if rank == 1 else positions  # [B|1, S] or [B|1, S, 2]


def rope_cos_sin(positions, rotary_dim, rotary_mode=1, rope_theta=10000.0, rope_scaling=None,
                 max_position_embeddings=None, seq_len=None, dtype=ms.float32):
    """cos, sin for `rotary_dim` rotated lanes at the given positions, in the lane layout `rotary_mode` expects.

    positions: integer Tensor or array, [S] or [B, S]; for quarter mode (ChatGLM-6B 2D) [S, 2] or [B, S, 2]
        (token position, block position: the first half of the slice rotates by the first, the second by the second).
    rotary_dim: lanes rotated (the op's partial_slice length): even, a multiple of 4 for quarter mode.
    rotary_mode: 0 half / 3 interleave-half -> lanes cat(f, f); 1 interleave -> each frequency twice in a row;
        2 quarter -> cat(f1, f1, f2, f2), f1 from token positions, f2 from block positions.
    rope_theta, rope_scaling, max_position_embeddings: as in a Hugging Face config (`rope_scaling` or transformers
        5's `rope_parameters`, whose rope_theta wins when present); rope_type default, linear, dynamic, yarn,
        llama3 or longrope, with transformers 5's keys and defaults. The attention factor (yarn, longrope) scales
        cos and sin, as transformers does.
    seq_len: the sequence length dynamic and longrope scale for; default: largest position + 1.
    dtype: of the returned tensors (frequencies and angles are float64, rounded once; bf16 via fp32).

    Returns (cos, sin), each [1, S, 1, rotary_dim] or [B, S, 1, rotary_dim]: broadcast over heads.
    """
    mode = normalize_mode(rotary_mode)
    quarter = mode == 2
    multiple = 4 if quarter else 2
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, numbers.Integral) or rotary_dim <= 0 \
            or rotary_dim % multiple:
        raise ValueError(f"{_PREFIX}: rotary_dim={rotary_dim!r} must be a positive multiple of {multiple} "
                         f"for rotary_mode {mode}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"{_PREFIX}: dtype={dtype} must be one of {[str(t) for t in FLOAT_DTYPES]}")
    positions = _positions(positions, quarter)
    if seq_len is None:
        seq_len = int(positions.max()) + 1 if positions.size else 0
    elif isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or seq_len < 0:
        raise ValueError(f"{_PREFIX}: seq_len={seq_len!r} must be an integer >= 0")
    frequency_dim = rotary_dim // 2 if quarter else rotary_dim  # quarter: each half is a rotary of its own
    inv_freq, attention_factor = inverse_frequencies(frequency_dim, rope_theta, rope_scaling,
                                                     max_position_embeddings, seq_len)
    if quarter:  # pairs [0, d/4) turn with the token position, [d/4, d/2) with the block position
        angles = np.concatenate([positions[..., 0, None] * inv_freq, positions[..., 1, None] * inv_freq], -1)
    else:
        angles = positions[..., None] * inv_freq
    _, _, ya, yb = lane_pairs(mode, rotary_dim)
    lanes = np.empty(angles.shape[:-1] + (rotary_dim,))
    lanes[..., ya] = angles
    lanes[..., yb] = angles
    lanes = lanes[:, :, None, :]
    return tuple(_to_tensor(fn(lanes) * attention_factor, dtype) for fn in (np.cos, np.sin))


def _to_tensor(values, dtype):
    if dtype == ms.float16:
        return ms.Tensor(values.astype(np.float16))
    tensor = ms.Tensor(values.astype(np.float32))  # numpy has no bfloat16: bf16 rounds from fp32
    return tensor if dtype == ms.float32 else tensor.astype(dtype)
