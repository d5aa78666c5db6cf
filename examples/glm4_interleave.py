"""GLM-4 / ChatGLM2-3 / GPT-J-style attention: interleaved pairs (mode 1) on the first half of each head."""
import numpy as np

from rope_common import RotaryAttention, as_bsnd, rope_table, self_check

D_MODEL, N_HEADS, HEAD_DIM = 64, 4, 16
ROT_DIM = HEAD_DIM // 2  # GLM-4 rotates D/2


def build_attention(use_ms_rotary=True):
    return RotaryAttention(D_MODEL, N_HEADS, HEAD_DIM, "interleave", [0, ROT_DIM], use_ms_rotary)


def rope_tables(seq_len):
    cos, sin = rope_table(np.arange(seq_len), ROT_DIM, "pairs")
    return as_bsnd(cos), as_bsnd(sin)


if __name__ == "__main__":
    self_check("GLM-4 interleave, slice [0, 8) of 16", build_attention, rope_tables, D_MODEL)
