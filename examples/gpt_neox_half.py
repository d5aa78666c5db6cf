"""GPT-NeoX / Pythia / Phi-style attention: rotate-half (mode 0) on the first rotary_pct of each head."""
import numpy as np

from rope_common import RotaryAttention, as_bsnd, rope_table, self_check

D_MODEL, N_HEADS, HEAD_DIM, ROTARY_PCT = 64, 4, 32, 0.25
ROT_DIM = int(HEAD_DIM * ROTARY_PCT)  # 8: rotate [0, 8) of each 32-wide head


def build_attention(use_ms_rotary=True):
    return RotaryAttention(D_MODEL, N_HEADS, HEAD_DIM, "half", [0, ROT_DIM], use_ms_rotary)


def rope_tables(seq_len):
    cos, sin = rope_table(np.arange(seq_len), ROT_DIM, "halves")
    return as_bsnd(cos), as_bsnd(sin)


if __name__ == "__main__":
    self_check("GPT-NeoX half, slice [0, 8) of 32", build_attention, rope_tables, D_MODEL)
