"""Llama-3-style grouped-query attention with ms_rotary.RotaryEmbedding: prefill a prompt, then decode tokens
one at a time with a KV cache, and check every decoded step against the full-sequence forward.

    python examples/llama3_decode.py

The config is a Hugging Face LlamaConfig as config.json holds it (shrunk: 4 query heads sharing 2 key/value
heads, llama3 frequency scaling). Keys are rotated once, when they enter the cache, at their own positions."""
import math
import sys

import mindspore as ms
import numpy as np
from mindspore import nn, ops

import ms_rotary

CONFIG = {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 131072,
          "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
PROMPT, DECODED = 7, 5


class GQAttention(nn.Cell):
    def __init__(self, config, cache_positions):
        super().__init__()
        self.heads, self.kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        self.head_dim = config["hidden_size"] // self.heads
        d = config["hidden_size"]
        self.q = nn.Dense(d, self.heads * self.head_dim, has_bias=False)
        self.k = nn.Dense(d, self.kv_heads * self.head_dim, has_bias=False)
        self.v = nn.Dense(d, self.kv_heads * self.head_dim, has_bias=False)
        self.out = nn.Dense(self.heads * self.head_dim, d, has_bias=False)
        self.rope = ms_rotary.RotaryEmbedding.from_config(config, cache_positions=cache_positions)

    def construct(self, x, positions, past_k, past_v):
        """x [B, S, d] at `positions` [S], after the cached keys/values of the earlier positions; returns the
        output and the grown cache."""
        b, s, _ = x.shape
        q = self.q(x).reshape(b, s, self.heads, self.head_dim)
        k = self.k(x).reshape(b, s, self.kv_heads, self.head_dim)
        q, k = self.rope(q, k, positions)
        k = ops.concat((past_k, k), 1)
        v = ops.concat((past_v, self.v(x).reshape(b, s, self.kv_heads, self.head_dim)), 1)
        repeat = self.heads // self.kv_heads
        keys = ops.repeat_interleave(k, repeat, 2).transpose(0, 2, 3, 1)     # [B, N, D, T]
        values = ops.repeat_interleave(v, repeat, 2).transpose(0, 2, 1, 3)   # [B, N, T, D]
        scores = ops.matmul(q.transpose(0, 2, 1, 3), keys) / math.sqrt(self.head_dim)
        total = k.shape[1]
        query_positions = ops.arange(total - s, total).reshape(s, 1)
        scores = ops.masked_fill(scores, ops.arange(total).reshape(1, total) > query_positions, -1e9)
        out = ops.matmul(ops.softmax(scores, -1), values).transpose(0, 2, 1, 3).reshape(b, s, -1)
        return self.out(out), k, v


def main():
    ms.set_seed(0)
    attention = GQAttention(CONFIG, cache_positions=64)
    x = ms.Tensor(np.random.default_rng(0).standard_normal((1, PROMPT + DECODED, CONFIG["hidden_size"]))
                  .astype(np.float32))
    empty = ops.zeros((1, 0, attention.kv_heads, attention.head_dim), ms.float32)
    full, _, _ = attention(x, ms.Tensor(np.arange(PROMPT + DECODED)), empty, empty)
    out, past_k, past_v = attention(x[:, :PROMPT], ms.Tensor(np.arange(PROMPT)), empty, empty)  # prefill
    worst = float(np.abs(out.asnumpy() - full.asnumpy()[:, :PROMPT]).max())
    for t in range(PROMPT, PROMPT + DECODED):  # decode: one token, one position, the cache grows
        out, past_k, past_v = attention(x[:, t:t + 1], ms.Tensor(np.array([t])), past_k, past_v)
        worst = max(worst, float(np.abs(out.asnumpy() - full.asnumpy()[:, t:t + 1]).max()))
    ok = worst <= 1e-5
    print(f"[self-check] Llama-3 GQA (4 query / 2 key-value heads, llama3 scaling): prefill of {PROMPT} tokens and "
          f"{DECODED} decoded with a KV cache match the full-sequence forward, max abs diff {worst:.2e} "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
