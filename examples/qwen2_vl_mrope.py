"""Qwen2-VL-style multimodal RoPE (M-RoPE, mode 0 half): each token has a time, a height and a width position;
mrope_section splits the head's frequencies among the three. Tables come from the model config through
ms_rotary.RopeConfig; the attention layer rotates with ms_rotary's op, and ms_rotary.RotaryEmbedding.from_config
rotates q and k by [3, S] positions straight from its cos/sin cache.

    python examples/qwen2_vl_mrope.py

The sequence: 3 text tokens, a 2 x 3 grid of image patches, 3 more text tokens. Text tokens carry one position
in all three channels; a patch carries the image's start time and its own row and column; the text after
the image continues from the largest position + 1. Checks: on text-only positions M-RoPE is plain RoPE, and
the layer (output and every gradient) equals the same layer written with plain MindSpore ops, and
RotaryEmbedding equals the op on the M-RoPE tables bit for bit."""
import mindspore as ms
import numpy as np
from rope_common import RotaryAttention, self_check

import ms_rotary

# A Qwen2-VL text config as config.json holds it, shrunk: head_dim 32 has 16 frequencies, 4 turned by time,
# 6 by height, 6 by width.
CONFIG = {"model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 2,
          "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]}}
ROPE = ms_rotary.RopeConfig.from_config(CONFIG)
D_MODEL, N_HEADS = CONFIG["hidden_size"], CONFIG["num_attention_heads"]
TITLE = "Qwen2-VL M-RoPE half, sections [4, 6, 6] of 16 frequencies"


def multimodal_positions():
    """[3, 12]: time, height, width of each token."""
    text = np.arange(3)
    rows, cols = np.meshgrid(np.arange(2), np.arange(3), indexing="ij")
    image = np.stack([np.full(6, 3), 3 + rows.ravel(), 3 + cols.ravel()])
    after = image.max() + 1 + np.arange(3)
    return np.concatenate([np.stack([text] * 3), image, np.stack([after] * 3)], 1)


def build_attention(use_ms_rotary=True):
    return RotaryAttention(D_MODEL, N_HEADS, ROPE.head_dim, ROPE.rotary_mode, list(ROPE.partial_slice),
                           use_ms_rotary)


def rope_tables(seq_len):
    assert seq_len == 12, "the example's token layout has 12 tokens"
    return ROPE.cos_sin(multimodal_positions())


def main():
    text_positions = np.arange(12)
    mrope = ROPE.cos_sin(np.stack([text_positions] * 3))
    plain = ms_rotary.rope_cos_sin(text_positions, ROPE.rotary_dim, ROPE.rotary_mode, ROPE.rope_theta)
    worst = max(float(np.abs(a.asnumpy() - b.asnumpy()).max()) for a, b in zip(mrope, plain))
    print(f"[self-check] M-RoPE on text-only positions equals plain RoPE, max abs diff {worst:.2e} "
          f"{'OK' if worst == 0 else 'FAILED'}")
    if worst != 0:
        raise AssertionError("M-RoPE with equal time, height and width positions differs from RoPE")
    self_check(TITLE, build_attention, rope_tables, D_MODEL, seq_len=12)
    rope = ms_rotary.RotaryEmbedding.from_config(CONFIG, cache_positions=64)
    rng = np.random.default_rng(0)
    q = ms.Tensor(rng.standard_normal((1, 12, N_HEADS, ROPE.head_dim)), ms.float32)
    k = ms.Tensor(rng.standard_normal((1, 12, 1, ROPE.head_dim)), ms.float32)
    q_rot, k_rot = rope(q, k, multimodal_positions())
    op = ms_rotary.PartialRotaryMul(ROPE.rotary_mode, list(ROPE.partial_slice))
    same = all(np.array_equal(got.asnumpy(), op(t, *rope_tables(12)).asnumpy()) for got, t in ((q_rot, q), (k_rot, k)))
    print(f"[self-check] RotaryEmbedding by [3, S] positions equals the op on M-RoPE tables bit for bit "
          f"{'OK' if same else 'FAILED'}")
    if not same:
        raise AssertionError("RotaryEmbedding's M-RoPE differs from the op on M-RoPE tables")


if __name__ == "__main__":
    main()
