"""ChatGLM-6B (v1)-style 2D rotary (mode 2, quarter): the first half of each head rotates by the token
position, the second half by the block position (0 in the context, 1, 2, ... in the generated span)."""
import numpy as np
from rope_common import RotaryAttention, self_check

import ms_rotary

# ChatGLM-6B's config, shrunk (hidden 4096, 32 heads, position_encoding_2d; each half is a rotary of D/2 lanes).
CONFIG = {"hidden_size": 64, "num_attention_heads": 4, "position_encoding_2d": True, "max_sequence_length": 2048}
D_MODEL, N_HEADS = CONFIG["hidden_size"], CONFIG["num_attention_heads"]
HEAD_DIM = D_MODEL // N_HEADS

TITLE = "ChatGLM-6B 2D quarter, slice [0, 16) of 16"


def build_attention(use_ms_rotary=True):
    return RotaryAttention(D_MODEL, N_HEADS, HEAD_DIM, "quarter", [0, HEAD_DIM], use_ms_rotary)


def rope_tables(seq_len, context_len=None):
    context_len = seq_len // 2 if context_len is None else context_len
    positions = np.minimum(np.arange(seq_len), context_len - 1)  # generated tokens keep the last context position
    block_positions = np.maximum(np.arange(seq_len) - context_len + 1, 0)
    return ms_rotary.rope_cos_sin(np.stack([positions, block_positions], -1), HEAD_DIM, "quarter",
                                  max_position_embeddings=CONFIG["max_sequence_length"])


if __name__ == "__main__":
    self_check(TITLE, build_attention, rope_tables, D_MODEL)
