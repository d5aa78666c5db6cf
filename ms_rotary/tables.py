"""cos/sin tables for the ops: positions and a model's RoPE config in, [B|1, S, 1, rotary_dim] tensors out, with
each frequency on the lane pair the mode rotates (modes.lane_pairs, so the table always matches the kernel)."""
import ctypes
import numbers

import mindspore as ms
import numpy as np
from mindspore.common.initializer import Zero, initializer

from .constraints import FLOAT_DTYPES, MAX_POSITION_AXES, normalize_mode
from .modes import lane_pairs
from .numpy_kernel import from_float32
from .rope_scaling import FRACTION, WHOLE_HEAD_TYPES, check_value, inverse_frequencies, rope_type_of

_PREFIX = "ms_rotary.rope_cos_sin"


def _integer_positions(positions):
    """A Tensor or array of positions as a numpy integer array, each >= 0."""
    positions = np.asarray(positions.asnumpy() if isinstance(positions, ms.Tensor) else positions)
    if positions.dtype.kind not in "iu":
        raise TypeError(f"{_PREFIX}: positions must hold integers, got dtype {positions.dtype}")
    if positions.size and positions.min() < 0:
        raise ValueError(f"{_PREFIX}: positions must be >= 0, got a minimum of {positions.min()}")
    return positions


def _positions(positions, quarter):
    positions = _integer_positions(positions)
    if positions.ndim == 0 and not quarter:  # one position (a decode step): S = 1
        positions = positions.reshape(1)
    rank = positions.ndim - (1 if quarter else 0)
    if rank not in (1, 2) or (quarter and positions.shape[-1] != 2):
        expected = "[S, 2] or [B, S, 2] (token and block position)" if quarter else "[S] or [B, S]"
        raise ValueError(f"{_PREFIX}: positions of shape {positions.shape} do not fit; the mode takes {expected}")
    positions = positions.astype(np.float64)
    return positions[None] if rank == 1 else positions  # [B|1, S] or [B|1, S, 2]


_MODE_REQUIRED = (
    f"{_PREFIX}: rotary_mode is required: the table's lane layout must match the op's mode, and a guessed one "
    f"rotates silently wrong. Llama, Qwen, Mistral, Gemma, GPT-NeoX and Phi use 'half'; GLM-4, ChatGLM2/3 and GPT-J "
    f"'interleave'; ChatGLM-6B 'quarter'; DeepSeek-V2/V3 'interleave-half'.")
_REQUIRED = object()


def rope_cos_sin(positions, rotary_dim, rotary_mode=_REQUIRED, rope_theta=10000.0, rope_scaling=None,
                 max_position_embeddings=None, seq_len=None, dtype=ms.float32, head_dim=None, mrope_section=None,
                 mrope_interleaved=False):
    """cos, sin for `rotary_dim` rotated lanes at the given positions, in the lane layout `rotary_mode` expects.

    positions: integer Tensor or array, [S] or [B, S], or one integer (S = 1); for quarter mode (ChatGLM-6B 2D)
        [S, 2] or [B, S, 2] (token position, block position: the first half of the slice rotates by the first,
        the second by the second).
    rotary_dim: lanes rotated (the op's partial_slice length): even, a multiple of 4 for quarter mode.
    rotary_mode (required): 0 half / 3 interleave-half -> lanes cat(f, f); 1 interleave -> each frequency twice
        in a row; 2 quarter -> cat(f1, f1, f2, f2), f1 from token positions, f2 from block positions.
    head_dim: needed only when rope_scaling holds a partial_rotary_factor f other than 1 (transformers 5 keeps it
        there): then rotary_dim must be int(head_dim * f), as transformers computes it.
    mrope_section: M-RoPE (Qwen2-VL, Qwen3-VL, ERNIE-4.5-VL): three counts of frequencies (summing to
        rotary_dim / 2) turned by the temporal, height and width positions; positions are then [3, S] or
        [3, B, S]. mrope_interleaved picks where each axis's frequencies sit (MROPE_LAYOUTS): False, consecutive
        sections t, h, w (Qwen2-VL); True, frequency i takes height if i % 3 == 1 and i < 3 * section[1],
        width if i % 3 == 2 and i < 3 * section[2], else time (Qwen3-VL); "hw", height on the even and width
        on the odd frequencies below 2 * section[1] (so section[0] == section[1]), time above (ERNIE-4.5-VL);
        "lanes", N = 3 or 4 axes, lanes [0, 2 * section[0]) turned by the first, the next
        2 * section[1] by the second, ... (HunYuan-VL); "alternate", N = 2 axes, two equal counts, the first
        axis on the even frequencies and the second on the odd (NeoMME's row and column); positions then
        [N, S] or [N, B, S].
    rope_theta, rope_scaling, max_position_embeddings: as in a Hugging Face config (`rope_scaling` or transformers
        5's `rope_parameters`, whose rope_theta wins when present); rope_type default, linear, dynamic, yarn,
        llama3, longrope or proportional, with transformers 5's keys and defaults. The attention factor (yarn,
        longrope) scales cos and sin, as transformers does.
    seq_len: the sequence length dynamic and longrope scale for; default: largest position + 1.
    dtype: of the returned tensors (frequencies and angles are float64, rounded once; bf16 via fp32).

    Returns (cos, sin), each [1, S, 1, rotary_dim] or [B, S, 1, rotary_dim]: broadcast over heads.
    """
    if rotary_mode is _REQUIRED:
        raise TypeError(_MODE_REQUIRED)
    mode = normalize_mode(rotary_mode)
    quarter = mode == 2
    multiple = 4 if quarter else 2
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, numbers.Integral) or rotary_dim <= 0 \
            or rotary_dim % multiple:
        raise ValueError(f"{_PREFIX}: rotary_dim={rotary_dim!r} must be a positive multiple of {multiple} "
                         f"for rotary_mode {mode}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"{_PREFIX}: dtype={dtype} must be one of {[str(t) for t in FLOAT_DTYPES]}")
    check_partial_rotary_factor(rope_scaling, rotary_dim, head_dim)
    lane_channels = None
    if mrope_section is not None:
        if quarter:
            raise ValueError(f"{_PREFIX}: mrope_section does not combine with quarter mode")
        lane_channels = np.array(mrope_lane_channels(mode, rotary_dim, mrope_section, mrope_interleaved))
        positions = _mrope_positions(positions, len(mrope_section))
    else:
        positions = _positions(positions, quarter)
    if seq_len is None:
        seq_len = int(positions.max()) + 1 if positions.size else 0
    elif isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or seq_len < 0:
        raise ValueError(f"{_PREFIX}: seq_len={seq_len!r} must be an integer >= 0")
    frequency_dim = rotary_dim // 2 if quarter else rotary_dim  # quarter: each half is a rotary of its own
    inv_freq, attention_factor = inverse_frequencies(frequency_dim, rope_theta, rope_scaling,
                                                     max_position_embeddings, seq_len)
    if quarter:  # pairs [0, d/4) turn with the token position, [d/4, d/2) with the block position
        angles = on_lanes(np.concatenate([positions[..., 0, None] * inv_freq, positions[..., 1, None] * inv_freq],
                                         -1), mode, rotary_dim)
    elif lane_channels is not None:  # lane l turns with position axis lane_channels[l]
        per_axis = on_lanes(positions[..., None] * inv_freq, mode, rotary_dim)
        angles = np.take_along_axis(per_axis, lane_channels.reshape(1, 1, 1, -1), 0)[0]
    else:
        angles = on_lanes(positions[..., None] * inv_freq, mode, rotary_dim)
    lanes = angles[:, :, None, :]
    return tuple(_to_tensor(fn(lanes) * attention_factor, dtype) for fn in (np.cos, np.sin))


def on_lanes(angles, mode, rotary_dim):
    """float64 values per frequency [..., rotary_dim / 2] (angles, frequencies) -> [..., rotary_dim], each on the
    lane pair the mode rotates."""
    _, _, ya, yb = lane_pairs(mode, rotary_dim)
    lanes = np.empty(angles.shape[:-1] + (rotary_dim,))
    lanes[..., ya] = angles
    lanes[..., yb] = angles
    return lanes


# Positions per block while a cache is built: the float64 work of one block is small beside the cache.
_CACHE_BLOCK = 1 << 14


def cache_parameters(positions, rotary_dim, rotary_mode, rope_theta=10000.0, rope_scaling=None,
                     max_position_embeddings=None, dtype=ms.float32, head_dim=None, transposed=False):
    """The cos and sin caches [1, positions, 1, rotary_dim] of RotaryEmbedding, as Parameters that do not
    require grad: row p holds rope_cos_sin's values at position p (quarter mode: both halves at p), bit for
    bit; `transposed` (NanoChat): sin negated. Each is allocated once in its dtype and filled block by block, so
    building peaks little above the caches' own size (a Parameter made from a whole array copies it, bf16
    through a float32 array)."""
    mode = normalize_mode(rotary_mode)
    quarter = mode == 2
    check_partial_rotary_factor(rope_scaling, rotary_dim, head_dim)
    frequency_dim = rotary_dim // 2 if quarter else rotary_dim
    inv_freq, attention_factor = inverse_frequencies(frequency_dim, rope_theta, rope_scaling, max_position_embeddings,
                                                     positions)
    name = {ms.float32: "float32", ms.float16: "float16", ms.bfloat16: "bfloat16"}[dtype]
    caches = []
    for label, fn in (("cos_cache", np.cos), ("sin_cache", np.sin)):
        cache = ms.Parameter(initializer(Zero(), (1, positions, 1, rotary_dim), dtype), name=label,
                             requires_grad=False)
        cache.init_data()
        address, row_bytes = cache.data_ptr(), rotary_dim * (4 if name == "float32" else 2)
        for begin in range(0, positions, _CACHE_BLOCK):
            rows = np.arange(begin, min(positions, begin + _CACHE_BLOCK), dtype=np.float64)
            angles = rows[:, None] * inv_freq
            if quarter:
                angles = np.concatenate([angles, angles], -1)
            values = fn(on_lanes(angles, mode, rotary_dim)) * attention_factor
            if transposed and label == "sin_cache":
                values = -values
            block = np.ascontiguousarray(values.astype(np.float16) if name == "float16" else
                                         from_float32(values.astype(np.float32), name))
            ctypes.memmove(address + begin * row_bytes, block.ctypes.data, block.nbytes)
        caches.append(cache)
    return tuple(caches)


# M-RoPE layouts, by the value of mrope_interleaved: which position axis turns each frequency (each lane).
MROPE_LAYOUTS = {False: "consecutive sections: time, height, width (Qwen2-VL)",
                 True: "height and width every third frequency, the rest time (Qwen3-VL)",
                 "hw": "height and width on alternate frequencies, then time (ERNIE-4.5-VL)",
                 "lanes": "sections of lanes: axis i turns the next 2 * section[i] lanes, 3 or 4 axes (HunYuan-VL)",
                 "alternate": "two axes on alternate frequencies, the first on the even (NeoMME: row, column)"}


def mrope_layout(interleaved):
    """mrope_interleaved checked against MROPE_LAYOUTS (a truthy string must not pass for True)."""
    if isinstance(interleaved, (bool, np.bool_)):
        return bool(interleaved)
    if isinstance(interleaved, str) and interleaved in MROPE_LAYOUTS:
        return interleaved
    raise ValueError(f"{_PREFIX}: mrope_interleaved={interleaved!r} must be one of "
                     + "; ".join(f"{key!r}: {what}" for key, what in MROPE_LAYOUTS.items()))


def mrope_lane_channels(rotary_mode, rotary_dim, section, interleaved):
    """The position axis of each of the rotary_dim cos/sin lanes: a frequency's axis on both lanes of its pair
    (mrope_channels), or with the "lanes" layout each section's lanes in turn."""
    if mrope_layout(interleaved) == "lanes":
        if not isinstance(section, (list, tuple)) or not 3 <= len(section) <= MAX_POSITION_AXES or \
                any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in section):
            raise ValueError(f"{_PREFIX}: mrope_section={section!r} must be 3 to {MAX_POSITION_AXES} non-negative "
                             f"integers, one a position axis")
        if 2 * sum(section) != rotary_dim:
            raise ValueError(f"{_PREFIX}: mrope_section={list(section)} sums to {sum(section)}; its lanes, twice "
                             f"that, must fill the rotary_dim = {rotary_dim} rotated lanes")
        return tuple(int(c) for c in np.repeat(np.arange(len(section)), 2 * np.asarray(section)))
    frequency_channels = mrope_channels(section, interleaved, rotary_dim // 2)
    lanes = np.empty(rotary_dim, np.int64)
    _, _, ya, yb = lane_pairs(normalize_mode(rotary_mode), rotary_dim)
    lanes[ya] = frequency_channels
    lanes[yb] = frequency_channels
    return tuple(int(c) for c in lanes)


def mrope_channels(section, interleaved, frequencies):
    """The position channel (0 time, 1 height, 2 width) of each of the `frequencies` frequencies."""
    interleaved = mrope_layout(interleaved)
    axes = 2 if interleaved == "alternate" else 3
    if not isinstance(section, (list, tuple)) or len(section) != axes or \
            any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in section):
        raise ValueError(f"{_PREFIX}: mrope_section={section!r} must be {'two' if axes == 2 else 'three'} "
                         f"non-negative integers" + (" (mrope_interleaved='alternate': two axes)" if axes == 2 else ""))
    # interleaved (Qwen3-VL): height and width at every third frequency below 3 * their counts, as transformers
    # slices them, whatever the sum (time takes the rest); consecutive sections must fill the frequencies
    if sum(section) != frequencies and interleaved is not True:
        raise ValueError(f"{_PREFIX}: mrope_section={list(section)} sums to {sum(section)}; rotary_dim / 2 = "
                         f"{frequencies} frequencies need it to sum to that")
    index = np.arange(frequencies)
    channels = np.zeros(frequencies, np.int64)
    if interleaved == "alternate":  # NeoMME: row, column, row, column, ...
        if section[0] != section[1]:
            raise ValueError(f"{_PREFIX}: mrope_section={list(section)} with mrope_interleaved='alternate' gives "
                             f"its two axes alternate frequencies: the counts must be equal")
        return index % 2
    if interleaved == "hw":  # ERNIE-4.5-VL: h, w, h, w, ... then t
        if section[0] != section[1]:
            raise ValueError(f"{_PREFIX}: mrope_section={list(section)} with mrope_interleaved='hw' alternates "
                             f"height and width frequencies: its first two counts must be equal")
        channels[index < 2 * section[0]] = 1 + index[index < 2 * section[0]] % 2
        return channels
    if interleaved:  # as transformers' Qwen3-VL: height and width every third frequency, the rest time
        channels[(index % 3 == 1) & (index < 3 * section[1])] = 1
        channels[(index % 3 == 2) & (index < 3 * section[2])] = 2
        return channels
    return np.repeat(np.arange(3), section)


def _mrope_positions(positions, axes):
    """[axes, S] or [axes, B, S] integers -> float64 [axes, B|1, S]."""
    positions = _integer_positions(positions)
    if positions.ndim not in (2, 3) or positions.shape[0] != axes:
        raise ValueError(f"{_PREFIX}: M-RoPE positions of shape {positions.shape} do not fit; they are "
                         f"[{axes}, S] or [{axes}, B, S] (one row a position axis"
                         f"{': temporal, height, width' if axes == 3 else ''})")
    positions = positions.astype(np.float64)
    return positions[:, None] if positions.ndim == 2 else positions


def check_partial_rotary_factor(rope_scaling, rotary_dim, head_dim):
    """A partial_rotary_factor other than 1 says only part of each head rotates: rotary_dim must be that part,
    so it is checked against head_dim rather than ignored (the whole head would rotate)."""
    factor = rope_scaling.get("partial_rotary_factor") if isinstance(rope_scaling, dict) else None
    if factor is None or rope_type_of(rope_scaling) in WHOLE_HEAD_TYPES:  # there it picks turning pairs
        return
    factor = check_value("rope_scaling['partial_rotary_factor']", factor, FRACTION)
    if factor == 1.0:
        return
    if head_dim is None:
        raise ValueError(f"{_PREFIX}: rope_scaling['partial_rotary_factor']={factor} rotates part of each head: "
                         f"pass head_dim= as well, and rotary_dim=int(head_dim * {factor}) (the op's slice length)")
    if isinstance(head_dim, bool) or not isinstance(head_dim, numbers.Integral) or head_dim <= 0:
        raise ValueError(f"{_PREFIX}: head_dim={head_dim!r} must be a positive integer")
    if int(head_dim * factor) != rotary_dim:
        raise ValueError(f"{_PREFIX}: rotary_dim={rotary_dim} but head_dim={head_dim} with "
                         f"partial_rotary_factor={factor} rotates int({head_dim} * {factor}) = "
                         f"{int(head_dim * factor)} lanes; they must agree")


def _to_tensor(values, dtype):
    if dtype == ms.float16:
        return ms.Tensor(values.astype(np.float16))
    tensor = ms.Tensor(values.astype(np.float32))  # numpy has no bfloat16: bf16 rounds from fp32
    return tensor if dtype == ms.float32 else tensor.astype(dtype)
