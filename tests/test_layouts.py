"""Layouts and shardings LLM code uses: Megatron/mindformers SBND and BNSD give BSND's numbers (forward and
gradients) with cos/sin shaped to match; a rank holding a slice of the heads, or of the sequence with tables
built by rope_cos_sin for its own positions, computes its part of the whole."""
import mindspore as ms
import numpy as np
import pytest

import ms_rotary

B, S, N, D, SLICE = 2, 6, 4, 16, [4, 12]


def _inputs(mode):
    rng = np.random.default_rng(mode)
    x = rng.standard_normal((B, S, N, D)).astype(np.float32)
    w = rng.standard_normal((B, S, N, D)).astype(np.float32)
    positions = np.stack([np.arange(S), np.arange(S) % 3], -1) if mode == 2 else np.arange(S)
    cos, sin = ms_rotary.rope_cos_sin(positions, SLICE[1] - SLICE[0], mode, rope_theta=50.0)
    return x, w, cos.asnumpy(), sin.asnumpy()  # cos/sin [1, S, 1, d]


def _value_and_grads(op, x, w, cos, sin):
    def loss(x, cos, sin):
        return (op(x, cos, sin) * ms.Tensor(w)).sum()
    y = op(ms.Tensor(x), ms.Tensor(cos), ms.Tensor(sin)).asnumpy()
    grads = ms.grad(loss, grad_position=(0, 1, 2))(ms.Tensor(x), ms.Tensor(cos), ms.Tensor(sin))
    return [y] + [g.asnumpy() for g in grads]


# to the layout from BSND, for x (and w) and for cos/sin
LAYOUTS = {"SBND": (1, 0, 2, 3), "BNSD": (0, 2, 1, 3)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_sbnd_and_bnsd_match_bsnd(layout, mode):
    op = ms_rotary.PartialRotaryMul(mode, SLICE)
    x, w, cos, sin = _inputs(mode)
    expected = _value_and_grads(op, x, w, cos, sin)
    axes = LAYOUTS[layout]
    got = _value_and_grads(op, x.transpose(axes).copy(), w.transpose(axes).copy(), cos.transpose(axes).copy(),
                           sin.transpose(axes).copy())
    for name, e, g in zip(("y", "dx", "dcos", "dsin"), expected, got):
        np.testing.assert_allclose(g, e.transpose(axes), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_a_rank_with_some_heads_or_some_positions_computes_its_part(mode):
    op = ms_rotary.InplacePartialRotaryMulGrad(mode, SLICE)
    x, _, cos, sin = _inputs(mode)
    whole = op(ms.Tensor(x.copy()), ms.Tensor(cos), ms.Tensor(sin)).asnumpy()
    # heads sharded over 2 ranks: N is local, cos/sin broadcast over it
    for rank in range(2):
        heads = x[:, :, rank * N // 2:(rank + 1) * N // 2].copy()
        part = op(ms.Tensor(heads), ms.Tensor(cos), ms.Tensor(sin)).asnumpy()
        np.testing.assert_array_equal(part, whole[:, :, rank * N // 2:(rank + 1) * N // 2])
    # sequence sharded over 2 ranks: each builds its tables for its own positions
    for rank in range(2):
        local = np.arange(rank * S // 2, (rank + 1) * S // 2)
        positions = np.stack([local, local % 3], -1) if mode == 2 else local
        cos_r, sin_r = ms_rotary.rope_cos_sin(positions, SLICE[1] - SLICE[0], mode, rope_theta=50.0)
        part = op(ms.Tensor(x[:, local].copy()), cos_r, sin_r).asnumpy()
        np.testing.assert_array_equal(part, whole[:, local])
