"""DeepSeek-V2/V3 MLA-style attention: each query head is [nope | rope]; the rope part is de-interleaved
and rotated as halves (mode 3, interleave-half) on the tail slice; the key's rope part is one head shared
by all heads, rotated by the same op with N = 1 (cos/sin broadcast)."""
import numpy as np
from mindspore import nn, ops
from rope_common import causal_attention, rotary_cell, self_check

import ms_rotary

# A Hugging Face DeepseekV3Config, shrunk (DeepSeek-V3: qk_nope 128, qk_rope 64, kv_lora_rank 512, v 128),
# with its YaRN rope_scaling as published.
CONFIG = {"hidden_size": 64, "num_attention_heads": 4, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
          "v_head_dim": 16, "kv_lora_rank": 32, "rope_theta": 10000.0, "max_position_embeddings": 163840,
          "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                           "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}}
D_MODEL, N_HEADS = CONFIG["hidden_size"], CONFIG["num_attention_heads"]
NOPE_DIM, ROPE_DIM, V_DIM, KV_RANK = (CONFIG[key] for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                                             "kv_lora_rank"))
QK_DIM = NOPE_DIM + ROPE_DIM  # 24: rotate [16, 24) of each query head


class MLAttention(nn.Cell):
    def __init__(self, use_ms_rotary=True):
        super().__init__()
        self.q = nn.Dense(D_MODEL, N_HEADS * QK_DIM, has_bias=False)
        self.kv_down = nn.Dense(D_MODEL, KV_RANK + ROPE_DIM, has_bias=False)  # compressed kv + shared k_rope
        self.kv_up = nn.Dense(KV_RANK, N_HEADS * (NOPE_DIM + V_DIM), has_bias=False)
        self.out = nn.Dense(N_HEADS * V_DIM, D_MODEL, has_bias=False)
        self.q_rope = rotary_cell("interleave-half", [NOPE_DIM, QK_DIM], use_ms_rotary)
        self.k_rope = rotary_cell("interleave-half", [0, ROPE_DIM], use_ms_rotary)

    def construct(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_rope(self.q(x).reshape(b, s, N_HEADS, QK_DIM), cos, sin)
        latent, k_pe = ops.split(self.kv_down(x), [KV_RANK, ROPE_DIM], -1)
        k_pe = self.k_rope(k_pe.reshape(b, s, 1, ROPE_DIM).contiguous(), cos, sin)  # split gave a strided view
        k_nope, v = ops.split(self.kv_up(latent).reshape(b, s, N_HEADS, NOPE_DIM + V_DIM), [NOPE_DIM, V_DIM], -1)
        k = ops.cat([k_nope, ops.broadcast_to(k_pe, (b, s, N_HEADS, ROPE_DIM))], -1)
        return self.out(causal_attention(q, k, v))

TITLE = "DeepSeek MLA interleave-half, slice [16, 24) of 24"


def build_attention(use_ms_rotary=True):
    return MLAttention(use_ms_rotary)


def rope_tables(seq_len):
    # YaRN on the rope part only (frequencies over qk_rope_head_dim lanes); cos/sin in halves, the output layout
    return ms_rotary.rope_cos_sin(np.arange(seq_len), ROPE_DIM, "interleave-half", rope_theta=CONFIG["rope_theta"],
                                  rope_scaling=CONFIG["rope_scaling"],
                                  max_position_embeddings=CONFIG["max_position_embeddings"])


if __name__ == "__main__":
    self_check(TITLE, build_attention, rope_tables, D_MODEL)
