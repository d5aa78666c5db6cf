"""Which families RMS-normalise each head of q and k right before the rotation, and how (transformers 5.25's
attention modules: `q_norm`/`k_norm` over head_dim, epsilon `rms_norm_eps` or LFM3's `norm_eps`): what
RotaryEmbedding.from_config(config, qk_norm=True) builds its head norm from. tests/test_head_norm.py checks each
entry against the family's own norm module."""
import numbers

from .call import HeadNorm

_PREFIX = "ms_rotary.RotaryEmbedding.from_config"
# model_type: the offset of the norm's gain, offset + weight (1.0: the zero-centred (1 + weight) form).
PER_HEAD_NORM_OFFSETS = {
    **dict.fromkeys(("qwen3", "qwen3_moe", "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text",
                     "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "diffusion_gemma", "embedding_gemma2",
                     "exaone4", "exaone_moe", "dots1", "apertus", "hy_v3", "afmoe", "doge", "lfm3", "kolibri1",
                     "qwen3_omni_moe", "qwen3_omni_moe_thinker", "qwen3_omni_moe_text"), 0.0),
    **dict.fromkeys(("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "gemma3",
                     "gemma3_text", "step3p7"), 1.0),
}
# Families whose q_norm spans all heads of a token (weight [heads * head_dim] or [hidden_size]): one norm over the
# whole projection, which a per-head norm is not.
WHOLE_PROJECTION_NORMS = frozenset(("olmo2", "olmo3", "flex_olmo", "minimax_m2", "olmoe", "olmo_hybrid"))


def head_norm_from_config(fields):
    """The HeadNorm of a config's fields (RopeConfig's dict of them), or a clear refusal."""
    model_type = fields.get("model_type")
    if model_type in WHOLE_PROJECTION_NORMS:
        raise ValueError(f"{_PREFIX}: model_type={model_type!r} normalises q and k over all heads of a token (one "
                         f"norm over the whole projection), not each head: norm them before the layer and build it "
                         f"without qk_norm")
    if model_type not in PER_HEAD_NORM_OFFSETS:
        raise ValueError(f"{_PREFIX}: model_type={model_type!r} is not known to norm each head of q and k before "
                         f"the rotation (known: {sorted(PER_HEAD_NORM_OFFSETS)}); pass qk_norm_eps= and "
                         f"qk_norm_offset= to RotaryEmbedding yourself")
    eps = next((fields[key] for key in ("rms_norm_eps", "norm_eps") if fields.get(key) is not None), None)  # LFM3
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"{_PREFIX}: rms_norm_eps={eps!r} must be a number >= 0 (the head norm's epsilon)")
    return HeadNorm(float(eps), PER_HEAD_NORM_OFFSETS[model_type])
