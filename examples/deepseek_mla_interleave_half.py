"""DeepSeek-V2/V3 MLA-style attention: each query head is [nope | rope]; the rope part is de-interleaved
and rotated as halves (mode 3, interleave-half) on the tail slice; the key's rope part is one head shared
by all heads, rotated by the same op with N = 1 (cos/sin broadcast)."""
import numpy as np
from mindspore import nn, ops

from rope_common import as_bsnd, causal_attention, rope_table, rotary_cell, self_check

D_MODEL, N_HEADS, NOPE_DIM, ROPE_DIM, V_DIM, KV_RANK = 64, 4, 16, 8, 16, 32
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


def build_attention(use_ms_rotary=True):
    return MLAttention(use_ms_rotary)


def rope_tables(seq_len):
    cos, sin = rope_table(np.arange(seq_len), ROPE_DIM, "halves")  # y (output) layout is halves
    return as_bsnd(cos), as_bsnd(sin)


if __name__ == "__main__":
    self_check("DeepSeek MLA interleave-half, slice [16, 24) of 24", build_attention, rope_tables, D_MODEL)
