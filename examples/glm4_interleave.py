"""GLM-4 / ChatGLM2-3 / GPT-J-style attention: interleaved pairs (mode 1) on the first half of each head."""
import numpy as np
from rope_common import RotaryAttention, self_check

import ms_rotary

# A Hugging Face Glm4Config, shrunk (GLM-4-9B: head_dim 128, partial_rotary_factor 0.5, rope_theta 10000).
CONFIG = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "partial_rotary_factor": 0.5,
          "rope_theta": 10000.0, "max_position_embeddings": 131072}
D_MODEL, N_HEADS, HEAD_DIM = CONFIG["hidden_size"], CONFIG["num_attention_heads"], CONFIG["head_dim"]
ROT_DIM = int(HEAD_DIM * CONFIG["partial_rotary_factor"])  # 8: rotate [0, 8) of each 16-wide head

TITLE = "GLM-4 interleave, slice [0, 8) of 16"


def build_attention(use_ms_rotary=True):
    return RotaryAttention(D_MODEL, N_HEADS, HEAD_DIM, "interleave", [0, ROT_DIM], use_ms_rotary)


def rope_tables(seq_len):
    return ms_rotary.rope_cos_sin(np.arange(seq_len), ROT_DIM, "interleave", rope_theta=CONFIG["rope_theta"],
                                  max_position_embeddings=CONFIG["max_position_embeddings"])


if __name__ == "__main__":
    self_check(TITLE, build_attention, rope_tables, D_MODEL)
