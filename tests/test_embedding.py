"""RotaryEmbedding: q and k rotated in one call by the cache rows their positions pick, against the float64
reference on the gathered rows, against two PartialRotaryMul calls on gathered tables (bit for bit), in
decode and packed-sequence use, with gradients, in every execution mode and on both backends; and against
transformers' own layers when it is installed."""

import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, DTYPES, TOLERANCE, random_tensor, raw_bits, to_float64
from reference import rotary_forward, rotary_grad
from test_rope_config import FAMILIES, ROTATED_PART_ONLY, transformers_family

import ms_rotary
from ms_rotary import RotaryEmbedding

B, S, NQ, NK, D = 2, 6, 4, 2, 48
SLICE = (8, 40)
CACHE = 64
POSITIONS = np.array([[3, 4, 5, 6, 7, 8], [0, 1, 2, 0, 1, 63]])  # row 1: packed sequences restarting


def _layer(mode, cache_dtype="float32", backend="aot"):
    return RotaryEmbedding(D, SLICE, mode, rope_theta=500.0, cache_positions=CACHE, cache_dtype=DTYPES[cache_dtype],
                           backend=backend)


def _gathered(layer, positions):
    """The cache rows of the positions, as tables PartialRotaryMul takes ([B, S, 1, L])."""
    rows = np.asarray(positions).reshape(-1, S)
    cos, sin = (ms.Tensor(t.asnumpy()[0, :, 0][rows][:, :, None, :]) if t.dtype != ms.bfloat16 else
                ms.Tensor(t.float().asnumpy()[0, :, 0][rows][:, :, None, :], ms.bfloat16)
                for t in (layer.cos_cache, layer.sin_cache))
    return cos, sin


def _run(exec_mode, fn, *args):
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        return ms.jit(fn)(*args) if exec_mode == "ms.jit" else fn(*args)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("exec_mode", ["pynative", "ms.jit", "GRAPH_MODE"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", [0, 1, 3])
@pytest.mark.parametrize("dtype,cache_dtype", [("float32", "float32"), ("bfloat16", "float32"),
                                               ("float16", "bfloat16"), ("float32", "float16")])
def test_q_and_k_in_one_call_match_the_reference_and_two_calls_bit_for_bit(dtype, cache_dtype, mode, backend,
                                                                           exec_mode):
    rng = np.random.default_rng(mode)
    q, q64 = random_tensor(rng, (B, S, NQ, D), dtype)
    k, k64 = random_tensor(rng, (B, S, NK, D), dtype)
    layer = _layer(mode, cache_dtype, backend)
    positions = ms.Tensor(POSITIONS)

    def rotate(q, k, positions):
        return layer(q, k, positions)

    q_rot, k_rot = _run(exec_mode, layer if exec_mode == "GRAPH_MODE" else rotate, q, k, positions)
    cos, sin = _gathered(layer, POSITIONS)
    op = ms_rotary.PartialRotaryMul(mode, list(SLICE), backend=backend)
    for got, t, t64 in ((q_rot, q, q64), (k_rot, k, k64)):
        np.testing.assert_array_equal(raw_bits(got), raw_bits(op(t, cos, sin)))
        expected = rotary_forward(mode, t64, to_float64(cos), to_float64(sin), *SLICE)
        tol = TOLERANCE[dtype]
        np.testing.assert_allclose(to_float64(got), expected, rtol=tol, atol=tol)


def test_a_decode_loop_equals_the_full_sequence_and_packed_sequences_equal_separate_calls():
    rng = np.random.default_rng(5)
    layer = _layer(0)
    q, _ = random_tensor(rng, (1, S, NQ, D), "float32")
    k, _ = random_tensor(rng, (1, S, NK, D), "float32")
    full_q, full_k = layer(q, k, np.arange(S))
    for t in range(S):  # one token per step at a growing position
        step_q, step_k = layer(q[:, t:t + 1], k[:, t:t + 1], np.array([t]))
        np.testing.assert_array_equal(step_q.asnumpy(), full_q.asnumpy()[:, t:t + 1])
        np.testing.assert_array_equal(step_k.asnumpy(), full_k.asnumpy()[:, t:t + 1])
    packed = np.array([0, 1, 2, 0, 1, 2])  # two sequences of 3 in one row
    packed_q, _ = layer(q, k, packed)
    for begin in (0, 3):
        alone, _ = layer(q[:, begin:begin + 3], k[:, begin:begin + 3], np.arange(3))
        np.testing.assert_array_equal(packed_q.asnumpy()[:, begin:begin + 3], alone.asnumpy())
    q_only = layer(q, None, np.arange(S))
    np.testing.assert_array_equal(q_only.asnumpy(), full_q.asnumpy())


@pytest.mark.parametrize("exec_mode", ["pynative", "ms.jit", "GRAPH_MODE"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_for_q_and_k_are_the_transposed_rotation(backend, exec_mode):
    rng = np.random.default_rng(9)
    q, _ = random_tensor(rng, (B, S, NQ, D), "float32")
    k, _ = random_tensor(rng, (B, S, NK, D), "float32")
    wq, wq64 = random_tensor(rng, (B, S, NQ, D), "float32")
    wk, wk64 = random_tensor(rng, (B, S, NK, D), "float32")
    layer = _layer(3, backend=backend)
    positions = ms.Tensor(POSITIONS)

    class Loss(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def construct(self, q, k):
            q_rot, k_rot = self.layer(q, k, positions)
            return (q_rot * wq).sum() + (k_rot * wk).sum()

    grad_q, grad_k = _run(exec_mode, ms.grad(Loss(), grad_position=(0, 1)), q, k)
    cos, sin = (to_float64(t) for t in _gathered(layer, POSITIONS))
    np.testing.assert_allclose(grad_q.asnumpy(), rotary_grad(3, wq64, cos, sin, *SLICE), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad_k.asnumpy(), rotary_grad(3, wk64, cos, sin, *SLICE), rtol=1e-5, atol=1e-5)


def test_second_order_gradients_in_a_graph():
    """grad of <grad sum(w * R q)^2, v> = 2 R^T (w * R v)-shaped, against the reference."""
    rng = np.random.default_rng(11)
    q, _ = random_tensor(rng, (B, S, NQ, D), "float32")
    w, w64 = random_tensor(rng, (B, S, NQ, D), "float32")
    layer = _layer(1)
    positions = ms.Tensor(POSITIONS)

    def squared(q):
        return (layer(q, None, positions) ** 2 * w).sum()

    def hvp(q):
        return (ms.grad(squared)(q) * w * 0.5).sum()

    got = _run("ms.jit", ms.grad(hvp), q)
    cos, sin = (to_float64(t) for t in _gathered(layer, POSITIONS))
    expected = 2 * rotary_grad(1, w64 * rotary_forward(1, w64 * 0.5, cos, sin, *SLICE), cos, sin, *SLICE)
    np.testing.assert_allclose(got.asnumpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("call, error, match", [
    (lambda layer, q, k: layer(q, k, np.array([0, 1, 2, 3, 4, CACHE])), ValueError,
     rf"position {CACHE} is outside the cos/sin cache \[0, {CACHE}\)"),
    (lambda layer, q, k: layer(q, k, np.array([0, 1, 2, -1, 4, 5])), ValueError, "position -1 is outside"),
    (lambda layer, q, k: layer(q, k, np.arange(S, dtype=np.float32)), TypeError, "positions must hold integers"),
    (lambda layer, q, k: layer(q, k, np.zeros((1, 1, S), np.int64)), ValueError, r"must be \[S\] or \[B, S\]"),
    (lambda layer, q, k: layer(q, k, np.arange(S - 1)), ValueError, "do not fit q"),
    (lambda layer, q, k: layer(q[..., :32], k, np.arange(S)), ValueError, r"q of shape .* head_dim=48"),
    (lambda layer, q, k: layer(q, k.astype(ms.float16), np.arange(S)), TypeError, "q and k must share a dtype"),
    (lambda layer, q, k: layer(q, k), TypeError, "positions are required"),
])
def test_bad_calls_are_refused_by_name_before_anything_is_written(call, error, match):
    rng = np.random.default_rng(13)
    q, _ = random_tensor(rng, (1, S, NQ, D), "float32")
    k, _ = random_tensor(rng, (1, S, NK, D), "float32")
    before = q.asnumpy().copy()
    with pytest.raises(error, match=match):
        call(_layer(0), q, k)
    np.testing.assert_array_equal(q.asnumpy(), before)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rotary_mode="quarter"), ValueError, "quarter, ChatGLM-6B"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=64), ValueError,
     "changes its frequencies with the sequence length"),
    (dict(cache_positions=0), ValueError, r"cache_positions=0 .* must be a positive integer"),
    (dict(cache_dtype=ms.int32), TypeError, "cache_dtype"),
])
def test_layers_that_cannot_be_built_are_refused_by_name(kwargs, error, match):
    arguments = dict(head_dim=D, partial_slice=SLICE, rotary_mode="half", cache_positions=CACHE)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        RotaryEmbedding(**arguments)


@pytest.mark.parametrize("family", FAMILIES)
def test_from_config_rotates_q_and_k_as_transformers_does(family):
    torch = pytest.importorskip("torch")
    model_type, config, module, rotary_class, apply_name, heads = transformers_family(family)
    positions = np.array([0, 1, 5, 17, 300, 4095])
    layer = RotaryEmbedding.from_config(config, cache_positions=4096)
    start, end = layer.partial_slice
    rng = np.random.default_rng(17)
    q = rng.uniform(-1, 1, (1, len(positions), heads, layer.head_dim)).astype(np.float32)
    k = rng.uniform(-1, 1, (1, len(positions), 1, layer.head_dim)).astype(np.float32)
    cos_hf, sin_hf = rotary_class(config)(torch.zeros(1), torch.tensor(positions[None]))
    part = (lambda t: t[..., start:end]) if model_type in ROTATED_PART_ONLY else (lambda t: t)
    q_hf, k_hf = getattr(module, apply_name)(torch.tensor(part(q)).transpose(1, 2),
                                             torch.tensor(part(k)).transpose(1, 2), cos_hf, sin_hf)
    q_rot, k_rot = layer(ms.Tensor(q), ms.Tensor(k), positions)
    for got, expected in ((q_rot, q_hf), (k_rot, k_hf)):
        np.testing.assert_allclose(part(got.asnumpy()), expected.transpose(1, 2).numpy(), atol=5e-4, rtol=0)
