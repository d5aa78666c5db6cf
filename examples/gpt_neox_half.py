"""GPT-NeoX / Pythia / Phi-style attention: rotate-half (mode 0) on the first rotary_pct of each head."""
import numpy as np
from rope_common import RotaryAttention, self_check

import ms_rotary

# A Hugging Face GPTNeoXConfig, shrunk (Pythia-70m has hidden 512, 8 heads, rotary_pct 0.25).
CONFIG = {"hidden_size": 64, "num_attention_heads": 2, "rotary_pct": 0.25, "rotary_emb_base": 10000,
          "max_position_embeddings": 2048}
D_MODEL, N_HEADS = CONFIG["hidden_size"], CONFIG["num_attention_heads"]
HEAD_DIM = D_MODEL // N_HEADS
ROT_DIM = int(HEAD_DIM * CONFIG["rotary_pct"])  # 8: rotate [0, 8) of each 32-wide head

TITLE = "GPT-NeoX half, slice [0, 8) of 32"


def build_attention(use_ms_rotary=True):
    return RotaryAttention(D_MODEL, N_HEADS, HEAD_DIM, "half", [0, ROT_DIM], use_ms_rotary)


def rope_tables(seq_len):
    return ms_rotary.rope_cos_sin(np.arange(seq_len), ROT_DIM, "half", rope_theta=CONFIG["rotary_emb_base"],
                                  max_position_embeddings=CONFIG["max_position_embeddings"])


if __name__ == "__main__":
    self_check(TITLE, build_attention, rope_tables, D_MODEL)
