"""RotaryEmbedding: q and k rotated in one call by the cache rows their positions pick, against the float64
reference on the gathered rows, against two PartialRotaryMul calls on gathered tables (bit for bit), in
decode and packed-sequence use, with gradients, in every execution mode and on both backends; and against
transformers' own layers when it is installed."""


import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, DTYPES, TOLERANCE, cycled_cases, pairs, random_tensor, raw_bits, to_float64
from reference import rotary_forward, rotary_grad
from test_rope_config import FAMILIES, MROPE, ROTATED_PART_ONLY, mrope_family, transformers_family

import ms_rotary
from ms_rotary import RotaryEmbedding
from tools.rope_families import MATCH, torch_in_float64

B, S, NQ, NK, D = 2, 6, 4, 2, 48
SLICE = (8, 40)
CACHE = 64
POSITIONS = np.array([[3, 4, 5, 6, 7, 8], [0, 1, 2, 0, 1, 63]])  # row 1: packed sequences restarting
EXEC_MODES = ["pynative", "ms.jit", "GRAPH_MODE"]


def _layer(mode, cache_dtype="float32", backend="aot", **kwargs):
    return RotaryEmbedding(D, SLICE, mode, rope_theta=500.0, cache_positions=CACHE, cache_dtype=DTYPES[cache_dtype],
                           backend=backend, **kwargs)


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


# Every dtype pair, mode and backend, each in one execution mode (cycling); the rest of the product: -m slow.
@pytest.mark.parametrize("dtype,cache_dtype,mode,backend,exec_mode",
                         cycled_cases([pairs(DTYPES, DTYPES), [0, 1, 3], BACKENDS], [EXEC_MODES]))
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


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
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


# M-RoPE: 16 frequencies in the slice of 32; time, height and width positions that differ per token
MROPE_SECTIONS = {"sections": ((4, 6, 6), False), "interleaved sections": ((6, 5, 5), True),
                  "h and w alternating": ((5, 5, 6), "hw"), "sections of lanes, 4 axes": ((2, 6, 4, 4), "lanes"),
                  "row and column alternating": ((8, 8), "alternate")}
MROPE_POSITIONS = np.stack([POSITIONS, (POSITIONS * 7 + 1) % CACHE, (POSITIONS * 3 + 5) % CACHE,
                            (POSITIONS * 5 + 2) % CACHE])  # [4, B, S]: the first 3 for three axes


def _check_against_tables(layer, mode, positions_forms, table_kwargs, dtype, exec_mode, seed):
    """The layer, on each form of its positions, equals PartialRotaryMul on rope_cos_sin's tables for them
    bit for bit and the float64 reference; its q gradient is the transposed rotation."""
    rng = np.random.default_rng(seed)
    q, q64 = random_tensor(rng, (B, S, NQ, D), dtype)
    k, k64 = random_tensor(rng, (B, S, NK, D), dtype)
    w, w64 = random_tensor(rng, (B, S, NQ, D), "float32")

    def loss(q, positions):
        return (layer(q, None, positions).astype(ms.float32) * w).sum()

    op = ms_rotary.PartialRotaryMul(mode, list(SLICE), backend=layer.backend)
    tol = TOLERANCE[dtype]
    for positions in positions_forms:
        q_rot, k_rot = _run(exec_mode, layer if exec_mode == "GRAPH_MODE" else layer.construct, q, k,
                            ms.Tensor(positions))
        cos, sin = ms_rotary.rope_cos_sin(positions, SLICE[1] - SLICE[0], mode, rope_theta=500.0, **table_kwargs)
        for got, t, t64 in ((q_rot, q, q64), (k_rot, k, k64)):
            np.testing.assert_array_equal(raw_bits(got), raw_bits(op(t, cos, sin)))
            expected = rotary_forward(mode, t64, to_float64(cos), to_float64(sin), *SLICE)
            np.testing.assert_allclose(to_float64(got), expected, rtol=tol, atol=tol)
        got = _run(exec_mode, ms.grad(loss), q, ms.Tensor(positions))
        expected = rotary_grad(mode, w64, to_float64(cos), to_float64(sin), *SLICE)
        np.testing.assert_allclose(to_float64(got), expected, rtol=4 * tol, atol=4 * tol)


@pytest.mark.parametrize("sections,mode,exec_mode,backend",
                         cycled_cases([MROPE_SECTIONS, [0, 1, 3], EXEC_MODES], [BACKENDS]))
def test_mrope_reads_each_lane_at_its_channels_position(sections, mode, backend, exec_mode):
    """[N, B, S] and [N, S] positions (time, height, width, ... differing per token)."""
    section, interleaved = MROPE_SECTIONS[sections]
    layer = _layer(mode, backend=backend, mrope_section=section, mrope_interleaved=interleaved)
    positions = MROPE_POSITIONS[:len(section)]
    _check_against_tables(layer, mode, (positions, positions[:, 0]),
                          dict(mrope_section=section, mrope_interleaved=interleaved), "float32", exec_mode, mode + 20)


QUARTER_POSITIONS = np.stack([POSITIONS, (POSITIONS * 5 + 2) % CACHE], -1)  # [B, S, 2]: token, block position


@pytest.mark.parametrize("dtype,exec_mode,backend", cycled_cases([["float32", "bfloat16"], EXEC_MODES], [BACKENDS]))
def test_quarter_mode_reads_each_half_at_its_own_position(dtype, backend, exec_mode):
    """ChatGLM-6B's 2D RoPE: positions [B, S, 2] and [S, 2] (token, block)."""
    _check_against_tables(_layer(2, backend=backend), 2, (QUARTER_POSITIONS, QUARTER_POSITIONS[0]), {}, dtype,
                          exec_mode, 43)


def _to_layout(t, layout):
    return {"BSND": t, "SBND": t.transpose(1, 0, 2, 3), "BNSD": t.transpose(0, 2, 1, 3)}[layout]


@pytest.mark.parametrize("mrope,layout,exec_mode,backend",
                         cycled_cases([[False, True], ["SBND", "BNSD"], EXEC_MODES], [BACKENDS]))
def test_sbnd_and_bnsd_equal_bsnd_transposed_with_gradients(mrope, layout, backend, exec_mode):
    rng = np.random.default_rng(23)
    q, _ = random_tensor(rng, (B, S, NQ, D), "bfloat16")
    k, _ = random_tensor(rng, (B, S, NK, D), "bfloat16")
    wq, _ = random_tensor(rng, (B, S, NQ, D), "float32")
    wk, _ = random_tensor(rng, (B, S, NK, D), "float32")
    extra = dict(mrope_section=(4, 6, 6)) if mrope else {}
    positions = ms.Tensor(MROPE_POSITIONS[:3] if mrope else POSITIONS)
    layers = {name: _layer(3, backend=backend, layout=name, **extra) for name in ("BSND", layout)}
    moved = {name: [ms.Tensor(_to_layout(t.float().asnumpy(), name)).astype(t.dtype) for t in (q, k, wq, wk)]
             for name in layers}

    class Loss(ms.nn.Cell):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def construct(self, q, k, wq, wk, positions):
            q_rot, k_rot = self.layer(q, k, positions)
            return (q_rot.astype(ms.float32) * wq).sum() + (k_rot.astype(ms.float32) * wk).sum()

    results = {}
    for name, layer in layers.items():
        q_l, k_l, wq_l, wk_l = moved[name]
        outs = _run(exec_mode, layer if exec_mode == "GRAPH_MODE" else layer.construct, q_l, k_l, positions)
        grads = _run(exec_mode, ms.grad(Loss(layer), grad_position=(0, 1)), q_l, k_l, wq_l, wk_l, positions)
        results[name] = [_to_layout(raw_bits(t), name) for t in (*outs, *grads)]
    for got, expected in zip(results[layout], results["BSND"]):
        np.testing.assert_array_equal(got, expected)


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
    (lambda layer, q, k: _layer(0, mrope_section=(4, 6, 6))(q, k, np.arange(S)), ValueError,
     r"must be \[3, S\] or \[3, B, S\] \(M-RoPE"),
    (lambda layer, q, k: _layer(0, mrope_section=(4, 6, 6))(q, k, np.zeros((2, S), np.int64)), ValueError,
     r"positions of shape \(2, 6\) must be \[3, S\]"),
    (lambda layer, q, k: _layer(0, mrope_section=(4, 6, 6))(q, k, np.full((3, S), CACHE)), ValueError,
     rf"position {CACHE} is outside"),
    (lambda layer, q, k: _layer(0, layout="BNSD")(q, None, np.arange(S)), ValueError,
     r"positions for B = 1, S = 6 do not fit q"),
    (lambda layer, q, k: _layer(2)(q, k, np.arange(S)), ValueError,
     r"must be \[S, 2\] or \[B, S, 2\] \(quarter mode: token and block position\)"),
    (lambda layer, q, k: _layer(2)(q, k, np.zeros((2, S), np.int64)), ValueError, r"positions of shape \(2, 6\)"),
    (lambda layer, q, k: _layer(0, layout="BNSD")(q, k, np.arange(NQ)), ValueError, r"must share B and S"),
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
    (dict(rotary_mode="quarter", mrope_section=(4, 4, 0)), ValueError, "does not combine with rotary_mode 2"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=64), ValueError,
     "computes each call's cos/sin rows from the sequence length .* leave cache_positions=64 out"),
    (dict(rotary_mode="quarter", rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=64,
          cache_positions=None), ValueError, "not quarter mode's two"),
    (dict(cache_positions=0), ValueError, r"cache_positions=0 .* must be a positive integer"),
    (dict(cache_dtype=ms.int32), TypeError, "cache_dtype"),
    (dict(layout="BSH"), ValueError, r"layout='BSH' must be one of \['BSND', 'SBND', 'BNSD'\]"),
    (dict(mrope_section=(4, 6, 5)), ValueError, r"mrope_section=\[4, 6, 5\] sums to 15"),
    (dict(mrope_section=(4, 6, 6), mrope_interleaved="hw"), ValueError, "its first two counts must be equal"),
    (dict(mrope_section=(4, 6, 6), mrope_interleaved="yes"), ValueError, r"mrope_interleaved='yes' must be one of"),
    (dict(mrope_section=(4, 4, 4, 2, 2), mrope_interleaved="lanes"), ValueError, "must be 3 to 4 non-negative"),
    (dict(mrope_section=(4, 4, 4, 2), mrope_interleaved="lanes"), ValueError,
     r"sums to 14; its lanes, twice that, must fill the rotary_dim = 32"),
    (dict(mrope_section=(4, 4, 4, 4)), ValueError, "must be three non-negative integers"),
])
def test_layers_that_cannot_be_built_are_refused_by_name(kwargs, error, match):
    arguments = dict(head_dim=D, partial_slice=SLICE, rotary_mode="half", cache_positions=CACHE)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        RotaryEmbedding(**arguments)


@pytest.fixture
def ascend_device(monkeypatch):
    """Layers built from here on see an Ascend device (they pick kernel/ascend's gathering ops); nothing
    Ascend runs: what is checked happens before a kernel would."""
    monkeypatch.setattr(ms_rotary.routes, "device_target", lambda: "Ascend")


@pytest.mark.parametrize("cache_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kwargs", [{}, dict(mrope_section=(4, 6, 6)),
                                    dict(mrope_section=(6, 5, 5), mrope_interleaved=True), dict(rotary_mode="quarter"),
                                    dict(mrope_section=(2, 6, 4, 4), mrope_interleaved="lanes")],
                         ids=["one channel", "M-RoPE", "interleaved", "quarter", "4 axes"])
def test_on_ascend_the_layer_uses_the_gathering_ops_with_lane_masks(ascend_device, kwargs, cache_dtype):
    """The ops kernel/ascend defines, and the lane masks that tell the kernel which position channel gives each
    cos/sin lane: the bits of exactly that lane's channel set (2 words a lane for an fp32 cache)."""
    arguments = dict(head_dim=D, partial_slice=SLICE, rotary_mode="half", cache_positions=CACHE,
                     cache_dtype=DTYPES[cache_dtype])
    arguments.update(kwargs)
    layer = RotaryEmbedding(**arguments)
    assert layer.backend == "ascend"
    for rotate, op_type in ((layer.rotate_q, "MsRotaryPartialRotaryMulPositions"),
                            (layer.rotate_q.backward.transpose, "MsRotaryPartialRotaryMulPositionsGrad"),
                            (layer.rotate_qk, "MsRotaryPartialRotaryMulPositionsQK"),
                            (layer.rotate_qk.backward.transpose, "MsRotaryPartialRotaryMulPositionsQKGrad")):
        assert rotate.kernel.prim.func == op_type
    cache = layer.rotate_q.call.cache
    masks = layer.rotate_q.kernel.lane_masks.asnumpy()
    words = 2 if cache_dtype == "float32" else 1
    assert masks.shape == (layer.channels, (SLICE[1] - SLICE[0]) * words) and set(np.unique(masks)) <= {0, -1}
    lanes = np.zeros(SLICE[1] - SLICE[0]) if cache.lane_channels is None else np.array(cache.lane_channels)
    np.testing.assert_array_equal(np.argmax(masks != 0, axis=0), np.repeat(lanes, words))
    np.testing.assert_array_equal((masks != 0).sum(axis=0), 1)


@pytest.mark.parametrize("bad", [-1, CACHE])
def test_on_ascend_a_position_outside_the_cache_is_refused_on_the_host(ascend_device, bad):
    layer = _layer("half", backend=None)
    q = ms.Tensor(np.ones((1, 3, NQ, D), np.float32))
    with pytest.raises(ValueError, match=f"position {bad} is outside the cos/sin cache \\[0, {CACHE}\\)"):
        layer(q, None, ms.Tensor([0, bad, 1]))
    np.testing.assert_array_equal(q.asnumpy(), 1)


@pytest.mark.parametrize("exec_mode, bad", [("pynative", -1), ("GRAPH_MODE", CACHE)])
def test_the_ascend_graph_refuses_positions_outside_the_cache_by_name(exec_mode, bad):
    """The check an Ascend kernel gets before it runs (its kernel clamps rather than raise): positions pass
    through unchanged, and one outside the cache is ms_rotary's error naming it (here on CPU)."""
    from ms_rotary.targets.ascend import PositionsInCache
    inside, cos = ms.Tensor(POSITIONS[None]), ms.Tensor(np.zeros((1, CACHE, 1, 2), np.float32))
    np.testing.assert_array_equal(_run(exec_mode, PositionsInCache(), inside, cos).asnumpy(), POSITIONS[None])
    with pytest.raises(ValueError, match=f"position {bad} is outside the cos/sin cache \\[0, {CACHE}\\)"):
        _run(exec_mode, PositionsInCache(), ms.Tensor([[[0, bad]]]), cos).asnumpy()


@pytest.mark.parametrize("exec_mode", ["pynative", "GRAPH_MODE"])
@pytest.mark.parametrize("family", FAMILIES)
def test_from_config_rotates_q_and_k_as_transformers_does(family, exec_mode):
    """Values, and the gradients of sum(wq * q_rot) + sum(wk * k_rot) for q and k, against transformers' rotary
    class and apply function under torch autograd (Phi, DeepSeek: on the rotated part of each head)."""
    torch = pytest.importorskip("torch")
    model_type, config, module, rotary_class, apply_name, heads = transformers_family(family)
    positions = np.array([0, 1, 5, 17, 300, 4095])
    layer = RotaryEmbedding.from_config(config, cache_positions=4096)
    start, end = layer.partial_slice
    rng = np.random.default_rng(17)
    q, k, wq, wk = (rng.uniform(-1, 1, (1, len(positions), n, layer.head_dim)).astype(np.float32)
                    for n in (heads, 1, heads, 1))
    part = (lambda t: t[..., start:end]) if model_type in ROTATED_PART_ONLY else (lambda t: t)
    with torch_in_float64():  # transformers' own code, its fp32 casts made float64
        cos_hf, sin_hf = rotary_class(config)(torch.zeros(1), torch.tensor(positions[None]))
        q_t, k_t = (torch.tensor(part(t)).transpose(1, 2).requires_grad_() for t in (q, k))
        q_hf, k_hf = getattr(module, apply_name)(q_t, k_t, cos_hf, sin_hf)
        (q_hf * torch.tensor(part(wq)).transpose(1, 2)).sum().backward(retain_graph=True)
        (k_hf * torch.tensor(part(wk)).transpose(1, 2)).sum().backward()

    class Loss(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def construct(self, q, k, positions):
            q_rot, k_rot = self.layer(q, k, positions)
            return (q_rot * ms.Tensor(wq)).sum() + (k_rot * ms.Tensor(wk)).sum()

    inputs = (ms.Tensor(q), ms.Tensor(k), ms.Tensor(positions))
    q_rot, k_rot = _run(exec_mode, layer if exec_mode == "GRAPH_MODE" else layer.construct, *inputs)
    grads = _run(exec_mode, ms.grad(Loss(), grad_position=(0, 1)), *inputs)
    for got, expected in ((q_rot, q_hf), (k_rot, k_hf), (grads[0], q_t.grad), (grads[1], k_t.grad)):
        expected = expected.detach().transpose(1, 2).numpy()
        np.testing.assert_allclose(part(got.asnumpy()), expected, atol=MATCH * np.abs(expected).max(), rtol=0)


@pytest.mark.parametrize("family", MROPE)
def test_from_config_rotates_mrope_q_and_k_as_transformers_does(family):
    """Qwen2-VL and Qwen3-VL: the layer from the config, [3, B, S] positions that differ per channel, against
    transformers' own rotary class and apply function."""
    torch = pytest.importorskip("torch")
    config, config_json, module, rotary_class, section = mrope_family(family, kv_heads=1)
    layer = RotaryEmbedding.from_config(config_json, cache_positions=3000)
    rng = np.random.default_rng(29)
    positions = rng.integers(0, 3000, (len(section), 1, 9))
    q = rng.uniform(-1, 1, (1, 9, 2, 32)).astype(np.float32)
    k = rng.uniform(-1, 1, (1, 9, 1, 32)).astype(np.float32)
    with torch_in_float64():
        cos_hf, sin_hf = rotary_class(config)(torch.zeros(1), torch.tensor(positions))
        q_hf, k_hf = module.apply_rotary_pos_emb(torch.tensor(q).transpose(1, 2), torch.tensor(k).transpose(1, 2),
                                                 cos_hf, sin_hf)
    q_rot, k_rot = layer(ms.Tensor(q), ms.Tensor(k), positions)
    for got, expected in ((q_rot, q_hf), (k_rot, k_hf)):
        expected = expected.transpose(1, 2).numpy()
        np.testing.assert_allclose(got.asnumpy(), expected, atol=MATCH * np.abs(expected).max(), rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_inplace_writes_q_and_k_as_the_out_of_place_layer_computes_them(dtype, backend):
    """Eagerly (nothing recording): the same tensors come back, holding the out-of-place result bit for bit,
    their version counters moved; with k=None only q is written."""
    rng = np.random.default_rng(31)
    q, _ = random_tensor(rng, (B, S, NQ, D), dtype)
    k, _ = random_tensor(rng, (B, S, NK, D), dtype)
    expected = _layer(3, backend=backend)(q, k, POSITIONS)
    layer = _layer(3, backend=backend, inplace=True)
    versions = q._version, k._version
    q_out, k_out = layer(q, k, POSITIONS)
    assert q_out is q and k_out is k
    assert q._version > versions[0] and k._version > versions[1]
    for got, want in zip((q, k), expected):
        np.testing.assert_array_equal(raw_bits(got), raw_bits(want))
    k_before = raw_bits(k).copy()
    assert layer(q, None, POSITIONS) is q
    np.testing.assert_array_equal(raw_bits(k), k_before)


@pytest.mark.parametrize("exec_mode", ["ms.jit", "GRAPH_MODE"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_inplace_in_a_graph_writes_q_and_k_with_the_out_of_place_gradients(dtype, exec_mode):
    """Traced: q and k computed in the graph are rotated in place by InplaceCopy; value and gradients equal
    the out-of-place layer's, the graph reading q and k themselves after the call. bf16 meets MindSpore 2.10's
    missing bf16 TensorMove (an error, as with its own Tensor.copy_ and the in-place ops, never numbers)."""
    rng = np.random.default_rng(37)
    q, _ = random_tensor(rng, (B, S, NQ, D), dtype)
    k, _ = random_tensor(rng, (B, S, NK, D), dtype)
    wq, _ = random_tensor(rng, (B, S, NQ, D), "float32")
    wk, _ = random_tensor(rng, (B, S, NK, D), "float32")
    positions = ms.Tensor(POSITIONS)

    class Loss(ms.nn.Cell):
        def __init__(self, inplace):
            super().__init__()
            self.layer, self.read_written = _layer(1, inplace=inplace), inplace

        def construct(self, q, k):
            q2, k2 = q * 2, k * 2
            q_rot, k_rot = self.layer(q2, k2, positions)
            if self.read_written:  # q2 and k2 themselves (self.layer.inplace here: MindSpore loses the write)
                q_rot, k_rot = q2, k2
            return (q_rot.astype(ms.float32) * wq).sum() + (k_rot.astype(ms.float32) * wk).sum()

    results = []
    for inplace in (True, False):
        loss = Loss(inplace)
        if inplace and dtype == "bfloat16":
            with pytest.raises(TypeError, match=r"Select CPU operator\[TensorMove\] fail"):
                _run(exec_mode, loss, q, k)
            return
        grads = _run(exec_mode, ms.grad(loss, grad_position=(0, 1)), q, k)
        results.append([raw_bits(t.reshape(-1)) for t in (_run(exec_mode, loss, q, k), *grads)])
    for got, expected in zip(*results):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("call, match", [
    (lambda layer, q, k: ms.grad(lambda q: layer(q, None, np.arange(S)).sum())(q),
     "cannot rotate q in place while PyNative autograd records: q is a leaf"),
    (lambda layer, q, k: layer(q.transpose(0, 2, 1, 3).transpose(0, 2, 1, 3)[:, :, :2], None, np.arange(S)),
     "q must be contiguous"),
    (lambda layer, q, k: layer(q, q, np.arange(S)), "k shares memory with q"),
])
def test_inplace_refusals_write_nothing(call, match):
    rng = np.random.default_rng(41)
    q, _ = random_tensor(rng, (1, S, NQ, D), "float32")
    k, _ = random_tensor(rng, (1, S, NQ, D), "float32")
    before = q.asnumpy().copy()
    with pytest.raises(ValueError, match=match):
        call(_layer(0, inplace=True), q, k)
    np.testing.assert_array_equal(q.asnumpy(), before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_on_a_contiguous_view_writes_only_its_part_of_the_base(backend):
    rng = np.random.default_rng(47)
    base, _ = random_tensor(rng, (B, S, NQ, D), "float32")
    before = base.asnumpy().copy()
    expected = _layer(0, backend=backend)(ms.Tensor(before[1:2]), None, np.arange(S)).asnumpy()
    view = base[1:2]
    assert view.is_contiguous() and view.data_ptr() != base.data_ptr()
    _layer(0, backend=backend, inplace=True)(view, None, np.arange(S))
    np.testing.assert_array_equal(base.asnumpy()[0], before[0])
    np.testing.assert_array_equal(base.asnumpy()[1:2], expected)


def test_a_growing_cache_serves_positions_past_its_end_eagerly_and_keeps_its_rows():
    """grow_cache=True: a call past the cache rebuilds it (at least doubling) before it rotates, in PyNative
    and from a top-level GRAPH_MODE call; the rows it had stay bit for bit; extend_cache does it by hand."""
    rng = np.random.default_rng(4)
    q, _ = random_tensor(rng, (1, 2, NQ, D), "float32")
    layer, whole = _layer(0, grow_cache=True), RotaryEmbedding(D, SLICE, 0, rope_theta=500.0, cache_positions=1000)
    before = raw_bits(layer.cos_cache).copy()
    for exec_mode, positions, rows in (("pynative", [[1, 100]], 128), ("GRAPH_MODE", [[1, 300]], 301)):
        got = _run(exec_mode, layer, q, None, ms.Tensor(positions))
        assert layer.cos_cache.shape == (1, rows, 1, 32)
        np.testing.assert_array_equal(raw_bits(got), raw_bits(whole(q, None, np.array(positions))))
    np.testing.assert_array_equal(raw_bits(layer.cos_cache)[:, :CACHE], before)
    layer.extend_cache(1000)
    np.testing.assert_array_equal(raw_bits(layer.sin_cache), raw_bits(whole.sin_cache))
    with pytest.raises(ValueError, match=r"extend_cache\(cache_positions=10\) must be an integer of at least"):
        layer.extend_cache(10)
    with pytest.raises(ValueError, match=r"position 1099511627776 is outside the cos/sin cache \[0, 1000\)"):
        layer(q, None, np.array([[0, 1 << 40]]))  # a stray huge position is refused, not a huge cache built
    assert layer.cos_cache.shape[1] == 1000
    layer.cos_cache.requires_grad = True
    with pytest.raises(ValueError, match="a trainable cache keeps its 1000 positions"):
        layer.extend_cache(2000)


@pytest.mark.parametrize("scaling", [None, {"rope_type": "dynamic", "factor": 2.0}])
@pytest.mark.parametrize("exec_mode", ["pynative", "GRAPH_MODE"])
def test_a_transposed_layer_turns_pairs_by_minus_the_angle(scaling, exec_mode):
    """transposed=True (NanoChat) is the plain layer's inverse, R(-angle) = R(angle)^T, from a cache and from
    rows computed per call; its own inverse undoes it."""
    kwargs = dict(rope_theta=100.0, rope_scaling=scaling, max_position_embeddings=8)
    if scaling is None:
        kwargs["cache_positions"] = 64
    transposed = RotaryEmbedding(16, None, "half", transposed=True, **kwargs)
    plain = RotaryEmbedding(16, None, "half", **kwargs)
    rng = np.random.default_rng(9)
    q, k = (ms.Tensor(rng.uniform(-1, 1, (1, 6, n, 16)).astype(np.float32)) for n in (2, 1))
    positions = ms.Tensor(np.array([0, 3, 9, 20, 21, 40]))
    got = _run(exec_mode, transposed if exec_mode == "GRAPH_MODE" else transposed.construct, q, k, positions)
    want = plain.inverse(q, k, positions)
    back = transposed.inverse(*got, positions)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=1e-6)
    for a, b in zip(back, (q, k)):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=1e-6)
