"""RopeConfig.from_config: a model's head width, rotated lanes, layout and table parameters from its Hugging
Face config, in both config forms. The families are checked against transformers' own rotary classes and
apply functions when transformers is installed (`pip install ".[hf]"`)."""
import importlib

import mindspore as ms
import numpy as np
import pytest

import ms_rotary
from ms_rotary import RopeConfig
from tools.rope_families import MATCH, torch_in_float64


def assert_matches(got, expected, err_msg=""):
    """Within MATCH of transformers' own code run in float64 (torch_in_float64), relative to its largest value."""
    np.testing.assert_allclose(got, expected, rtol=0, atol=MATCH * np.abs(expected).max(), err_msg=err_msg)

POSITIONS = np.array([0, 1, 5, 17, 300, 4095, 9000])
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
DEEPSEEK_YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
                 "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}

# family: (model_type, config kwargs, transformers module, its apply function, q heads); transformers' apply
# function takes the whole head, except for the families in ROTATED_PART_ONLY (their attention splits first).
ROTATED_PART_ONLY = ("phi", "deepseek_v3", "glm4_moe_lite")
FAMILIES = {
    "Llama-3 (llama3 scaling, GQA)": ("llama", dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                                                    max_position_embeddings=131072,
                                                    rope_parameters={**LLAMA3, "rope_theta": 500000.0}),
                                      "llama", "apply_rotary_pos_emb", 4),
    "Qwen3 (MQA, head_dim given)": ("qwen3", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1,
                                                  head_dim=32, rope_parameters={"rope_type": "default",
                                                                                "rope_theta": 1e6}),
                                    "qwen3", "apply_rotary_pos_emb", 4),
    "GPT-NeoX (partial 0.25)": ("gpt_neox", dict(hidden_size=128, num_attention_heads=2,
                                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                  "partial_rotary_factor": 0.25}),
                                "gpt_neox", "apply_rotary_pos_emb", 2),
    "Phi (partial 0.5)": ("phi", dict(hidden_size=128, num_attention_heads=2, partial_rotary_factor=0.5,
                                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                       "partial_rotary_factor": 0.5}),
                          "phi", "apply_rotary_pos_emb", 2),
    "GLM-4 (interleave, partial 0.5)": ("glm4", dict(hidden_size=128, num_attention_heads=2, head_dim=64,
                                                     partial_rotary_factor=0.5,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                      "partial_rotary_factor": 0.5}),
                                        "glm4", "apply_rotary_pos_emb", 2),
    "DeepSeek-V3 (yarn, interleave-half on the tail)": (
        "deepseek_v3", dict(hidden_size=128, num_attention_heads=2, qk_nope_head_dim=32, qk_rope_head_dim=16,
                            v_head_dim=32, max_position_embeddings=163840,
                            rope_parameters={**DEEPSEEK_YARN, "rope_theta": 10000.0}),
        "deepseek_v3", "apply_rotary_pos_emb_interleave", 2),
    "GLM-4.7-Flash (DeepSeek-V3's attention: interleave-half on the tail)": (
        "glm4_moe_lite", dict(hidden_size=128, num_attention_heads=2, qk_nope_head_dim=32, qk_rope_head_dim=16,
                              v_head_dim=32, max_position_embeddings=8192,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "glm4_moe_lite", "apply_rotary_pos_emb_interleave", 2),
    "GLM-4.7-Flash, rope_interleave=False (halves)": (
        "glm4_moe_lite", dict(hidden_size=128, num_attention_heads=2, qk_nope_head_dim=32, qk_rope_head_dim=16,
                              v_head_dim=32, max_position_embeddings=8192, rope_interleave=False,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        "glm4_moe_lite", "apply_rotary_pos_emb", 2),
    # HunYuan's checkpoints label a fixed NTK alpha "dynamic" (with YaRN-style keys its rotary class ignores)
    "HunYuan-A13B (dynamic with a fixed alpha: the base stretched)": (
        "hunyuan_v1_moe", dict(hidden_size=256, num_attention_heads=2, head_dim=128, max_position_embeddings=32768,
                               rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 1000.0,
                                                "factor": 1.0, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                                                "mscale_all_dim": 1.0}),
        "hunyuan_v1_moe", "apply_rotary_pos_emb", 2),
    "HunYuan-7B dense (dynamic with a fixed alpha)": (
        "hunyuan_v1_dense", dict(hidden_size=256, num_attention_heads=4, head_dim=64, max_position_embeddings=32768,
                                 rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "alpha": 50.0,
                                                  "factor": 1.0}),
        "hunyuan_v1_dense", "apply_rotary_pos_emb", 2),
    "NanoChat (transposed: rotate_half flips the other half)": (
        "nanochat", dict(hidden_size=128, num_attention_heads=2, max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        "nanochat", "apply_rotary_pos_emb", 2),
}


def transformers_family(family):
    """(model_type, transformers config, modeling module, rotary class, apply function name, q heads) of a
    FAMILIES entry; skips without transformers."""
    transformers = pytest.importorskip("transformers")
    model_type, kwargs, module_name, apply_name, heads = FAMILIES[family]
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    rotary_class = next(getattr(module, name) for name in dir(module) if name.endswith("RotaryEmbedding"))
    return model_type, transformers.CONFIG_MAPPING[model_type](**kwargs), module, rotary_class, apply_name, heads


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_rotates_as_transformers_does(family):
    """Config -> RopeConfig -> rope_cos_sin -> PartialRotaryMul on q equals transformers' rotary embedding and
    apply function on the same q (Phi, DeepSeek: on the rotated part of each head, the rest untouched)."""
    torch = pytest.importorskip("torch")
    model_type, config, module, rotary_class, apply_name, heads = transformers_family(family)
    rope = RopeConfig.from_config(config)
    assert rope == RopeConfig.from_config(config.to_dict())  # an object and its config.json agree
    start, end = rope.partial_slice
    q = np.random.default_rng(3).uniform(-1, 1, (1, len(POSITIONS), heads, rope.head_dim)).astype(np.float32)
    part_only = model_type in ROTATED_PART_ONLY
    with torch_in_float64():
        cos_hf, sin_hf = rotary_class(config)(torch.zeros(1), torch.tensor(POSITIONS[None]))
        q_hf = torch.tensor(q[..., start:end] if part_only else q).transpose(1, 2)
        expected, _ = getattr(module, apply_name)(q_hf, q_hf, cos_hf, sin_hf)
    expected = expected.transpose(1, 2).numpy()
    cos, sin = rope.cos_sin(POSITIONS, seq_len=None)
    got = ms_rotary.PartialRotaryMul(rope.rotary_mode, list(rope.partial_slice))(ms.Tensor(q), cos, sin).asnumpy()
    if part_only:
        np.testing.assert_array_equal(np.delete(got, np.s_[start:end], -1), np.delete(q, np.s_[start:end], -1))
        got = got[..., start:end]
    assert_matches(got, expected)


def test_both_config_forms_give_the_same_facts():
    """transformers 4's keys (rope_scaling, top-level rope_theta, GPT-NeoX's rotary_pct/rotary_emb_base) and
    transformers 5's rope_parameters."""
    old = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 2, "rope_theta": 500000.0,
           "rope_scaling": dict(LLAMA3), "max_position_embeddings": 131072}
    new = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 2, "max_position_embeddings": 131072,
           "rope_parameters": {**LLAMA3, "rope_theta": 500000.0}}
    assert RopeConfig.from_config(old) == RopeConfig.from_config(new)
    neox_old = {"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 8, "rotary_pct": 0.25,
                "rotary_emb_base": 10000, "max_position_embeddings": 2048}
    neox = RopeConfig.from_config(neox_old)
    assert (neox.head_dim, neox.partial_slice, neox.rotary_mode, neox.rope_theta) == (64, (0, 16), 0, 10000.0)
    assert neox.rope_scaling is None


def test_the_layout_and_slice_of_each_known_family():
    glm = RopeConfig.from_config({"model_type": "chatglm", "hidden_size": 4096, "num_attention_heads": 32,
                                  "kv_channels": 128, "rope_ratio": 500, "seq_length": 32768})
    assert (glm.partial_slice, glm.rotary_mode, glm.rope_theta) == ((0, 64), 1, 5e6)
    gptj = RopeConfig.from_config({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64})
    assert (gptj.head_dim, gptj.partial_slice, gptj.rotary_mode) == (256, (0, 64), 1)
    deepseek = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64, "rope_theta": 10000}
    assert RopeConfig.from_config(deepseek).partial_slice == (128, 192)
    assert RopeConfig.from_config(deepseek).rotary_mode == 3
    assert RopeConfig.from_config({**deepseek, "rope_interleave": False}).rotary_mode == 0
    assert RopeConfig.from_config({**deepseek, "model_type": "deepseek_v2"}).rotary_mode == 1


@pytest.mark.parametrize("config, kwargs, error, match", [
    ({"model_type": "my_llm", "hidden_size": 64, "num_attention_heads": 2}, {}, ValueError,
     r"model_type='my_llm' has no known rotary layout; pass rotary_mode="),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2, "partial_rotary_factor": 1.5}, {},
     ValueError, r"partial_rotary_factor=1.5 must be a number in \(0, 1\]"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2, "rope_theta": "1e4"}, {}, ValueError,
     r"rope_theta='1e4' must be a finite number > 0"),
    ({"model_type": "llama"}, {}, ValueError, "neither head_dim nor hidden_size"),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2, "rope_scaling": "linear"}, {}, TypeError,
     "rope_scaling must be a dict"),
    # DBRX's config.json theta, which transformers ignores, differing from the one it reads: neither is picked
    ({"model_type": "dbrx", "d_model": 256, "n_heads": 2, "attn_config": {"rope_theta": 500000}}, {}, ValueError,
     r"attn_config.rope_theta=500000 differs from the rope_theta=10000.0 transformers rotates with"),
    ({"model_type": "dbrx", "d_model": 256, "n_heads": 2, "rope_theta": 1e6, "attn_config": {"rope_theta": 500000}},
     {}, ValueError, r"attn_config.rope_theta=500000 differs from the rope_theta=1000000.0"),
    # a config that wraps several the table knows (BLT): each named, with or without an explicit layout
    *(({"model_type": "blt", "encoder_config": {"model_type": "blt_local_encoder", "hidden_size": 1024,
                                                "num_attention_heads": 16},
        "global_config": {"model_type": "blt_global_transformer", "hidden_size": 2048, "num_attention_heads": 16}},
       kwargs, ValueError, r"it holds configs that do: encoder_config \(blt_local_encoder\), global_config "
                           r"\(blt_global_transformer\): pass the one whose layer this is")
      for kwargs in ({}, {"rotary_mode": "interleave"})),
    # an M-RoPE flag against the family's own layout (its rotary class ignores the flag; vLLM follows it)
    ({"model_type": "ernie4_5_vl_moe_text", "hidden_size": 256, "num_attention_heads": 2,
      "rope_parameters": {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [22, 22, 20],
                          "mrope_interleaved": True}}, {}, ValueError,
     r"model_type='ernie4_5_vl_moe_text' with mrope_interleaved=True: the family's rotary class lays out height "
     r"and width on alternate frequencies, then time \(ERNIE-4.5-VL\) and ignores the flag"),
    ({"model_type": "qwen2_vl", "hidden_size": 256, "num_attention_heads": 2,
      "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24], "mrope_interleaved": True}}, {}, ValueError,
     r"model_type='qwen2_vl' with mrope_interleaved=True: the family's rotary class lays out consecutive sections"),
    ({"model_type": "qwen2_vl", "hidden_size": 256, "num_attention_heads": 2,
      "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24], "mrope_interleaved": "false"}}, {},
     ValueError, r"mrope_interleaved='false' must be one of False: .*; True: .*; 'hw': "),
    # a family's own field names in its errors
    ({"model_type": "dbrx", "d_model": 256, "n_heads": 0}, {}, ValueError, r"n_heads=0 must be a positive integer"),
    ({"model_type": "dbrx", "d_model": 256, "n_heads": 2, "max_seq_len": -3}, {}, ValueError,
     r"max_seq_len=-3 must be an integer >= 1"),
    ({"model_type": "zamba2", "hidden_size": 256, "num_attention_heads": 4, "use_mem_rope": True,
      "use_long_context": True}, {}, ValueError,
     r"use_long_context=True: transformers 5.25 logs a rescaled rope_theta"),
    ({"model_type": "zamba2", "hidden_size": 256, "num_attention_heads": 4}, {}, ValueError,
     r"model_type='zamba2' with use_mem_rope=None rotates nothing"),
    ({"model_type": "zamba2", "hidden_size": 256, "num_attention_heads": 4, "use_mem_rope": True,
      "attention_head_dim": 64}, {}, ValueError,
     r"attention_head_dim=64 is not 2 \* hidden_size / num_attention_heads = 128"),
    ({"model_type": "beam", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64,
      "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4}, "full_attention": None}},
     {"layer_type": "full_attention"}, ValueError,
     r"layer_type='full_attention' rotates nothing: .*build a rotary layer only for \['sliding_attention'\]"),
    ({"model_type": "beam", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64,
      "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4}, "full_attention": None}},
     {}, ValueError, r"differ by layer type \(\[.full_attention., .sliding_attention.\]\): pass layer_type="),
])
def test_configs_that_cannot_be_read_are_refused_by_name(config, kwargs, error, match):
    with pytest.raises(error, match=match):
        RopeConfig.from_config(config, **kwargs)


def test_an_unknown_family_with_an_explicit_mode():
    rope = RopeConfig.from_config({"model_type": "my_llm", "hidden_size": 64, "num_attention_heads": 2},
                                  rotary_mode="interleave")
    assert (rope.head_dim, rope.partial_slice, rope.rotary_mode) == (32, (0, 32), 1)


# text config class, module, rotary class, section, layout (mrope_interleaved), more rope parameters,
# model_type (default: the module's); head_dim 32: 16 frequencies
MROPE = {
    "Qwen2-VL (sections)": ("Qwen2VLTextConfig", "qwen2_vl", "Qwen2VLRotaryEmbedding", [4, 6, 6], False, {}, None),
    "Qwen3-VL (interleaved sections)": ("Qwen3VLTextConfig", "qwen3_vl", "Qwen3VLTextRotaryEmbedding", [6, 5, 5],
                                        True, {}, None),
    # GLM-4.1V's checkpoints rotate half of each head, in pairs; GLM-4.5V's config class sets that half itself
    "GLM-4.1V (sections on pairs, half the head)": ("Glm4vTextConfig", "glm4v", "Glm4vTextRotaryEmbedding",
                                                    [2, 3, 3], False, {"partial_rotary_factor": 0.5}, None),
    "GLM-4.5V (sections on halves, its default half)": ("Glm4vMoeTextConfig", "glm4v_moe",
                                                        "Glm4vMoeTextRotaryEmbedding", [2, 3, 3], False, {}, None),
    "Qwen3-Omni's thinker (interleaved sections)": ("Qwen3OmniMoeTextConfig", "qwen3_omni_moe",
                                                    "Qwen3OmniMoeThinkerTextRotaryEmbedding", [6, 5, 5], True, {},
                                                    "qwen3_omni_moe_thinker"),
    # GLM-Image's text decoder: GLM-4.5V's halves, but its config class rotates the whole head by default (which
    # its default section does not fit: refused, as transformers' own split fails)
    "GLM-Image (sections on halves, half the head)": ("GlmImageTextConfig", "glm_image", "GlmImageTextRotaryEmbedding",
                                                      [2, 3, 3], False, {"partial_rotary_factor": 0.5}, None),
    "Cosmos3-Edge (interleaved sections)": ("Cosmos3EdgeTextConfig", "cosmos3_edge",
                                            "Cosmos3EdgeTextRotaryEmbedding", [6, 5, 5], True, {}, None),
    # text configs whose config.json gives the section without mrope_interleaved: the family's own layout decides
    "Qwen3-VL's text config (interleaved, no flag)": ("Qwen3VLTextConfig", "qwen3_vl", "Qwen3VLTextRotaryEmbedding",
                                                      [6, 5, 5], True, {}, "qwen3_vl_text"),
    "Qwen3.5 (interleaved sections, half the head)": ("Qwen3_5TextConfig", "qwen3_5", "Qwen3_5TextRotaryEmbedding",
                                                      [3, 3, 2], True, {"partial_rotary_factor": 0.5}, None),
    "GLM-OCR (sections on pairs)": ("GlmOcrTextConfig", "glm_ocr", "GlmOcrTextRotaryEmbedding", [2, 3, 3], False,
                                    {"partial_rotary_factor": 0.5}, None),
    "PaddleOCR-VL (sections)": ("PaddleOCRTextConfig", "paddleocr_vl", "PaddleOCRRotaryEmbedding", [4, 6, 6], False,
                                {}, None),
    # ERNIE-4.5-VL: height and width on alternate frequencies, then time, on adjacent pairs
    "ERNIE-4.5-VL (h and w alternating, then t)": ("Ernie4_5_VLMoeTextConfig", "ernie4_5_vl_moe",
                                                   "Ernie4_5_VLMoeTextRotaryEmbedding", [6, 6, 4], "hw", {}, None),
    # the Omni models' text decoders (their modules also hold other rotary classes: a DiT's, a code predictor's)
    "Qwen2.5-Omni's thinker text (sections)": ("Qwen2_5OmniTextConfig", "qwen2_5_omni", "Qwen2_5OmniRotaryEmbedding",
                                               [4, 6, 6], False, {}, "qwen2_5_omni_text"),
    "Qwen3-Omni's talker (interleaved sections)": ("Qwen3OmniMoeTalkerTextConfig", "qwen3_omni_moe",
                                                   "Qwen3OmniMoeTalkerRotaryEmbedding", [6, 5, 5], True, {},
                                                   "qwen3_omni_moe_talker_text"),
    # HunYuan-VL: sections of lanes, four axes (its checkpoints' xdrope: NTK-alpha) or three
    "HunYuan-VL (sections of lanes, 4 axes, NTK-alpha)": (
        "HunYuanVLTextConfig", "hunyuan_vl", "HunYuanVLRotaryEmbedding", [2, 6, 4, 4], "lanes",
        {"rope_type": "xdrope", "alpha": 1000.0, "factor": 1.0}, None),
    "HunYuan-VL's text config (3 axes)": ("HunYuanVLTextConfig", "hunyuan_vl", "HunYuanVLRotaryEmbedding", [6, 5, 5],
                                          "lanes", {}, "hunyuan_vl_text"),
    "ERNIE-4.5-VL's text config": ("Ernie4_5_VLMoeTextConfig", "ernie4_5_vl_moe", "Ernie4_5_VLMoeTextRotaryEmbedding",
                                   [6, 6, 4], "hw", {}, "ernie4_5_vl_moe_text"),
}


def mrope_family(family, kv_heads=2):
    """(transformers text config, its config.json as a dict, modeling module, rotary class, section) of an
    MROPE entry; skips without transformers. The config.json is the wrapper's form (its model_type, the text
    config's fields) with rope_parameters as given, so a family default (GLM-4.5V's factor) comes from ms_rotary."""
    transformers = pytest.importorskip("transformers")
    config_name, module_name, rotary_name, section, _, more, model_type = MROPE[family]
    rope_parameters = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section, **more}
    config = getattr(transformers, config_name)(hidden_size=64, num_attention_heads=2, num_key_value_heads=kv_heads,
                                                head_dim=32, rope_parameters=dict(rope_parameters))
    config_json = config.to_dict() | {"model_type": model_type or module_name, "rope_parameters": rope_parameters}
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    return config, config_json, module, getattr(module, rotary_name), section


@pytest.mark.parametrize("family", MROPE)
def test_mrope_tables_rotate_as_transformers_does(family):
    """Time, height and width positions that differ, [3, B, S]: the family's section layout decides which
    position turns each frequency."""
    torch = pytest.importorskip("torch")
    config, config_json, module, rotary_class, section = mrope_family(family)
    rope = RopeConfig.from_config(config_json)
    assert rope.mrope_section == tuple(section) and rope.mrope_interleaved == MROPE[family][4]
    rng = np.random.default_rng(7)
    positions = rng.integers(0, 3000, (len(section), 1, 9))
    q = rng.uniform(-1, 1, (1, 9, 2, 32)).astype(np.float32)
    with torch_in_float64():
        cos_hf, sin_hf = rotary_class(config)(torch.zeros(1), torch.tensor(positions))
        expected, _ = module.apply_rotary_pos_emb(torch.tensor(q).transpose(1, 2), torch.tensor(q).transpose(1, 2),
                                                  cos_hf, sin_hf)
    cos, sin = rope.cos_sin(positions)
    got = ms_rotary.PartialRotaryMul(rope.rotary_mode, list(rope.partial_slice))(ms.Tensor(q), cos, sin)
    assert_matches(got.asnumpy(), expected.transpose(1, 2).numpy())


@pytest.mark.parametrize("layer_type, head_dim, section", [("full_attention", 64, (4, 4)),
                                                           ("sliding_attention", 32, (8, 8))])
def test_neomme_alternates_row_and_column_as_transformers_does(layer_type, head_dim, section):
    """NeoMME: row positions on the even frequencies, column positions on the odd, over each layer type's own
    rotated width (a quarter of the head in its full-attention layers): its rotary class reads no section."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.neomme import modeling_neomme
    config = transformers.NeoMMEConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
                                       head_dim=head_dim, num_hidden_layers=6)
    rope = RopeConfig.from_config(config.to_dict(), layer_type=layer_type)
    assert (rope.mrope_section, rope.mrope_interleaved) == (section, "alternate")
    rng = np.random.default_rng(11)
    positions = rng.integers(0, 3000, (2, 1, 9))  # row, column
    q = rng.uniform(-1, 1, (1, 9, 2, head_dim)).astype(np.float32)
    start, end = rope.partial_slice
    with torch_in_float64():
        cos_hf, sin_hf = modeling_neomme.NeoMMERotaryEmbedding(config)(torch.zeros(1), torch.tensor(positions),
                                                                      layer_type)
        q_hf = torch.tensor(q[..., start:end]).transpose(1, 2)
        part, _ = modeling_neomme.apply_rotary_pos_emb(q_hf, q_hf, cos_hf, sin_hf)
    expected = np.concatenate([q[..., :start], part.transpose(1, 2).numpy(), q[..., end:]], -1)
    cos, sin = rope.cos_sin(positions)
    got = ms_rotary.PartialRotaryMul(rope.rotary_mode, list(rope.partial_slice))(ms.Tensor(q), cos, sin)
    assert_matches(got.asnumpy(), expected)
    layer = ms_rotary.RotaryEmbedding.from_config(config.to_dict(), layer_type=layer_type, cache_positions=3000)
    assert_matches(layer(ms.Tensor(q), None, positions[:, 0]).asnumpy(), expected)


@pytest.mark.parametrize("rope_parameters, match", [
    ({"mrope_section": [8, 8]}, r"layer_type='full_attention': mrope_section=\[8, 8\] is not what its rotary class "
                                r"uses, \[4, 4\]"),
    ({"mrope_interleaved": True}, r"model_type='neomme', layer_type='full_attention' with mrope_interleaved=True: "
                                  r"the family's rotary class lays out two axes on alternate frequencies"),
    ({"partial_rotary_factor": 0.15625}, r"rotates 10 lanes: its rotary class alternates two position axes over the "
                                        r"frequencies, which needs an even count"),
])
def test_neomme_configs_its_rotary_class_would_read_otherwise_are_refused(rope_parameters, match):
    full = {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25, **rope_parameters}
    config = {"model_type": "neomme", "hidden_size": 128, "num_attention_heads": 2, "head_dim": 64,
              "layer_types": ["sliding_attention", "full_attention"],
              "rope_parameters": {"full_attention": full,
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    with pytest.raises(ValueError, match=match):
        RopeConfig.from_config(config, layer_type="full_attention")
    assert RopeConfig.from_config(config, layer_type="sliding_attention").mrope_section == (16, 16)


def test_minimax_m3_vl_rotates_what_its_rotary_class_rotates_and_refuses_a_rotary_dim_it_ignores():
    """Its config's rotary_dim is read by no rotary class: where int(head_dim * partial_rotary_factor) says the
    same, the prefix of that width is rotated as transformers does; where they differ, refused."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl
    text = dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32, rotary_dim=16)
    config = transformers.CONFIG_MAPPING["minimax_m3_vl"](text_config={
        **text, "rope_parameters": {"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5}})
    for config_json in (config.to_dict(), config.text_config.to_dict()):
        rope = RopeConfig.from_config(config_json)
        assert (rope.partial_slice, rope.rotary_mode, rope.rope_theta) == ((0, 16), 0, 5e6)
    rng = np.random.default_rng(5)
    positions = rng.integers(0, 3500, (1, 9))
    q = rng.uniform(-1, 1, (1, 9, 2, 32)).astype(np.float32)
    with torch_in_float64():
        cos_hf, sin_hf = modeling_minimax_m3_vl.MiniMaxM3VLRotaryEmbedding(config.text_config)(
            torch.zeros(1), torch.tensor(positions))
        q_hf = torch.tensor(q).transpose(1, 2)
        expected, _ = modeling_minimax_m3_vl.apply_rotary_pos_emb(q_hf, q_hf, cos_hf, sin_hf)
    cos, sin = rope.cos_sin(positions[0])
    got = ms_rotary.PartialRotaryMul(rope.rotary_mode, list(rope.partial_slice))(ms.Tensor(q), cos, sin)
    assert_matches(got.asnumpy(), expected.transpose(1, 2).numpy())
    default = transformers.CONFIG_MAPPING["minimax_m3_vl"](text_config=text)  # rotates all 32 lanes, says 16
    with pytest.raises(ValueError, match=r"model_type='minimax_m3_vl' with rotary_dim=16: its rotary class reads no "
                                         r"rotary_dim and rotates int\(head_dim \* partial_rotary_factor\) = 32"):
        RopeConfig.from_config(default.to_dict())


def test_cohere_compass_rotates_each_layer_type_as_transformers_does():
    """Qwen3-VL's interleaved sections with each layer type's own theta and section (default (24, 20, 20)); a
    hub config's flat keys beside the per-layer-type entries dropped as its config class drops them."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.cohere_compass import modeling_cohere_compass
    rope_parameters = {"full_attention": {"rope_type": "default", "rope_theta": 5e4, "mrope_section": [6, 5, 5]},
                       "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    text = dict(hidden_size=64, num_attention_heads=2, num_hidden_layers=2, head_dim=48,
                layer_types=["sliding_attention", "full_attention"])
    config = transformers.CONFIG_MAPPING["cohere_compass_text"](**text, rope_parameters=dict(rope_parameters))
    hub_json = {**text, "model_type": "cohere_compass_text",
                "rope_parameters": {**rope_parameters, "rope_theta": 1e6, "rope_type": "default"}}
    rng = np.random.default_rng(13)
    positions = rng.integers(0, 3500, (3, 1, 9))
    q = rng.uniform(-1, 1, (1, 9, 2, 48)).astype(np.float32)
    with torch_in_float64():
        rotary = modeling_cohere_compass.CohereCompassRotaryEmbedding(config)
    q_hf = torch.tensor(q).transpose(1, 2)
    # the sliding layers' default section sums above their 24 frequencies: sliced there as transformers slices it
    for layer_type, section, theta in (("full_attention", (6, 5, 5), 5e4), ("sliding_attention", (24, 20, 20), 1e4)):
        rope = RopeConfig.from_config(hub_json, layer_type=layer_type)
        assert (rope.rotary_mode, rope.partial_slice, rope.mrope_section, rope.mrope_interleaved, rope.rope_theta) \
            == (0, (0, 48), section, True, theta)
        with torch_in_float64():
            cos_hf, sin_hf = rotary(torch.zeros(1), torch.tensor(positions), layer_type)
            expected, _ = modeling_cohere_compass.apply_rotary_pos_emb(q_hf, q_hf, cos_hf, sin_hf)
        cos, sin = rope.cos_sin(positions)
        got = ms_rotary.PartialRotaryMul(rope.rotary_mode, list(rope.partial_slice))(ms.Tensor(q), cos, sin)
        assert_matches(got.asnumpy(), expected.transpose(1, 2).numpy(), layer_type)
    flat = {**hub_json, "rope_parameters": {"rope_type": "default", "rope_theta": 5e4}}
    with pytest.raises(ValueError, match=r"model_type='cohere_compass_text' reads rope parameters only per layer type"):
        RopeConfig.from_config(flat)
    partial = {**hub_json, "rope_parameters": {"full_attention": {**rope_parameters["full_attention"],
                                                                  "partial_rotary_factor": 0.5}}}
    with pytest.raises(ValueError, match=r"partial_rotary_factor=0.5: its rotary class's default rope rotates the "
                                         r"whole head"):
        RopeConfig.from_config(partial)
    with pytest.raises(ValueError, match=r"model_type='moshi_depth' rotates nothing: Moshi's depth decoder"):
        RopeConfig.from_config({"model_type": "moshi_depth", "hidden_size": 64, "num_attention_heads": 2})


def test_mrope_configs_in_both_forms_and_the_family_defaults():
    old = {"model_type": "qwen2_vl", "hidden_size": 128, "num_attention_heads": 2, "rope_theta": 1e6,
           "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]}}
    new = {"model_type": "qwen2_vl", "hidden_size": 128, "num_attention_heads": 2,
           "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 12, 12]}}
    assert RopeConfig.from_config(old) == RopeConfig.from_config(new)
    assert RopeConfig.from_config(new).rope_scaling is None
    bare = {"model_type": "qwen3_vl", "hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128}
    assert (RopeConfig.from_config(bare).mrope_section, RopeConfig.from_config(bare).mrope_interleaved) == \
        ((24, 20, 20), True)
    # HunYuan-VL: its checkpoints' older name of the section and rope type; no default section
    hunyuan = {**bare, "model_type": "hunyuan_vl_text", "rope_scaling": {
        "type": "xdrope", "alpha": 1000.0, "factor": 1.0, "xdrope_section": [16, 16, 16, 16]}}
    rope = RopeConfig.from_config(hunyuan)
    assert (rope.mrope_section, rope.mrope_interleaved, rope.rope_scaling, rope.rope_theta) == \
        ((16, 16, 16, 16), "lanes", None, 10000.0 * 1000.0 ** (128 / 126))
    with pytest.raises(ValueError, match=r"xdrope_section=\[16, 16, 16, 16\] and mrope_section=\[16, 16, 32\]"):
        RopeConfig.from_config({**hunyuan, "rope_scaling": {**hunyuan["rope_scaling"], "mrope_section": [16, 16, 32]}})
    with pytest.raises(ValueError, match=r"model_type='hunyuan_vl_text' without mrope_section"):
        RopeConfig.from_config({**bare, "model_type": "hunyuan_vl_text"})
    # the Omni models' text decoders: their rotary classes' section defaults
    for model_type, expected in (("qwen2_5_omni_text", ((16, 24, 24), False)), ("qwen2_5_omni_talker",
                                                                               ((16, 24, 24), False)),
                                 ("qwen3_omni_moe_talker_text", ((24, 20, 20), True))):
        omni = RopeConfig.from_config({**bare, "model_type": model_type})
        assert (omni.mrope_section, omni.mrope_interleaved) == expected, model_type
    ernie = RopeConfig.from_config({**bare, "model_type": "ernie4_5_vl_moe_text"})  # its rotary class's default
    assert (ernie.rotary_mode, ernie.mrope_section, ernie.mrope_interleaved) == (1, (22, 22, 20), "hw")
    with pytest.raises(ValueError, match=r"mrope_section=\[20, 24, 20\] with mrope_interleaved='hw' alternates"):
        RopeConfig.from_config({**bare, "model_type": "ernie4_5_vl_moe", "rope_parameters": {
            "rope_type": "default", "mrope_section": [20, 24, 20]}}).cos_sin(np.zeros((3, 4), np.int64))
    # GLM-4.5V's config class halves the rotary width; GLM-4.1V's rotates the whole head, which its default
    # section (32 frequencies) does not fit: transformers' own split fails there, ms_rotary refuses by name
    glm_4_5v = RopeConfig.from_config({**bare, "model_type": "glm4v_moe_text"})
    assert (glm_4_5v.partial_slice, glm_4_5v.rotary_mode, glm_4_5v.mrope_section, glm_4_5v.mrope_interleaved) == \
        ((0, 64), 0, (8, 12, 12), False)
    glm_4_1v = RopeConfig.from_config({**bare, "model_type": "glm4v"})
    assert (glm_4_1v.partial_slice, glm_4_1v.rotary_mode, glm_4_1v.mrope_section) == ((0, 128), 1, (8, 12, 12))
    with pytest.raises(ValueError, match=r"mrope_section=\[8, 12, 12\] sums to 32; rotary_dim / 2 = 64"):
        glm_4_1v.cos_sin(np.zeros((3, 4), np.int64))
    # Qwen3-Omni's thinker wraps its text config, the whole model the thinker's; its checkpoints give 128-lane
    # heads, the default config's 2048 / 28 leaves 73 lanes, whose odd width is refused by name
    thinker = {"model_type": "qwen3_omni_moe_thinker", "text_config": {"hidden_size": 2048, "num_attention_heads": 32,
                                                                       "head_dim": 128}}
    for config in (thinker, {"model_type": "qwen3_omni_moe", "thinker_config": thinker}):  # the whole model's too
        omni = RopeConfig.from_config(config)
        assert (omni.partial_slice, omni.rotary_mode, omni.rope_theta, omni.mrope_section, omni.mrope_interleaved) \
            == ((0, 128), 0, 1e6, (24, 20, 20), True)
    # GLM-Image's and Cosmos3-Edge's text decoders: their config classes' defaults (Cosmos3-Edge: theta 1e8)
    glm_image = RopeConfig.from_config({**bare, "model_type": "glm_image", "partial_rotary_factor": 0.5})
    cosmos = RopeConfig.from_config({**bare, "model_type": "cosmos3_edge_text"})
    assert (glm_image.partial_slice, glm_image.rotary_mode, glm_image.mrope_section, glm_image.mrope_interleaved,
            cosmos.partial_slice, cosmos.rope_theta, cosmos.mrope_section, cosmos.mrope_interleaved) == \
        ((0, 64), 0, (8, 12, 12), False, (0, 128), 1e8, (24, 20, 20), True)
    with pytest.raises(ValueError, match=r"mrope_section=\[8, 12, 12\] sums to 32; rotary_dim / 2 = 64"):
        RopeConfig.from_config({**bare, "model_type": "glm_image_text"}).cos_sin(np.zeros((3, 4), np.int64))
    with pytest.raises(ValueError, match="rotary width 73 must be even"):
        RopeConfig.from_config({"model_type": "qwen3_omni_moe_text", "hidden_size": 2048, "num_attention_heads": 28})
    with pytest.raises(ValueError, match=r"mrope_section=\[8, 12, 11\] sums to 31; rotary_dim / 2 = 32"):
        RopeConfig.from_config({**new, "rope_parameters": {"mrope_section": [8, 12, 11]}}).cos_sin(
            np.zeros((3, 4), np.int64))
    with pytest.raises(ValueError, match=r"M-RoPE positions of shape \(4,\) do not fit"):
        RopeConfig.from_config(new).cos_sin(np.arange(4))
    layer = ms_rotary.RotaryEmbedding.from_config(new, cache_positions=16)  # M-RoPE: takes [3, S] positions
    with pytest.raises(ValueError, match=r"must be \[3, S\] or \[3, B, S\]"):
        layer(ms.Tensor(np.zeros((1, 4, 2, 64), np.float32)), None, np.arange(4))
