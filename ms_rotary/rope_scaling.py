"""Inverse frequencies and attention scaling of RoPE variants, in float64, from a config's `rope_scaling` /
`rope_parameters` dict. Keys, defaults and formulas follow Hugging Face transformers 5's
`modeling_rope_utils` (rope types default, linear, dynamic, yarn, llama3, longrope, proportional), reimplemented
in numpy."""
import math
import numbers

import numpy as np

_PREFIX = "ms_rotary.rope_cos_sin"
# rope_type: (required keys, optional keys). "rope_type"/"type", "rope_theta" and "partial_rotary_factor"
# (transformers 5 keeps them in the same dict) are accepted by every type.
ROPE_TYPES = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"), ()),
    "longrope": (("short_factor", "long_factor", "original_max_position_embeddings"), ("factor", "attention_factor")),
    # Gemma-4's global layers: the whole head rotates, partial_rotary_factor of its pairs with theta ** (-2i / D),
    # the other pairs with frequency 0 (unrotated)
    "proportional": ((), ("factor",)),
}
# Rope types whose partial_rotary_factor picks the turning pairs, not the rotated width.
WHOLE_HEAD_TYPES = ("proportional",)
_COMMON_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")


# What each config value must be: (kind, rule in words). Checked when present, before any table is computed.
POSITIVE, NON_NEGATIVE, COUNT, FRACTION, FLAG, FACTORS = "positive", "non-negative", "count", "fraction", "flag", \
    "factors"
VALUE_KINDS = {
    "rope_theta": POSITIVE, "factor": POSITIVE, "attention_factor": POSITIVE, "beta_fast": POSITIVE,
    "beta_slow": POSITIVE, "mscale": NON_NEGATIVE, "mscale_all_dim": NON_NEGATIVE, "low_freq_factor": POSITIVE,
    "high_freq_factor": POSITIVE, "original_max_position_embeddings": COUNT, "partial_rotary_factor": FRACTION,
    "truncate": FLAG, "short_factor": FACTORS, "long_factor": FACTORS,
}
_RULES = {POSITIVE: "a finite number > 0", NON_NEGATIVE: "a finite number >= 0", COUNT: "an integer >= 1",
          FRACTION: "a number in (0, 1]", FLAG: "True or False", FACTORS: "a list of finite numbers > 0"}


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _fits(value, kind):
    if kind == FLAG:
        return isinstance(value, bool)
    if kind == FACTORS:
        return isinstance(value, (list, tuple)) and len(value) > 0 and all(_is_real(v) and v > 0 for v in value)
    if not _is_real(value):
        return False
    if kind == COUNT:
        return value >= 1 and float(value).is_integer()
    if kind == FRACTION:
        return 0 < value <= 1
    return value > 0 if kind == POSITIVE else value >= 0


def check_value(name, value, kind):
    """`value` of config key `name` (shown as given) against its kind's rule; returns it as a float (a flag
    or factor list unchanged)."""
    if not _fits(value, kind):
        raise ValueError(f"{_PREFIX}: {name}={value!r} must be {_RULES[kind]}")
    return value if kind in (FLAG, FACTORS) else float(value)


def _number(params, key):
    return check_value(f"rope_scaling[{key!r}]", params[key], VALUE_KINDS[key])


def rope_type_of(rope_scaling):
    """The rope type a rope_scaling / rope_parameters dict names ("rope_type", or transformers 4's "type")."""
    params = rope_scaling or {}
    return params.get("rope_type", params.get("type", "default"))


def resolve_rope_scaling(rope_scaling, max_position_embeddings):
    """(rope_type, params) with keys checked; original_max_position_embeddings defaults to
    max_position_embeddings as transformers does."""
    if rope_scaling is None:
        return "default", {}
    if not isinstance(rope_scaling, dict):
        raise TypeError(f"{_PREFIX}: rope_scaling must be None or a dict, got {type(rope_scaling).__name__}")
    params = dict(rope_scaling)
    rope_type = rope_type_of(params)
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"{_PREFIX}: rope_scaling rope_type={rope_type!r} is not supported; "
                         f"use one of {sorted(ROPE_TYPES)}")
    for key, value in params.items():
        if key in VALUE_KINDS and value is not None:
            params[key] = check_value(f"rope_scaling[{key!r}]", value, VALUE_KINDS[key])
    required, optional = ROPE_TYPES[rope_type]
    if "original_max_position_embeddings" in required and "original_max_position_embeddings" not in params \
            and max_position_embeddings is not None:
        params["original_max_position_embeddings"] = max_position_embeddings
    if rope_type == "yarn" and params.get("factor") is None and max_position_embeddings is not None \
            and "original_max_position_embeddings" in params:
        params["factor"] = max_position_embeddings / params["original_max_position_embeddings"]
    missing = [key for key in required if params.get(key) is None]
    if missing:
        raise ValueError(f"{_PREFIX}: rope_scaling of rope_type {rope_type!r} needs {missing}, got keys "
                         f"{sorted(rope_scaling)}")
    unknown = sorted(set(params) - set(required) - set(optional) - set(_COMMON_KEYS))
    if unknown:
        raise ValueError(f"{_PREFIX}: rope_scaling keys {unknown} are not used by rope_type {rope_type!r}; "
                         f"it takes {sorted(required + optional)}")
    return rope_type, params


def _base_inv_freq(dim, base):
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def _yarn(dim, base, params):
    factor = _number(params, "factor")
    original = _number(params, "original_max_position_embeddings")

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = params.get("attention_factor")
    if attention is None:
        if params.get("mscale") and params.get("mscale_all_dim"):
            attention = mscale(factor, params["mscale"]) / mscale(factor, params["mscale_all_dim"])
        else:
            attention = mscale(factor)
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1

    def correction_dim(rotations):  # the frequency index that turns `rotations` times over the original length
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolated = _base_inv_freq(dim, base)
    return extrapolated / factor * ramp + extrapolated * (1.0 - ramp), float(attention)


def _llama3(dim, base, params):
    factor = _number(params, "factor")
    low_freq, high_freq = _number(params, "low_freq_factor"), _number(params, "high_freq_factor")
    original = _number(params, "original_max_position_embeddings")
    if high_freq <= low_freq:
        raise ValueError(f"{_PREFIX}: rope_scaling high_freq_factor={high_freq} must exceed "
                         f"low_freq_factor={low_freq}")
    inv_freq = _base_inv_freq(dim, base)
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low_freq) / (high_freq - low_freq)
    medium = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = np.where(wavelength > original / low_freq, inv_freq / factor, inv_freq)
    is_medium = (wavelength >= original / high_freq) & (wavelength <= original / low_freq)
    return np.where(is_medium, medium, scaled), 1.0


def _longrope(dim, base, params, seq_len, max_position_embeddings):
    original = _number(params, "original_max_position_embeddings")
    factor = params.get("factor")
    if factor is None:
        if max_position_embeddings is None:
            raise ValueError(f"{_PREFIX}: rope_type 'longrope' without 'factor' needs max_position_embeddings")
        factor = max_position_embeddings / original
    attention = params.get("attention_factor")
    if attention is None and factor > 1 and original == 1:
        raise ValueError(f"{_PREFIX}: rope_scaling['original_max_position_embeddings']=1 leaves longrope's default "
                         f"attention factor undefined (it divides by log(1)); give 'attention_factor'")
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    key = "long_factor" if seq_len > original else "short_factor"
    ext = np.asarray(params[key], dtype=np.float64)  # each > 0 (VALUE_KINDS)
    if ext.shape != (dim // 2,):
        raise ValueError(f"{_PREFIX}: rope_scaling[{key!r}] has {ext.size} values; rotary dim {dim} needs {dim // 2}")
    return _base_inv_freq(dim, base) / ext, float(attention)


def inverse_frequencies(dim, rope_theta, rope_scaling, max_position_embeddings, seq_len):
    """(inv_freq [dim/2] float64, attention_factor) for a rotary of `dim` lanes. `seq_len` (the longest
    sequence in use) drives dynamic and longrope."""
    if max_position_embeddings is not None:
        check_value("max_position_embeddings", max_position_embeddings, COUNT)
    rope_type, params = resolve_rope_scaling(rope_scaling, max_position_embeddings)
    if "rope_theta" in params:
        base = params["rope_theta"]
    else:
        base = check_value("rope_theta", rope_theta, POSITIVE)
    if base <= 1:
        raise ValueError(f"{_PREFIX}: rope_theta={base!r} must be a finite number > 1")
    if rope_type == "default":
        return _base_inv_freq(dim, base), 1.0
    if rope_type == "linear":
        return _base_inv_freq(dim, base) / _number(params, "factor"), 1.0
    if rope_type == "dynamic":
        if max_position_embeddings is None:
            raise ValueError(f"{_PREFIX}: rope_type 'dynamic' needs max_position_embeddings")
        if dim <= 2:
            raise ValueError(f"{_PREFIX}: rope_type 'dynamic' needs a rotary dim above 2, got {dim}")
        factor = _number(params, "factor")
        length = max(seq_len, max_position_embeddings)
        base = base * (factor * length / max_position_embeddings - (factor - 1)) ** (dim / (dim - 2))
        return _base_inv_freq(dim, base), 1.0
    if rope_type == "yarn":
        return _yarn(dim, base, params)
    if rope_type == "proportional":
        turning = int(params.get("partial_rotary_factor", 1.0) * dim // 2)
        inv_freq = np.zeros(dim // 2)
        inv_freq[:turning] = 1.0 / base ** (np.arange(0, 2 * turning, 2, dtype=np.float64) / dim)
        return inv_freq / params.get("factor", 1.0), 1.0
    if rope_type == "llama3":
        return _llama3(dim, base, params)
    return _longrope(dim, base, params, seq_len, max_position_embeddings)
