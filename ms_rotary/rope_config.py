"""A model's RoPE facts from its Hugging Face config: head width, which lanes rotate, the lane layout (rotary
mode) and the table parameters, so a model is ported without guessing any of them.

    rope = ms_rotary.RopeConfig.from_config(config)       # config.json as a dict, or a config object
    cos, sin = rope.cos_sin(positions)                    # [1|B, S, 1, rotary_dim], the mode's lane layout
    q = ms_rotary.PartialRotaryMul(rope.rotary_mode, rope.partial_slice)(q, cos, sin)

Both config forms are read: transformers 4 (`rope_scaling`, top-level `rope_theta`, `partial_rotary_factor`,
GPT-NeoX's `rotary_pct`/`rotary_emb_base`, GPT-J's `rotary_dim`, ChatGLM's `kv_channels`/`rope_ratio`) and
transformers 5 (`rope_parameters`). The layout comes from `model_type` (FAMILY_MODES); a model type not listed
needs `rotary_mode=`: a guessed layout rotates silently wrong."""
import dataclasses
import numbers
from typing import Optional, Tuple

import mindspore as ms

from .constraints import normalize_mode
from .rope_scaling import COUNT, FRACTION, POSITIVE, check_value, rope_type_of
from .tables import rope_cos_sin

_PREFIX = "ms_rotary.RopeConfig"

# model_type: rotary mode of its attention (transformers' apply function for that family).
FAMILY_MODES = {
    **dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                     "gemma3_text", "gpt_neox", "phi", "phi3", "starcoder2", "stablelm", "olmo", "olmo2", "qwen2_vl",
                     "qwen2_5_vl", "qwen3_vl"), "half"),
    **dict.fromkeys(("glm", "glm4", "chatglm", "gptj"), "interleave"),  # pairs (rotate_every_two)
    "deepseek_v2": "interleave",  # complex pairs on the tail [nope | rope] of each head
    "deepseek_v3": "interleave-half",  # rope_interleave (default): pairs in, halves out; else "half"
}
_DEEPSEEK = ("deepseek_v2", "deepseek_v3")
# M-RoPE families: (section transformers 5.18 uses when the config gives none, interleaved sections?)
MROPE_FAMILIES = {"qwen2_vl": ((16, 24, 24), False), "qwen2_5_vl": ((16, 24, 24), False),
                  "qwen3_vl": ((24, 20, 20), True)}
_MROPE_KEYS = ("mrope_section", "mrope_interleaved")


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """What the ops and rope_cos_sin need from a model config (see the module docstring)."""

    model_type: Optional[str]
    head_dim: int                       # D of the q/k heads the op sees
    partial_slice: Tuple[int, int]      # the rotated lanes [start, end) of each head
    rotary_mode: int                    # 0 half, 1 interleave, 2 quarter, 3 interleave-half
    rope_theta: float
    rope_scaling: Optional[dict]        # for rope_cos_sin (rope_type and its keys), None for plain RoPE
    max_position_embeddings: Optional[int]
    mrope_section: Optional[Tuple[int, int, int]] = None  # M-RoPE: positions are [3, S] (time, height, width)
    mrope_interleaved: bool = False

    @property
    def rotary_dim(self):
        return self.partial_slice[1] - self.partial_slice[0]

    def cos_sin(self, positions, dtype=ms.float32, seq_len=None):
        """cos, sin for `positions` (rope_cos_sin's forms), in this config's lane layout and scaling."""
        return rope_cos_sin(positions, self.rotary_dim, self.rotary_mode, rope_theta=self.rope_theta,
                            rope_scaling=self.rope_scaling, max_position_embeddings=self.max_position_embeddings,
                            seq_len=seq_len, dtype=dtype, mrope_section=self.mrope_section,
                            mrope_interleaved=self.mrope_interleaved)

    @classmethod
    def from_config(cls, config, rotary_mode=None):
        """From a Hugging Face config (a dict, e.g. config.json, or a config object). `rotary_mode` overrides
        the family's layout and is required for a model_type not in FAMILY_MODES."""
        fields = _as_dict(config)
        model_type = fields.get("model_type")
        parameters = _rope_parameters(fields)
        section, interleaved = _mrope(fields, model_type, parameters)
        mode = _mode(fields, model_type, rotary_mode)
        head_dim, partial_slice = _geometry(fields, model_type, parameters)
        scaling = {key: value for key, value in parameters.items()
                   if key not in ("partial_rotary_factor",) + _MROPE_KEYS}
        if scaling.get("type") == "mrope" or scaling.get("rope_type") == "mrope":  # transformers 4's marker
            scaling.pop("type", None)
            scaling["rope_type"] = "default"
        theta = scaling.pop("rope_theta", None)
        theta = _theta(fields) if theta is None else theta
        if rope_type_of(scaling) == "default" and len(scaling) <= 1:
            scaling = None
        max_positions = _first(fields, "max_position_embeddings", "n_positions", "seq_length")
        if max_positions is not None:
            max_positions = int(check_value("max_position_embeddings", max_positions, COUNT))
        return cls(model_type, head_dim, partial_slice, mode, check_value("rope_theta", theta, POSITIVE), scaling,
                   max_positions, section, interleaved)


def _as_dict(config):
    if isinstance(config, dict):
        fields = dict(config)
    elif hasattr(config, "to_dict"):
        fields = config.to_dict()
    else:  # any object: its public data attributes, the class's (model_type) included
        fields = {name: getattr(config, name) for name in dir(config)
                  if not name.startswith("_") and not callable(getattr(config, name))}
    if "hidden_size" not in fields and isinstance(fields.get("text_config"), dict):  # multimodal wrappers
        fields = {**fields["text_config"], "model_type": fields.get("model_type")}
    return fields


def _first(fields, *keys):
    return next((fields[key] for key in keys if fields.get(key) is not None), None)


def _rope_parameters(fields):
    """transformers 5's rope_parameters, else transformers 4's rope_scaling (each may be absent)."""
    for key in ("rope_parameters", "rope_scaling"):
        value = fields.get(key)
        if value is not None:
            if not isinstance(value, dict):
                raise TypeError(f"{_PREFIX}: {key} must be a dict, got {type(value).__name__}")
            return dict(value)
    return {}


def _mrope(fields, model_type, parameters):
    """(mrope_section or None, interleaved) from the config, else the family's transformers default."""
    section = _first(parameters, "mrope_section") or _first(fields, "mrope_section")
    default_section, default_interleaved = MROPE_FAMILIES.get(model_type, (None, False))
    section = section if section is not None else default_section
    if section is None:
        return None, False
    interleaved = _first(parameters, "mrope_interleaved")
    interleaved = _first(fields, "mrope_interleaved") if interleaved is None else interleaved
    if not isinstance(section, (list, tuple)) or len(section) != 3 or \
            any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in section):
        raise ValueError(f"{_PREFIX}: mrope_section={section!r} must be three non-negative integers")
    return tuple(int(n) for n in section), bool(default_interleaved if interleaved is None else interleaved)


def _mode(fields, model_type, rotary_mode):
    if rotary_mode is not None:
        return normalize_mode(rotary_mode)
    if model_type == "deepseek_v3" and fields.get("rope_interleave") is False:
        return normalize_mode("half")
    if model_type not in FAMILY_MODES:
        raise ValueError(f"{_PREFIX}: model_type={model_type!r} has no known rotary layout; pass rotary_mode= "
                         f"(one of 'half', 'interleave', 'quarter', 'interleave-half'; families known: "
                         f"{sorted(FAMILY_MODES)})")
    return normalize_mode(FAMILY_MODES[model_type])


def _int(fields, key):
    value = fields[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{_PREFIX}: {key}={value!r} must be a positive integer")
    return int(value)


def _geometry(fields, model_type, parameters):
    """(head_dim, partial_slice) of the q/k heads the op rotates."""
    if model_type in _DEEPSEEK:  # each head is [nope | rope]; the rope part rotates
        nope, rope = _int(fields, "qk_nope_head_dim"), _int(fields, "qk_rope_head_dim")
        return nope + rope, (nope, nope + rope)
    if fields.get("head_dim") is not None:
        head_dim = _int(fields, "head_dim")
    elif fields.get("kv_channels") is not None:  # ChatGLM
        head_dim = _int(fields, "kv_channels")
    else:
        hidden_key = next((key for key in ("hidden_size", "n_embd") if fields.get(key) is not None), None)
        heads_key = next((key for key in ("num_attention_heads", "n_head") if fields.get(key) is not None), None)
        if hidden_key is None or heads_key is None:
            raise ValueError(f"{_PREFIX}: the config gives neither head_dim nor hidden_size and num_attention_heads")
        head_dim = _int(fields, hidden_key) // _int(fields, heads_key)
        if head_dim < 1:
            raise ValueError(f"{_PREFIX}: {hidden_key}={fields[hidden_key]} over {heads_key}={fields[heads_key]} "
                             f"heads leaves no head width")
    if model_type == "chatglm":  # ChatGLM2/3 rotate the first half of each head
        return head_dim, (0, head_dim // 2)
    if fields.get("rotary_dim") is not None:  # GPT-J, CodeGen
        rotary_dim = _int(fields, "rotary_dim")
    else:
        factor = _first(parameters, "partial_rotary_factor") or _first(fields, "partial_rotary_factor", "rotary_pct")
        factor = 1.0 if factor is None else check_value("partial_rotary_factor", factor, FRACTION)
        rotary_dim = int(head_dim * factor)
    if rotary_dim > head_dim or rotary_dim % 2:
        raise ValueError(f"{_PREFIX}: the rotary width {rotary_dim} must be even and at most head_dim={head_dim}")
    return head_dim, (0, rotary_dim)


def _theta(fields):
    if fields.get("rope_ratio") is not None:  # ChatGLM: base 10000 scaled by rope_ratio
        return 10000.0 * check_value("rope_ratio", fields["rope_ratio"], POSITIVE)
    theta = _first(fields, "rope_theta", "rotary_emb_base")
    return 10000.0 if theta is None else theta
