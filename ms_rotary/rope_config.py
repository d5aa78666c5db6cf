"""A model's RoPE facts from its Hugging Face config: head width, which lanes rotate, the lane layout (rotary
mode) and the table parameters, so a model is ported without guessing any of them.

    rope = ms_rotary.RopeConfig.from_config(config)       # config.json as a dict, or a config object
    cos, sin = rope.cos_sin(positions)                    # [1|B, S, 1, rotary_dim], the mode's lane layout
    q = ms_rotary.PartialRotaryMul(rope.rotary_mode, rope.partial_slice)(q, cos, sin)

Both config forms are read: transformers 4 (`rope_scaling`, top-level `rope_theta`, `partial_rotary_factor`,
GPT-NeoX's `rotary_pct`/`rotary_emb_base`, GPT-J's `rotary_dim`, ChatGLM's `kv_channels`/`rope_ratio`) and
transformers 5 (`rope_parameters`). The layout comes from `model_type` (FAMILY_MODES); a model type not listed
needs `rotary_mode=`: a guessed layout rotates silently wrong."""
import copy
import dataclasses
import numbers
from typing import Optional, Tuple, Union

import mindspore as ms
import numpy as np

from .constraints import normalize_mode
from .families import TRANSFORMERS_FAMILIES
from .rope_scaling import COUNT, FRACTION, NON_NEGATIVE, POSITIVE, WHOLE_HEAD_TYPES, check_value, rope_type_of
from .tables import MROPE_LAYOUTS, mrope_layout, rope_cos_sin

_PREFIX = "ms_rotary.RopeConfig"

# M-RoPE families added by hand, each under its model types. GLM-4.1V's text decoder: M-RoPE on pairs
# (rotate_half_llm, each frequency on two neighbouring lanes); GLM-4.5V's and GLM-Image's: on halves (rotate_half,
# the frequencies repeated as two halves); Qwen3-Omni (its thinker's text decoder): Qwen3-VL's interleaved
# sections (its checkpoints have 128-lane heads; its default config's 2048 / 28 leaves 73). Cosmos3-Edge is
# generated (families.py); its section default is here (MROPE_FAMILIES).
_GLM_4_1V = ("glm4v", "glm4v_text")
_GLM_4_5V = ("glm4v_moe", "glm4v_moe_text")
_GLM_IMAGE = ("glm_image", "glm_image_text")
_QWEN3_OMNI = ("qwen3_omni_moe", "qwen3_omni_moe_thinker", "qwen3_omni_moe_text")
_COSMOS3_EDGE = ("cosmos3_edge", "cosmos3_edge_text")
# HunYuan-VL's text decoder: M-RoPE over 3 or 4 axes on sections of lanes (its rotary class doubles the
# frequencies over the head, then gives axis i the next 2 * section[i] lanes); its checkpoints' "xdrope" rope
# is NTK-alpha. transformers cannot rotate a config without a section (its default).
_HUNYUAN_VL = ("hunyuan_vl", "hunyuan_vl_text")
# MiniMax-M3-VL's text decoder: halves on a prefix of each head. Its config's rotary_dim (default 64) is read by
# no rotary class: transformers rotates int(head_dim * partial_rotary_factor) lanes (its default: the whole
# head). Where the two disagree which one a checkpoint was trained with is unknown: refused.
_MINIMAX_M3_VL = ("minimax_m3_vl", "minimax_m3_vl_text")
# Cohere-Compass's text decoder: Qwen3-VL's interleaved sections on halves over the whole head, with each layer
# type's own parameters (section default (24, 20, 20)). Its rotary class reads parameters only per layer type (a
# flat or absent rope_parameters fails there), ignores partial_rotary_factor, and its config class drops a flat
# rope_theta / rope_type left beside per-layer-type entries (a hub config's stray keys).
_COHERE_COMPASS = ("cohere_compass", "cohere_compass_text")
# Families whose layers take no rotary embedding at all: (why), refused by name.
_NO_ROPE_FAMILIES = {"moshi_depth": "Moshi's depth decoder builds its attention with use_rope=False"}

# model_type: rotary mode of its attention (transformers' apply function for that family): the families
# tools/rope_families.py found rotating as transformers does (families.py), and these, checked by hand in
# tests/test_rope_config.py (their transformers modules apply the rotation to part of a head, or need M-RoPE
# positions, or are not in transformers).
FAMILY_MODES = {
    **{model_type: mode for model_type, (mode, _) in TRANSFORMERS_FAMILIES.items()},
    **dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                     "gemma3_text", "gpt_neox", "phi", "phi3", "starcoder2", "stablelm", "olmo", "olmo2"), "half"),
    **dict.fromkeys(("glm", "glm4", "chatglm"), "interleave"),  # pairs (rotate_every_two)
    "deepseek_v2": "interleave",  # complex pairs on the tail [nope | rope] of each head
    "deepseek_v3": "interleave-half",  # rope_interleave (default): pairs in, halves out; else "half"
    "glm4_moe_lite": "interleave-half",  # GLM-4.7-Flash: DeepSeek-V3's attention (MLA, rope_interleave)
    "deepseek_v4": "interleave",  # pairs on the tail of each head, rope parameters by kind ("main", "compress")
    **dict.fromkeys(_GLM_4_1V, "interleave"),
    **dict.fromkeys(_GLM_4_5V + _GLM_IMAGE, "half"),
    **dict.fromkeys(_QWEN3_OMNI + _HUNYUAN_VL + _MINIMAX_M3_VL + _COHERE_COMPASS, "half"),
}
# Families whose rotated lanes are the tail of each head (partial_rotary_factor of head_dim at its end).
_TAIL_FAMILIES = ("deepseek_v4",)
# Families whose rotate_half flips the other half's sign (NanoChat: (x2, -x1) for (-x2, x1)): they turn each pair
# by -angle, the transpose of the rotation, which is the rotation with sin negated.
TRANSPOSED_FAMILIES = ("nanochat",)
_DEEPSEEK = ("deepseek_v2", "deepseek_v3", "glm4_moe_lite")
# Families whose config's rope_interleave=False turns the pairs-in, halves-out layout into plain halves.
_ROPE_INTERLEAVE_FAMILIES = ("deepseek_v3", "glm4_moe_lite")
# The rope parameters a family's transformers config class gives a config.json that has none of the rope keys.
FAMILY_ROPE_DEFAULTS = {
    **{model_type: parameters for model_type, (_, parameters) in TRANSFORMERS_FAMILIES.items()
       if parameters is not None},
    # the M-RoPE families added by hand: their config classes' defaults (GLM-4.5V's sets the factor 0.5)
    **dict.fromkeys(_GLM_4_1V + _GLM_IMAGE, {"rope_type": "default", "rope_theta": 10000.0}),
    **dict.fromkeys(_GLM_4_5V, {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
    **dict.fromkeys(_QWEN3_OMNI, {"rope_type": "default", "rope_theta": 1000000.0}),
    **dict.fromkeys(_HUNYUAN_VL, {"rope_type": "default", "rope_theta": 10000.0}),
    **dict.fromkeys(_MINIMAX_M3_VL, {"rope_type": "default", "rope_theta": 5000000.0}),
}
_ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta", "rotary_emb_base", "rope_ratio", "rope_local_base_freq")
# Per-layer-type thetas of other families' transformers 4 forms: not read (their config classes map them
# differently), so refused rather than ignored.
_UNREAD_KEYS = ("global_rope_theta", "local_rope_theta", "rope_local_theta")
# Families whose transformers 4 form is flat parameters for the global layers and rope_local_base_freq for
# the sliding ones (the config classes that read it: Gemma-3, Gemma-3n); other families' flat parameters
# serve every layer type, as transformers' standardize_rope_params copies them.
_LOCAL_BASE_FAMILIES = ("gemma3", "gemma3_text", "gemma3n", "gemma3n_text")
# Scaling types whose pretraining length transformers takes from the top level first (Phi-3 keeps it there).
_ORIGINAL_LENGTH_TYPES = ("llama3", "yarn", "longrope")
# Families whose rotary class reads a "dynamic" type with a fixed alpha as NTK-alpha: the base stretched to
# theta * alpha ** (D / (D - 2)) for every length (transformers' ntk_alpha; the type's other keys unused).
_NTK_ALPHA_FAMILIES = ("hunyuan_v1_dense", "hunyuan_v1_moe") + _HUNYUAN_VL
# M-RoPE families: (section transformers 5.25 uses when the config gives none, or None where it has none; the
# axes' layout, a tables.MROPE_LAYOUTS key), each model type whose text decoder's rotary class recomposes its
# frequencies from several position axes.
MROPE_FAMILIES = {
    **dict.fromkeys(("qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text", "paddleocr_vl",
                     "paddleocr_vl_text"), ((16, 24, 24), False)),
    **dict.fromkeys(("qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text"), ((24, 20, 20), True)),
    **dict.fromkeys(("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen4_exp", "qwen4_exp_text"),
                    ((11, 11, 10), True)),
    **dict.fromkeys(_GLM_4_1V + _GLM_4_5V + _GLM_IMAGE + ("glm_ocr", "glm_ocr_text"), ((8, 12, 12), False)),
    **dict.fromkeys(_QWEN3_OMNI + _COSMOS3_EDGE + ("qwen3_omni_moe_talker_text",), ((24, 20, 20), True)),
    # Qwen2.5-Omni's thinker and talker decoders (its DiT's rotary is plain)
    **dict.fromkeys(("qwen2_5_omni", "qwen2_5_omni_text", "qwen2_5_omni_thinker", "qwen2_5_omni_talker"),
                    ((16, 24, 24), False)),
    **dict.fromkeys(("ernie4_5_vl_moe", "ernie4_5_vl_moe_text"), ((22, 22, 20), "hw")),
    **dict.fromkeys(_HUNYUAN_VL, (None, "lanes")),  # no default section: refused without one
    **dict.fromkeys(_COHERE_COMPASS, ((24, 20, 20), True))}
# M-RoPE families whose section follows the rotated width: NeoMME's rotary class alternates row and column over
# all rotary_dim / 2 frequencies of each layer type (two equal counts) and reads no section from its config.
_MROPE_BY_WIDTH = {"neomme": "alternate"}
_MROPE_KEYS = ("mrope_section", "mrope_interleaved", "xdrope_section")  # HunYuan-VL's older name of the section
# A family's own names for the fields read here (its transformers config class's attribute_map, which a
# config.json and to_dict() keep): DBRX's d_model/n_heads/max_seq_len, Moonshine's decoder heads (its rotary
# class reads num_attention_heads, which maps there).
_FIELD_ALIASES = {
    "dbrx": {"hidden_size": "d_model", "num_attention_heads": "n_heads", "max_position_embeddings": "max_seq_len"},
    "moonshine": {"num_attention_heads": "decoder_num_attention_heads"},
    **dict.fromkeys(_HUNYUAN_VL, {"head_dim": "attention_head_dim"}),
}
# Families whose attention heads are 2 * hidden_size / num_attention_heads wide (Zamba2's shared attention reads
# the concatenated [hidden, embedding]; its config class computes attention_head_dim so, whatever is given).
_DOUBLE_WIDTH_HEADS = ("zamba2",)
# Families whose attention rotates only when a config switch is on (Zamba2's shared attention: use_mem_rope,
# default False in its config class).
_ROPE_SWITCHES = {"zamba2": "use_mem_rope"}
# Switches whose effect on the rotation transformers 5.25 states but does not apply (Zamba2's use_long_context:
# "using rescaled rope_theta" is logged, the theta is not rescaled): refused, neither reading guessed.
_UNAPPLIED_SWITCHES = {"zamba2": "use_long_context"}


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
    mrope_section: Optional[Tuple[int, ...]] = None  # M-RoPE: positions are [axes, S] (time, height, width)
    mrope_interleaved: Union[bool, str] = False  # the axes' layout: tables.MROPE_LAYOUTS
    # Llama-4's attention temperature (Ministral-3, Mistral-4): q after the rotation times query_scale(positions)
    llama_4_scaling_beta: Optional[float] = None
    transposed: bool = False            # pairs turn by -angle (TRANSPOSED_FAMILIES): sin negated

    @property
    def rotary_dim(self):
        return self.partial_slice[1] - self.partial_slice[0]

    def query_scale(self, positions):
        """Llama-4's attention temperature, 1 + beta * log(1 + floor(position / original_max_position_embeddings))
        per position (float32 numpy, positions' shape), which transformers multiplies into q after the rotation
        (RotaryEmbedding does it itself); 1 everywhere without llama_4_scaling_beta."""
        positions = np.asarray(positions.asnumpy() if isinstance(positions, ms.Tensor) else positions)
        if self.llama_4_scaling_beta is None:
            return np.ones(positions.shape, np.float32)
        original = np.float32(self.rope_scaling["original_max_position_embeddings"])
        steps = np.floor(positions.astype(np.float32) / original)
        return (1 + np.float32(self.llama_4_scaling_beta) * np.log1p(steps)).astype(np.float32)

    def cos_sin(self, positions, dtype=ms.float32, seq_len=None):
        """cos, sin for `positions` (rope_cos_sin's forms), in this config's lane layout and scaling (a transposed
        family's sin negated)."""
        cos, sin = rope_cos_sin(positions, self.rotary_dim, self.rotary_mode, rope_theta=self.rope_theta,
                                rope_scaling=self.rope_scaling, max_position_embeddings=self.max_position_embeddings,
                                seq_len=seq_len, dtype=dtype, mrope_section=self.mrope_section,
                                mrope_interleaved=self.mrope_interleaved)
        return (cos, -sin) if self.transposed else (cos, sin)

    @classmethod
    def from_config(cls, config, rotary_mode=None, layer_type=None):
        """From a Hugging Face config (a dict, e.g. config.json, or a config object). `rotary_mode` overrides
        the family's layout and is required for a model_type not in FAMILY_MODES. `layer_type` (e.g.
        "sliding_attention", "full_attention": a value of config.layer_types) picks the parameters of that
        layer type where they differ by layer type (Gemma-3's local and global theta), as transformers does."""
        fields = config_fields(config)
        model_type = fields.get("model_type")
        if model_type in _NO_ROPE_FAMILIES:
            raise ValueError(f"{_PREFIX}: model_type={model_type!r} rotates nothing: {_NO_ROPE_FAMILIES[model_type]}")
        switch = _ROPE_SWITCHES.get(model_type)
        if switch is not None and not fields.get(switch):
            raise ValueError(f"{_PREFIX}: model_type={model_type!r} with {switch}={fields.get(switch)!r} rotates "
                             f"nothing (its attention applies rotary embeddings only when {switch} is true)")
        unapplied = _UNAPPLIED_SWITCHES.get(model_type)
        if unapplied is not None and fields.get(unapplied):
            raise ValueError(f"{_PREFIX}: model_type={model_type!r} with {unapplied}=True: transformers 5.25 logs a "
                             f"rescaled rope_theta but rotates with the configured one; give the theta the checkpoint "
                             f"was trained with in rope_parameters and {unapplied}=False")
        parameters = _rope_parameters(fields, model_type, layer_type)
        section, interleaved = _mrope(fields, model_type, parameters)
        mode = _mode(fields, model_type, rotary_mode)
        head_dim, partial_slice = _geometry(fields, model_type, parameters, layer_type)
        if model_type in _MROPE_BY_WIDTH:
            section, interleaved = _mrope_by_width(fields, parameters, model_type, section, partial_slice, layer_type)
        whole_head = rope_type_of(parameters) in WHOLE_HEAD_TYPES  # its partial factor is the rope type's
        scaling = {key: value for key, value in parameters.items()
                   if key not in _MROPE_KEYS + (() if whole_head else ("partial_rotary_factor",))}
        if scaling.get("type") == "mrope" or scaling.get("rope_type") == "mrope":  # transformers 4's marker
            scaling.pop("type", None)
            scaling["rope_type"] = "default"
        theta = scaling.pop("rope_theta", None)
        theta = _theta(fields, model_type) if theta is None else theta
        _check_attn_config_theta(fields, model_type, theta)
        # Mistral's rope_parameters repeat max_position_embeddings, which transformers reads from the top level
        scaling.pop("max_position_embeddings", None)
        beta = scaling.pop("llama_4_scaling_beta", None)
        max_positions = _first(fields, "max_position_embeddings", "n_positions", "seq_length")
        if max_positions is not None:
            max_positions = int(check_value(_given_name(fields, "max_position_embeddings"), max_positions, COUNT))
        if rope_type_of(scaling) in _ORIGINAL_LENGTH_TYPES:  # as transformers' standardize_rope_params
            original = _first(fields, "original_max_position_embeddings")
            if original is not None:
                scaling["original_max_position_embeddings"] = original
            elif max_positions is not None:
                scaling.setdefault("original_max_position_embeddings", max_positions)
        if beta is not None:
            beta = check_value("llama_4_scaling_beta", beta, NON_NEGATIVE)
            if (scaling or {}).get("original_max_position_embeddings") is None:
                raise ValueError(f"{_PREFIX}: llama_4_scaling_beta={beta} scales q by position over "
                                 f"original_max_position_embeddings, which this config's rope_type "
                                 f"{rope_type_of(scaling)!r} does not give")
        theta = check_value("rope_theta", theta, POSITIVE)
        if model_type in _HUNYUAN_VL and rope_type_of(scaling) == "xdrope":  # as its config class renames it
            scaling = {**{k: v for k, v in scaling.items() if k != "type"}, "rope_type": "dynamic"}
        if model_type in _NTK_ALPHA_FAMILIES and rope_type_of(scaling) == "dynamic" and scaling.get("alpha"):
            theta, scaling = _ntk_alpha_theta(theta, scaling["alpha"], head_dim), {"rope_type": "default"}
        if rope_type_of(scaling) == "default" and len(scaling) <= 1:
            scaling = None
        return cls(model_type, head_dim, partial_slice, mode, theta, scaling, max_positions, section, interleaved,
                   beta, model_type in TRANSPOSED_FAMILIES)


def _ntk_alpha_theta(theta, alpha, head_dim):
    """The base HunYuan's rotary class turns with for a fixed NTK alpha: theta * alpha ** (D / (D - 2))."""
    alpha = check_value("rope_parameters['alpha']", alpha, POSITIVE)
    if head_dim <= 2:
        raise ValueError(f"{_PREFIX}: rope_parameters['alpha']={alpha} stretches the base by alpha ** (D / (D - 2)), "
                         f"which head_dim={head_dim} leaves undefined")
    return float(theta * alpha ** (head_dim / (head_dim - 2)))


def config_fields(config):
    """A Hugging Face config (dict or object) as a dict of its fields; a multimodal wrapper's text config merged
    under the wrapper's model_type."""
    if isinstance(config, dict):
        fields = dict(config)
    elif hasattr(config, "to_dict"):
        fields = config.to_dict()
    else:  # any object: its public data attributes, the class's (model_type) included
        fields = {name: getattr(config, name) for name in dir(config)
                  if not name.startswith("_") and not callable(getattr(config, name))}
    for wrapped in ("thinker_config", "text_config"):  # Qwen3-Omni's thinker, then a multimodal text config
        if "hidden_size" not in fields and isinstance(fields.get(wrapped), dict):
            fields = {**fields[wrapped], "model_type": fields.get("model_type")}
    for field, alias in _FIELD_ALIASES.get(fields.get("model_type"), {}).items():
        if fields.get(field) is None and fields.get(alias) is not None:
            fields[field] = fields[alias]
    return fields


def _first(fields, *keys):
    return next((fields[key] for key in keys if fields.get(key) is not None), None)


def _rope_parameters(fields, model_type, layer_type):
    """transformers 5's rope_parameters, else transformers 4's rope_scaling, else (no rope key at all) the
    family's defaults; of `layer_type` where they are given per layer type."""
    unread = [key for key in _UNREAD_KEYS if fields.get(key) is not None]
    if unread:
        raise ValueError(f"{_PREFIX}: {unread[0]}={fields[unread[0]]!r} is not read here (its family's "
                         f"transformers config class decides what it means); pass the config object transformers "
                         f"builds from it, whose rope_parameters hold each layer type's parameters")
    value = None
    for key in ("rope_parameters", "rope_scaling"):
        if fields.get(key) is not None:
            if not isinstance(fields[key], dict):
                raise TypeError(f"{_PREFIX}: {key} must be a dict, got {type(fields[key]).__name__}")
            value = copy.deepcopy(fields[key])
            break
    if value is None:
        given = any(fields.get(key) is not None for key in _ROPE_KEYS)
        value = {} if given else copy.deepcopy(FAMILY_ROPE_DEFAULTS.get(model_type, {}))
    if model_type in _COHERE_COMPASS:
        if any(isinstance(v, dict) for v in value.values()):  # as its config class: stray flat keys dropped
            value = {key: v for key, v in value.items() if key not in ("rope_theta", "rope_type")}
        if not _nested(value):
            raise ValueError(f"{_PREFIX}: model_type={model_type!r} reads rope parameters only per layer type "
                             f"(rope_parameters={{'full_attention': {{...}}, ...}}); this config gives "
                             f"{value or 'none'}, which transformers 5.25 cannot rotate either")
    nested_defaults = {key: v for key, v in FAMILY_ROPE_DEFAULTS.get(model_type, {}).items() if isinstance(v, dict)}
    if not _nested(value) and (fields.get("rope_local_base_freq") is not None or model_type in _LOCAL_BASE_FAMILIES):
        # transformers 4's form of per-layer-type rope (Gemma-3): the flat parameters are the global layers',
        # the sliding layers' rotate with rope_local_base_freq (else the family's local theta), no scaling
        local = {"rope_type": "default"}
        theta = _first(fields, "rope_local_base_freq")
        theta = _first(nested_defaults.get("sliding_attention", {}), "rope_theta") if theta is None else theta
        if theta is not None:
            local["rope_theta"] = theta
        full_theta = _first(nested_defaults.get("full_attention", {}), "rope_theta")
        if full_theta is not None and fields.get("rope_theta") is None:  # the family's global theta, unless given
            value = {"rope_theta": full_theta, **value}
        value = {"full_attention": value, "sliding_attention": local}
    if not _nested(value):
        return value
    if layer_type is None:
        kinds = {repr(None if v is None else sorted(v.items())) for v in value.values()}
        if len(kinds) > 1:
            raise ValueError(f"{_PREFIX}: this config's rope parameters differ by layer type ({sorted(value)}): "
                             f"pass layer_type= (the layer's entry in config.layer_types), one layer per type")
        layer_type = next(iter(value))
    if layer_type not in value:
        raise ValueError(f"{_PREFIX}: layer_type={layer_type!r} has no rope parameters here; the config gives "
                         f"{sorted(value)}")
    if value[layer_type] is None:  # Beam's, Ergo's full-attention layers: no position embedding (NoPE)
        raise ValueError(f"{_PREFIX}: layer_type={layer_type!r} rotates nothing: its rope parameters are None "
                         f"(its layers use no position embedding); build a rotary layer only for "
                         f"{sorted(k for k, v in value.items() if v is not None)}")
    return dict(value[layer_type])


def _family_default(model_type, key):
    """`key` of the family's flat default rope parameters (None where it has none, or they are per layer type)."""
    return _first(FAMILY_ROPE_DEFAULTS.get(model_type, {}), key)


def _nested(parameters):
    """rope_parameters keyed by layer type (each value a dict of one type's parameters, or None for a layer type
    without rope)?"""
    return any(isinstance(v, dict) for v in parameters.values()) and \
        all(v is None or isinstance(v, dict) for v in parameters.values())


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def _mrope(fields, model_type, parameters):
    """(mrope_section or None, interleaved) from the config, else the family's transformers default."""
    section = _first(parameters, "mrope_section") or _first(fields, "mrope_section")
    older = _first(parameters, "xdrope_section") or _first(fields, "xdrope_section")
    if older is not None and section is not None and _as_list(older) != _as_list(section):
        raise ValueError(f"{_PREFIX}: xdrope_section={older!r} and mrope_section={section!r} (its newer name) "
                         f"differ: give one")
    section = section if section is not None else older
    default_section, default_interleaved = MROPE_FAMILIES.get(model_type, (None, False))
    section = section if section is not None else default_section
    if section is None and model_type in MROPE_FAMILIES:
        raise ValueError(f"{_PREFIX}: model_type={model_type!r} without mrope_section: its rotary class needs the "
                         f"sections of its position axes (transformers 5.25 cannot rotate such a config either)")
    if section is None:
        return None, False
    interleaved = _first(parameters, "mrope_interleaved")
    interleaved = _first(fields, "mrope_interleaved") if interleaved is None else interleaved
    if not isinstance(section, (list, tuple)) or \
            any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in section):
        raise ValueError(f"{_PREFIX}: mrope_section={section!r} must be non-negative integers, one an axis")
    if interleaved is None:
        return tuple(int(n) for n in section), default_interleaved
    interleaved = mrope_layout(interleaved)
    if model_type in MROPE_FAMILIES and interleaved != default_interleaved:
        # transformers' rotary class lays the family's axes out its own way whatever the flag says; vLLM
        # follows the flag: neither is guessed
        raise ValueError(f"{_PREFIX}: model_type={model_type!r} with mrope_interleaved={interleaved!r}: the "
                         f"family's rotary class lays out {MROPE_LAYOUTS[default_interleaved]} and ignores the "
                         f"flag (transformers 5.25); give mrope_interleaved={default_interleaved!r} or leave it out")
    return tuple(int(n) for n in section), interleaved


def _mrope_by_width(fields, parameters, model_type, given, partial_slice, layer_type):
    """(section, layout) of a family whose rotary class derives its section from the rotated width
    (_MROPE_BY_WIDTH); a configured section or flag it would ignore is taken only where it says the same."""
    layout, frequencies = _MROPE_BY_WIDTH[model_type], (partial_slice[1] - partial_slice[0]) // 2
    where = f"model_type={model_type!r}" + (f", layer_type={layer_type!r}" if layer_type is not None else "")
    if frequencies % 2:
        raise ValueError(f"{_PREFIX}: {where} rotates {2 * frequencies} lanes: its rotary class alternates two "
                         f"position axes over the frequencies, which needs an even count (rotary_dim / 2 = "
                         f"{frequencies}; transformers cannot rotate it either)")
    section = (frequencies // 2, frequencies // 2)
    if given is not None and tuple(given) != section:
        raise ValueError(f"{_PREFIX}: {where}: mrope_section={list(given)} is not what its rotary class uses, "
                         f"{list(section)} (it alternates row and column over all {frequencies} frequencies and "
                         f"reads no section); leave mrope_section out")
    flag = _first(parameters, "mrope_interleaved")
    flag = _first(fields, "mrope_interleaved") if flag is None else flag
    if flag is not None and mrope_layout(flag) != layout:
        raise ValueError(f"{_PREFIX}: {where} with mrope_interleaved={flag!r}: the family's rotary class "
                         f"lays out {MROPE_LAYOUTS[layout]}; give mrope_interleaved={layout!r} or leave it out")
    return section, layout


def _mode(fields, model_type, rotary_mode):
    if rotary_mode is not None:
        return normalize_mode(rotary_mode)
    if model_type in _ROPE_INTERLEAVE_FAMILIES and fields.get("rope_interleave") is False:
        return normalize_mode("half")
    if model_type not in FAMILY_MODES:
        text = f"{model_type}_text"
        if text in FAMILY_MODES:
            raise ValueError(f"{_PREFIX}: model_type={model_type!r} has no known rotary layout, but its text "
                             f"decoder's {text!r} has: pass the text config (config['text_config'] with "
                             f"model_type={text!r}), or rotary_mode=")
        hint = _inner_configs_hint(fields)
        if hint:
            raise ValueError(f"{_PREFIX}: model_type={model_type!r} has no rotary layout of its own{hint}")
        raise ValueError(f"{_PREFIX}: model_type={model_type!r} has no known rotary layout; pass rotary_mode= "
                         f"(one of 'half', 'interleave', 'quarter', 'interleave-half'); the {len(FAMILY_MODES)} "
                         f"families known are ms_rotary.rope_config.FAMILY_MODES (docs/families.md)")
    return normalize_mode(FAMILY_MODES[model_type])


def _inner_configs_hint(fields):
    """Where a config wraps several whose families the table knows (BLT's encoder, decoder and global
    transformer), the words that name them; else ""."""
    inner = [f"{key} ({value['model_type']})" for key, value in fields.items()
             if isinstance(value, dict) and value.get("model_type") in FAMILY_MODES]
    return f"; it holds configs that do: {', '.join(inner)}: pass the one whose layer this is" if inner else ""


def _given_name(fields, key):
    """The name the config gave `key` under: the family's own (DBRX's n_heads) where config_fields read it there."""
    alias = _FIELD_ALIASES.get(fields.get("model_type"), {}).get(key)
    return alias if alias is not None and fields.get(alias) is fields.get(key) else key


def _int(fields, key):
    value = fields[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{_PREFIX}: {_given_name(fields, key)}={value!r} must be a positive integer")
    return int(value)


def _geometry(fields, model_type, parameters, layer_type):
    """(head_dim, partial_slice) of the q/k heads the op rotates."""
    if model_type in _DEEPSEEK:  # each head is [nope | rope]; the rope part rotates
        nope, rope = _int(fields, "qk_nope_head_dim"), _int(fields, "qk_rope_head_dim")
        return nope + rope, (nope, nope + rope)
    layer_head_dim = _layer_head_dim(fields, layer_type)
    if model_type in _DOUBLE_WIDTH_HEADS:
        head_dim = 2 * _int(fields, "hidden_size") // _int(fields, "num_attention_heads")
        if fields.get("attention_head_dim") not in (None, head_dim):
            raise ValueError(f"{_PREFIX}: attention_head_dim={fields['attention_head_dim']!r} is not 2 * hidden_size "
                             f"/ num_attention_heads = {head_dim}, the width transformers' {model_type} heads have")
    elif layer_head_dim is not None:
        head_dim = layer_head_dim
    elif fields.get("head_dim") is not None:
        head_dim = _int(fields, "head_dim")
    elif fields.get("kv_channels") is not None:  # ChatGLM
        head_dim = _int(fields, "kv_channels")
    else:
        hidden_key = next((key for key in ("hidden_size", "n_embd") if fields.get(key) is not None), None)
        heads_key = next((key for key in ("num_attention_heads", "n_head") if fields.get(key) is not None), None)
        if hidden_key is None or heads_key is None:
            raise ValueError(f"{_PREFIX}: the config gives neither head_dim nor hidden_size and num_attention_heads"
                             f"{_inner_configs_hint(fields)}")
        head_dim = _int(fields, hidden_key) // _int(fields, heads_key)
        if head_dim < 1:
            raise ValueError(f"{_PREFIX}: {hidden_key}={fields[hidden_key]} over {heads_key}={fields[heads_key]} "
                             f"heads leaves no head width")
    if model_type == "chatglm":  # ChatGLM2/3 rotate the first half of each head
        return head_dim, (0, head_dim // 2)
    if rope_type_of(parameters) in WHOLE_HEAD_TYPES:
        rotary_dim = head_dim
    elif fields.get("rotary_dim") is not None and model_type not in _MINIMAX_M3_VL:  # GPT-J, CodeGen
        rotary_dim = _int(fields, "rotary_dim")
    else:
        factor = _first(parameters, "partial_rotary_factor") or _first(fields, "partial_rotary_factor", "rotary_pct")
        factor = _family_default(model_type, "partial_rotary_factor") if factor is None else factor
        factor = 1.0 if factor is None else check_value("partial_rotary_factor", factor, FRACTION)
        if model_type in _COHERE_COMPASS and factor != 1:
            raise ValueError(f"{_PREFIX}: model_type={model_type!r} with partial_rotary_factor={factor}: its rotary "
                             f"class's default rope rotates the whole head, reading no partial_rotary_factor "
                             f"(transformers 5.25); a partial width is not supported for this family")
        rotary_dim = int(head_dim * factor)
        if model_type in _MINIMAX_M3_VL and fields.get("rotary_dim") not in (None, rotary_dim):
            raise ValueError(f"{_PREFIX}: model_type={model_type!r} with rotary_dim={fields['rotary_dim']!r}: its "
                             f"rotary class reads no rotary_dim and rotates int(head_dim * partial_rotary_factor) = "
                             f"{rotary_dim} lanes (transformers 5.25); give partial_rotary_factor = rotary_dim / "
                             f"head_dim in rope_parameters where the checkpoint rotates rotary_dim lanes")
    if rotary_dim > head_dim or rotary_dim % 2:
        raise ValueError(f"{_PREFIX}: the rotary width {rotary_dim} must be even and at most head_dim={head_dim}")
    return head_dim, (head_dim - rotary_dim, head_dim) if model_type in _TAIL_FAMILIES else (0, rotary_dim)


def _layer_head_dim(fields, layer_type):
    """The head width of `layer_type`'s layers where it is their own (Gemma-4's global layers: global_head_dim
    in config.json, per_layer_config in the config object transformers builds), else None."""
    if layer_type is None:
        return None
    if layer_type == "full_attention" and fields.get("global_head_dim") is not None:
        return _int(fields, "global_head_dim")
    overrides, types = fields.get("per_layer_config") or {}, fields.get("layer_types") or []
    widths = set()
    for index, kind in enumerate(types):
        entry = next((overrides[key] for key in (index, str(index), f"{index:02d}") if key in overrides), {})
        if kind == layer_type:
            widths.add(entry.get("head_dim"))
    if len(widths) > 1:
        raise ValueError(f"{_PREFIX}: the {layer_type!r} layers of this config differ in head_dim "
                         f"({sorted(widths, key=str)}); pass each layer's config")
    if not widths or None in widths:
        return None
    return _int({"per_layer_config head_dim": widths.pop()}, "per_layer_config head_dim")


def _check_attn_config_theta(fields, model_type, theta):
    """DBRX's config.json gives its theta as attn_config.rope_theta, which transformers 5.25 does not read (its
    rotary class takes rope_parameters' theta, default 10000): refused where the two differ, so neither is
    picked silently."""
    attn = fields.get("attn_config") if model_type == "dbrx" else None
    attn_theta = attn.get("rope_theta") if isinstance(attn, dict) else getattr(attn, "rope_theta", None)
    if attn_theta is not None and attn_theta != theta:
        raise ValueError(f"{_PREFIX}: model_type='dbrx': attn_config.rope_theta={attn_theta!r} differs from the "
                         f"rope_theta={theta!r} transformers rotates with (it reads rope_parameters or a top-level "
                         f"rope_theta, default 10000, and ignores attn_config's); give the theta the checkpoint "
                         f"was trained with as rope_theta (or in rope_parameters)")


def _theta(fields, model_type):
    """The top-level theta, else the family's default (its transformers config class's), else 10000."""
    if fields.get("rope_ratio") is not None:  # ChatGLM: base 10000 scaled by rope_ratio
        return 10000.0 * check_value("rope_ratio", fields["rope_ratio"], POSITIVE)
    theta = _first(fields, "rope_theta", "rotary_emb_base")
    theta = _family_default(model_type, "rope_theta") if theta is None else theta
    return 10000.0 if theta is None else theta
