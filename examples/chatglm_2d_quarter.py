"""ChatGLM-6B (v1)-style 2D rotary (mode 2, quarter): the first half of each head rotates by the token
position, the second half by the block position (0 in the context, 1, 2, ... in the generated span)."""
import numpy as np

from rope_common import RotaryAttention, as_bsnd, rope_table, self_check

D_MODEL, N_HEADS, HEAD_DIM = 64, 4, 16


def build_attention(use_ms_rotary=True):
    return RotaryAttention(D_MODEL, N_HEADS, HEAD_DIM, "quarter", [0, HEAD_DIM], use_ms_rotary)


def rope_tables(seq_len, context_len=None):
    context_len = seq_len // 2 if context_len is None else context_len
    positions = np.minimum(np.arange(seq_len), context_len - 1)  # generated tokens keep the last context position
    block_positions = np.maximum(np.arange(seq_len) - context_len + 1, 0)
    cos1, sin1 = rope_table(positions, HEAD_DIM // 2, "halves")
    cos2, sin2 = rope_table(block_positions, HEAD_DIM // 2, "halves")
    return as_bsnd(np.concatenate([cos1, cos2], -1)), as_bsnd(np.concatenate([sin1, sin2], -1))


if __name__ == "__main__":
    self_check("ChatGLM-6B 2D quarter, slice [0, 16) of 16", build_attention, rope_tables, D_MODEL)
