"""rope_cos_sin against the RoPE formulas as transformers 5 states them, written here element by element with
Python's math module, and against the operator: with its tables each mode turns lane pair k by angle
position * inv_freq[k] (times the attention factor). Cross-check with transformers itself (when installed):
tests/test_tables_transformers.py."""
import math

import mindspore as ms
import numpy as np
import pytest

import ms_rotary

POSITIONS = np.array([0, 1, 2, 7, 100, 4095, 8191, 12000, 20000])
TOLERANCE = 2e-3  # fp32 cos/sin of angles up to 2e4 rad


def inv_freq_reference(dim, base, scaling=None, max_pos=None, seq_len=None):
    """One frequency at a time, from transformers 5's modeling_rope_utils formulas."""
    scaling = dict(scaling or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))  # "type": the pre-4.45 key
    base = scaling.get("rope_theta", base)
    plain = [1.0 / base ** (2 * i / dim) for i in range(dim // 2)]
    if kind == "default":
        return plain, 1.0
    if kind == "linear":
        return [f / scaling["factor"] for f in plain], 1.0
    if kind == "dynamic":
        length = max(seq_len, max_pos)
        factor = scaling["factor"]
        scaled = base * ((factor * length / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        return [1.0 / scaled ** (2 * i / dim) for i in range(dim // 2)], 1.0
    if kind == "llama3":
        factor, old = scaling["factor"], scaling["original_max_position_embeddings"]
        low_wl, high_wl = old / scaling["low_freq_factor"], old / scaling["high_freq_factor"]
        out = []
        for f in plain:
            wl = 2 * math.pi / f
            if wl < high_wl:
                out.append(f)
            elif wl > low_wl:
                out.append(f / factor)
            else:
                low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
                smooth = (old / wl - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        return out, 1.0
    if kind == "yarn":
        factor, old = scaling["factor"], scaling["original_max_position_embeddings"]

        def get_mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if scaling.get("attention_factor") is not None:
            attention = scaling["attention_factor"]
        elif scaling.get("mscale") and scaling.get("mscale_all_dim"):
            attention = get_mscale(factor, scaling["mscale"]) / get_mscale(factor, scaling["mscale_all_dim"])
        else:
            attention = get_mscale(factor)
        fast, slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1
        low = math.floor(dim * math.log(old / (fast * 2 * math.pi)) / (2 * math.log(base)))
        high = math.ceil(dim * math.log(old / (slow * 2 * math.pi)) / (2 * math.log(base)))
        low, high = max(low, 0), min(high, dim - 1)
        out = []
        for i, f in enumerate(plain):
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)
            extrapolation = 1 - ramp
            out.append(f / factor * (1 - extrapolation) + f * extrapolation)
        return out, attention
    if kind == "proportional":  # the whole head rotates; pairs past partial_rotary_factor of them do not turn
        turning = int(scaling["partial_rotary_factor"] * dim // 2)
        return [f / scaling.get("factor", 1.0) if i < turning else 0.0 for i, f in enumerate(plain)], 1.0
    if kind == "longrope":
        factor = scaling.get("factor") or max_pos / scaling["original_max_position_embeddings"]
        old = scaling["original_max_position_embeddings"]
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(old))
        ext = scaling["long_factor"] if seq_len > old else scaling["short_factor"]
        return [f / e for f, e in zip(plain, ext)], attention
    raise AssertionError(kind)


DEEPSEEK_V3_YARN = {"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                    "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
CONFIGS = {  # name: (rotary_dim, rope_theta, rope_scaling, max_position_embeddings)
    "gpt-neox default": (32, 10000.0, None, 2048),
    "linear x4": (64, 10000.0, {"rope_type": "linear", "factor": 4.0}, 4096),
    "dynamic x2": (64, 10000.0, {"type": "dynamic", "factor": 2.0}, 4096),
    "llama3.1": (128, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072),
    "deepseek-v3 yarn": (64, 10000.0, DEEPSEEK_V3_YARN, 163840),
    "yarn no mscale": (64, 1e6, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192,
                                 "rope_theta": 1e6}, 32768),
    "longrope phi3": (16, 10000.0, {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.5, 2.0, 3.0, 4.0, 5.0],
                                    "long_factor": [1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0],
                                    "original_max_position_embeddings": 4096}, 131072),
    "proportional gemma4": (64, 1e6, {"rope_type": "proportional", "partial_rotary_factor": 0.25}, 131072),
}


def expected_angles(name, positions, seq_len=None):
    dim, base, scaling, max_pos = CONFIGS[name]
    seq_len = seq_len if seq_len is not None else int(np.max(positions)) + 1
    inv, attention = inv_freq_reference(dim, base, scaling, max_pos, seq_len)
    return np.outer(positions, inv), attention


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("mode", [0, 1, 3])
def test_tables_follow_the_formulas_in_each_lane_layout(name, mode):
    dim, base, scaling, max_pos = CONFIGS[name]
    cos, sin = ms_rotary.rope_cos_sin(ms.Tensor(POSITIONS), dim, mode, base, scaling, max_pos)
    assert cos.shape == (1, len(POSITIONS), 1, dim) and cos.dtype == ms.float32
    angles, attention = expected_angles(name, POSITIONS)
    lanes = np.concatenate([angles, angles], -1) if mode in (0, 3) else np.repeat(angles, 2, -1)
    np.testing.assert_allclose(cos.asnumpy()[0, :, 0], attention * np.cos(lanes), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(sin.asnumpy()[0, :, 0], attention * np.sin(lanes), atol=TOLERANCE, rtol=0)


def test_scaling_types_change_the_tables():
    """Guards the references above from agreeing by doing nothing: each scaled config differs from default."""
    for name in CONFIGS:
        dim, base, scaling, max_pos = CONFIGS[name]
        if scaling is None:
            continue
        angles, attention = expected_angles(name, POSITIONS)
        plain = np.outer(POSITIONS, [1.0 / scaling.get("rope_theta", base) ** (2 * i / dim) for i in range(dim // 2)])
        assert np.abs(attention * np.cos(angles) - np.cos(plain)).max() > 0.05, name


def test_dynamic_and_longrope_follow_seq_len():
    dim, base, scaling, max_pos = CONFIGS["dynamic x2"]
    short = ms_rotary.rope_cos_sin(np.arange(8), dim, 0, base, scaling, max_pos)[0].asnumpy()
    plain = ms_rotary.rope_cos_sin(np.arange(8), dim, 0, base, None, max_pos)[0].asnumpy()
    np.testing.assert_array_equal(short, plain)  # within max_position_embeddings dynamic is the default
    longer = ms_rotary.rope_cos_sin(np.arange(8), dim, 0, base, scaling, max_pos, seq_len=3 * max_pos)[0].asnumpy()
    angles, _ = expected_angles("dynamic x2", np.arange(8), seq_len=3 * max_pos)
    np.testing.assert_allclose(longer[0, :, 0], np.cos(np.concatenate([angles, angles], -1)), atol=TOLERANCE)
    dim, base, scaling, max_pos = CONFIGS["longrope phi3"]
    for seq_len in (100, 5000):  # short factors up to original_max_position_embeddings, long ones beyond
        cos = ms_rotary.rope_cos_sin(np.arange(8), dim, 1, base, scaling, max_pos, seq_len=seq_len)[0].asnumpy()
        angles, attention = expected_angles("longrope phi3", np.arange(8), seq_len=seq_len)
        np.testing.assert_allclose(cos[0, :, 0], attention * np.cos(np.repeat(angles, 2, -1)), atol=TOLERANCE)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_each_mode_turns_pair_k_by_its_angle(mode):
    """The table puts frequency k on the lanes the kernel pairs: rotating x with the op equals multiplying
    each pair (x_a + i x_b), read in x's layout and written in y's, by exp(i * angle_k)."""
    from ms_rotary.modes import lane_pairs
    dim, seq = 16, 5
    rng = np.random.default_rng(mode)
    tokens = rng.integers(0, 50, seq)
    positions = np.stack([tokens, rng.integers(0, 9, seq)], -1) if mode == 2 else tokens
    cos, sin = ms_rotary.rope_cos_sin(positions, dim, mode, rope_theta=100.0, dtype=ms.float32)
    x = rng.standard_normal((2, seq, 3, dim)).astype(np.float32)
    y = ms_rotary.PartialRotaryMul(mode, [0, dim])(ms.Tensor(x), cos, sin).asnumpy().astype(np.float64)
    inv = 1.0 / 100.0 ** (np.arange(0, dim // (2 if mode == 2 else 1), 2) / (dim // (2 if mode == 2 else 1)))
    if mode == 2:
        angles = np.concatenate([np.outer(positions[:, 0], inv), np.outer(positions[:, 1], inv)], -1)
    else:
        angles = np.outer(positions, inv)
    xa, xb, ya, yb = lane_pairs(mode, dim)
    turned = (x[..., xa] + 1j * x[..., xb]) * np.exp(1j * angles)[None, :, None, :]
    np.testing.assert_allclose(y[..., ya], turned.real, atol=1e-5)
    np.testing.assert_allclose(y[..., yb], turned.imag, atol=1e-5)


def test_batched_positions_and_dtypes():
    positions = np.array([[0, 1, 2, 3], [5, 6, 7, 8]])
    for dtype in (ms.float16, ms.bfloat16):
        cos, sin = ms_rotary.rope_cos_sin(positions, 8, 1, dtype=dtype)
        assert cos.shape == (2, 4, 1, 8) and cos.dtype == dtype and sin.dtype == dtype
        reference = ms_rotary.rope_cos_sin(positions, 8, 1)[1].asnumpy()
        np.testing.assert_allclose(sin.astype(ms.float32).asnumpy(), reference, atol=8e-3)


_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
_LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.0], "long_factor": [2.0, 2.0],
             "original_max_position_embeddings": 4096}


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rope_scaling={"rope_type": "ntk-by-parts", "factor": 2.0}), ValueError, "rope_type='ntk-by-parts'"),
    (dict(rope_scaling={"rope_type": "linear"}), ValueError, r"needs \['factor'\]"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8192}), ValueError, "high_freq_factor"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0, "fator": 3.0}), ValueError, r"\['fator'\]"),
    (dict(rope_scaling={"rope_type": "linear", "factor": -1}), ValueError,
     r"'factor'\]=-1 must be a finite number > 0"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), ValueError, "needs max_position_embeddings"),
    (dict(rope_scaling=[("rope_type", "linear")]), TypeError, "must be None or a dict"),
    (dict(rotary_dim=7), ValueError, "rotary_dim=7 must be a positive multiple of 2"),
    (dict(rotary_dim=6, rotary_mode=2, positions=np.zeros((3, 2), np.int64)), ValueError, "multiple of 4"),
    (dict(rotary_mode=2), ValueError, r"\[S, 2\] or \[B, S, 2\]"),
    (dict(positions=np.zeros((1, 2, 3), np.int64)), ValueError, r"\[S\] or \[B, S\]"),
    (dict(positions=np.array([0.0, 1.0])), TypeError, "positions must hold integers"),
    (dict(positions=np.array([-1, 0])), ValueError, "positions must be >= 0"),
    (dict(rope_theta=1.0), ValueError, "rope_theta=1.0"),
    (dict(dtype=ms.int32), TypeError, "dtype=Int32"),
    (dict(rotary_mode="rotate"), ValueError, "rotary_mode='rotate'"),
    # Each config value's type, finiteness and range, the key named (before: ZeroDivisionError, finite
    # garbage, NaN or negated tables, "can't multiply sequence", a string theta taken).
    (dict(max_position_embeddings=0), ValueError, r"max_position_embeddings=0 must be an integer >= 1"),
    (dict(max_position_embeddings=-4, rope_scaling={"rope_type": "dynamic", "factor": 2.0}), ValueError,
     r"max_position_embeddings=-4 must be an integer >= 1"),
    (dict(rope_scaling={**_YARN, "attention_factor": float("nan")}), ValueError,
     r"rope_scaling\['attention_factor'\]=nan must be a finite number > 0"),
    (dict(rope_scaling={**_YARN, "attention_factor": -1.0}), ValueError, r"'attention_factor'\]=-1.0"),
    (dict(rope_scaling={**_YARN, "mscale": "1.0", "mscale_all_dim": 1.0}), ValueError,
     r"rope_scaling\['mscale'\]='1.0' must be a finite number >= 0"),
    (dict(rope_scaling={**_YARN, "beta_fast": float("inf")}), ValueError, r"'beta_fast'\]=inf"),
    (dict(rope_scaling={**_YARN, "truncate": "yes"}), ValueError, r"'truncate'\]='yes' must be True or False"),
    (dict(rope_scaling={**_YARN, "original_max_position_embeddings": 0}), ValueError,
     r"'original_max_position_embeddings'\]=0 must be an integer >= 1"),
    (dict(rope_scaling={**_LONGROPE, "short_factor": [1.0, 0.0]}), ValueError,
     r"'short_factor'\]=\[1.0, 0.0\] must be a list of finite numbers > 0"),
    (dict(rope_scaling={**_LONGROPE, "long_factor": [1.0, float("nan")]}), ValueError, r"'long_factor'"),
    (dict(rope_scaling={"rope_type": "default", "partial_rotary_factor": 1.5}), ValueError,
     r"'partial_rotary_factor'\]=1.5 must be a number in \(0, 1\]"),
    (dict(rope_scaling={"rope_type": "default", "rope_theta": "10000"}), ValueError, r"'rope_theta'\]='10000'"),
    (dict(rope_theta="10000"), ValueError, r"rope_theta='10000' must be a finite number > 0"),
    (dict(rope_theta=float("nan")), ValueError, r"rope_theta=nan"),
    (dict(seq_len=-1), ValueError, r"seq_len=-1 must be an integer >= 0"),
])
def test_bad_configs_are_refused_by_name(kwargs, error, match):
    arguments = dict(positions=np.arange(4), rotary_dim=8, rotary_mode=0)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        ms_rotary.rope_cos_sin(**arguments)


def test_the_mode_is_required_and_says_which_family_needs_which():
    """Before: it defaulted to interleave, and Llama-style (rotate-half) code using the default rotated
    silently wrong (2.5 off the Hugging Face layer)."""
    with pytest.raises(TypeError, match=r"rotary_mode is required.*Llama.*'half'"):
        ms_rotary.rope_cos_sin(np.arange(4), 8)


def test_one_integer_position_is_a_decode_step():
    cos, sin = ms_rotary.rope_cos_sin(37, 8, "half", rope_theta=100.0)
    full_cos, full_sin = ms_rotary.rope_cos_sin(np.arange(38), 8, "half", rope_theta=100.0)
    assert cos.shape == (1, 1, 1, 8)
    np.testing.assert_array_equal(cos.asnumpy(), full_cos.asnumpy()[:, 37:38])
    np.testing.assert_array_equal(sin.asnumpy(), full_sin.asnumpy()[:, 37:38])


def test_a_partial_rotary_factor_is_checked_against_head_dim_not_ignored():
    """Before: rope_cos_sin(pos, 80, "half", rope_scaling={..., "partial_rotary_factor": 0.4}) returned 80-wide
    tables, and with partial_slice=None the whole head rotated."""
    scaling = {"rope_type": "default", "partial_rotary_factor": 0.4}
    with pytest.raises(ValueError, match=r"partial_rotary_factor'\]=0.4 rotates part of each head: pass head_dim="):
        ms_rotary.rope_cos_sin(np.arange(4), 80, "half", rope_scaling=scaling)
    with pytest.raises(ValueError, match=r"rotary_dim=80 but head_dim=80 .* = 32 lanes"):
        ms_rotary.rope_cos_sin(np.arange(4), 80, "half", rope_scaling=scaling, head_dim=80)
    cos, _ = ms_rotary.rope_cos_sin(np.arange(4), 32, "half", rope_scaling=scaling, head_dim=80)
    plain, _ = ms_rotary.rope_cos_sin(np.arange(4), 32, "half")
    np.testing.assert_array_equal(cos.asnumpy(), plain.asnumpy())  # frequencies over the rotated 32 lanes, as HF
