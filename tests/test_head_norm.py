"""The attention prologue's per-head q/k RMSNorm in the layer's pass (issue #37): RotaryEmbedding(qk_norm_eps=...)
normalises each head over its whole width and rotates its slice in one kernel pass, forward and backward.
Checked against a float64 statement written here, finite differences, autograd of the same network composed of
MindSpore ops, Hugging Face transformers' own Qwen3 and Gemma-3 modules, in PyNative, ms.jit and GRAPH_MODE
inside a user's own Cell, on both backends."""
import mindspore as ms
import numpy as np
import pytest
from conftest import (
    BACKENDS,
    DTYPES,
    NormLayerCell,
    cycled_cases,
    kernel_bits,
    kernel_float32,
    random_tensor,
    raw_bits,
    to_float64,
)
from mindspore import nn, ops
from reference import rotary_forward, rotary_grad

import ms_rotary
from ms_rotary import RotaryEmbedding, library

B, S, NQ, NK, D = 2, 5, 3, 2, 32
CACHE = 16
EPS = 1e-6
EXEC_MODES = ["pynative", "ms.jit", "GRAPH_MODE"]
POSITIONS = np.array([[0, 1, 2, 9, 4], [15, 3, 3, 0, 7]])
SLICES = {0: (0, 32), 1: (8, 24), 2: (0, 16), 3: (16, 32)}  # by mode: whole head, middle, head, tail
TOLERANCE = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


class _LossCell(nn.Cell):
    """sum(q_rot * gq + k_rot * gk): the gradient reaching the layer's outputs is (gq, gk)."""

    def __init__(self, layer, gq, gk):
        super().__init__()
        self.layer, self.gq, self.gk = layer, gq, gk

    def construct(self, q, k, positions, q_weight, k_weight):
        q_rot, k_rot = self.layer(q, k, positions, q_weight, k_weight)
        return (q_rot.astype(ms.float32) * self.gq).sum() + (k_rot.astype(ms.float32) * self.gk).sum()


def _run(exec_mode, cell, *args, grad=False):
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        fn = ms.grad(cell, grad_position=(0, 1, 3, 4)) if grad else cell
        if exec_mode == "ms.jit":
            return ms.jit(fn)(*args) if grad else ms.jit(cell.construct)(*args)
        return fn(*args)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def _layer(mode, backend, offset=0.0, cache_dtype=ms.float32, **kwargs):
    layer = RotaryEmbedding(D, SLICES[mode], mode, rope_theta=100.0, cache_positions=CACHE, backend=backend,
                            cache_dtype=cache_dtype, qk_norm_eps=EPS, qk_norm_offset=offset, **kwargs)
    # cos/sin whose paired lanes differ (a real cache's pairs are equal): a swapped lane would show
    rng = np.random.default_rng(mode + 7)
    length = SLICES[mode][1] - SLICES[mode][0]
    for cache in (layer.cos_cache, layer.sin_cache):
        cache.set_data(ms.Tensor(rng.uniform(-1, 1, (1, CACHE, 1, length)).astype(np.float32), cache.dtype))
    return layer


def _norm64(x, w, offset):
    """RMSNorm over the last axis in float64: x / sqrt(mean(x^2) + eps) * (offset + w)."""
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * (offset + w)


def _rows(layer, positions, channels=None):
    """The float64 cache rows each token reads, [B, S, 1, L] (M-RoPE: each lane at its channel's position)."""
    cos, sin = (to_float64(c)[0, :, 0] for c in (layer.cos_cache, layer.sin_cache))
    if channels is None:
        return cos[positions][:, :, None], sin[positions][:, :, None]
    lanes = np.arange(cos.shape[-1])
    return tuple(np.moveaxis(table[positions[channels], lanes[:, None, None]], 0, -1)[:, :, None]
                 for table in (cos, sin))


def _forward64(mode, t64, w64, offset, rows):
    return rotary_forward(mode, _norm64(t64, w64, offset), *rows, *SLICES[mode])


def _backward64(mode, t64, w64, offset, rows, g):
    """(dx, dw) in float64: d = R^T g at the norm's output, then through x / rms(x) * (offset + w)."""
    d = rotary_grad(mode, g, *rows, *SLICES[mode])
    r = 1 / np.sqrt((t64 * t64).mean(-1, keepdims=True) + EPS)
    xhat, gd = t64 * r, d * (offset + w64)
    dx = r * (gd - xhat * (gd * xhat).mean(-1, keepdims=True))
    return dx, (d * xhat).reshape(-1, D).sum(0)


def _inputs(rng, dtype, weight_dtype):
    q, q64 = random_tensor(rng, (B, S, NQ, D), dtype, -2, 2)
    k, k64 = random_tensor(rng, (B, S, NK, D), dtype, -2, 2)
    wq, wq64 = random_tensor(rng, (D,), weight_dtype, 0.5, 1.5)
    wk, wk64 = random_tensor(rng, (D,), weight_dtype, -1.5, 1.5)
    return (q, k, wq, wk), (q64, k64, wq64, wk64)


def _close(got, want, tolerance, what):
    got = to_float64(got)
    scale = max(1.0, np.abs(want).max())
    assert np.abs(got - want).max() <= tolerance * scale, (what, np.abs(got - want).max(), scale)


# Every q dtype and mode, each with one cache dtype on one backend in one execution mode (all three cycling);
# the rest: -m slow.
@pytest.mark.parametrize("dtype,mode,cache_dtype,backend,exec_mode",
                         cycled_cases([list(DTYPES), [0, 1, 2, 3]], [["float32", "bfloat16"], BACKENDS, EXEC_MODES]))
def test_values_and_gradients_match_the_float64_statement(dtype, mode, cache_dtype, backend, exec_mode):
    rng = np.random.default_rng(mode)
    offset = float(mode % 2)  # Gemma's (1 + weight) on half the cases
    weight_dtype = {"float32": "bfloat16", "float16": "float32", "bfloat16": "bfloat16"}[dtype]
    layer = _layer(mode, backend, offset, DTYPES[cache_dtype])
    (q, k, wq, wk), (q64, k64, wq64, wk64) = _inputs(rng, dtype, weight_dtype)
    if mode == 2:  # quarter (ChatGLM-6B): each token's position and block position; the slice's halves read each
        given = np.stack([POSITIONS, POSITIONS % 4], -1)
        half = (SLICES[2][1] - SLICES[2][0]) // 2
        rows = _rows(layer, np.moveaxis(given, -1, 0), np.repeat([0, 1], half))
    else:
        given = POSITIONS
        rows = _rows(layer, POSITIONS)
    positions = ms.Tensor(given)
    q_rot, k_rot = _run(exec_mode, NormLayerCell(layer), q, k, positions, wq, wk)
    tolerance = TOLERANCE[dtype]
    _close(q_rot, _forward64(mode, q64, wq64, offset, rows), tolerance, "q")
    _close(k_rot, _forward64(mode, k64, wk64, offset, rows), tolerance, "k")
    assert q_rot.dtype == q.dtype and k_rot.dtype == k.dtype

    gq, gk = rng.uniform(-1, 1, (B, S, NQ, D)), rng.uniform(-1, 1, (B, S, NK, D))
    cell = _LossCell(layer, ms.Tensor(gq, ms.float32), ms.Tensor(gk, ms.float32))
    dq, dk, dwq, dwk = _run(exec_mode, cell, q, k, positions, wq, wk, grad=True)
    want_dq, want_dwq = _backward64(mode, q64, wq64, offset, rows, gq.astype(np.float32).astype(np.float64))
    want_dk, want_dwk = _backward64(mode, k64, wk64, offset, rows, gk.astype(np.float32).astype(np.float64))
    grad_tolerance = max(tolerance, TOLERANCE[weight_dtype])
    for got, want, name in ((dq, want_dq, "dq"), (dk, want_dk, "dk"), (dwq, want_dwq, "dwq"),
                            (dwk, want_dwk, "dwk")):
        _close(got, want, grad_tolerance, name)
    assert (dq.dtype, dk.dtype, dwq.dtype, dwk.dtype) == (q.dtype, k.dtype, wq.dtype, wk.dtype)


def test_the_float64_statement_matches_finite_differences():
    """The backward written above, checked by central differences of the float64 forward."""
    rng = np.random.default_rng(3)
    mode, offset = 1, 1.0
    x, w = rng.uniform(-2, 2, (1, 2, 1, D)), rng.uniform(0.5, 1.5, D)
    cos, sin = rng.uniform(-1, 1, (1, 2, 1, 16)), rng.uniform(-1, 1, (1, 2, 1, 16))
    g = rng.uniform(-1, 1, x.shape)

    def loss(x, w):
        return (_forward64(mode, x, w, offset, (cos, sin)) * g).sum()

    dx, dw = _backward64(mode, x, w, offset, (cos, sin), g)
    h = 1e-6
    for index in [(0, 0, 0, 0), (0, 1, 0, 9), (0, 1, 0, 31)]:
        step = np.zeros_like(x)
        step[index] = h
        assert abs((loss(x + step, w) - loss(x - step, w)) / (2 * h) - dx[index]) < 1e-7
    for lane in (0, 12, 31):
        step = np.zeros_like(w)
        step[lane] = h
        assert abs((loss(x, w + step) - loss(x, w - step)) / (2 * h) - dw[lane]) < 1e-7


def _composed(layer_plain, offset):
    """The same network written with MindSpore ops: RMSNorm in fp32, then the layer without a norm."""

    def norm(x, w):
        x32 = x.astype(ms.float32)
        return (x32 * ops.rsqrt((x32 * x32).mean(-1, keep_dims=True) + EPS) * (w.astype(ms.float32) + offset))

    class Composed(nn.Cell):
        def __init__(self):
            super().__init__()
            self.layer = layer_plain

        def construct(self, q, k, positions, wq, wk):
            return self.layer(norm(q, wq), norm(k, wk), positions)

    return Composed()


@pytest.mark.parametrize("layout,mrope,exec_mode", [("SBND", False, "GRAPH_MODE"), ("BNSD", False, "pynative"),
                                                    ("BSND", True, "ms.jit"), ("BSND", True, "pynative")])
def test_layouts_mrope_and_a_trainable_cache_match_the_composed_network(layout, mrope, exec_mode):
    """Layouts and M-RoPE read each token's rows as the plain layer does; a trainable cache gets the true
    gradient through the norm (cos/sin multiply the normalised heads): against autograd of the composed network."""
    mode, offset = 0, 1.0
    kwargs = dict(layout=layout, mrope_section=[4, 6, 6] if mrope else None)
    normed = RotaryEmbedding(D, None, mode, rope_theta=100.0, cache_positions=CACHE, qk_norm_eps=EPS,
                             qk_norm_offset=offset, **kwargs)
    plain = RotaryEmbedding(D, None, mode, rope_theta=100.0, cache_positions=CACHE, **kwargs)
    rng = np.random.default_rng(5)
    for layer in (normed, plain):
        for cache, seed in ((layer.cos_cache, 1), (layer.sin_cache, 2)):
            cache.set_data(ms.Tensor(np.random.default_rng(seed).uniform(-1, 1, (1, CACHE, 1, D)), ms.float32))
            cache.requires_grad = True
    shape = {"BSND": (B, S, "N", D), "SBND": (S, B, "N", D), "BNSD": (B, "N", S, D)}[layout]
    q = ms.Tensor(rng.uniform(-2, 2, [NQ if v == "N" else v for v in shape]).astype(np.float32))
    k = ms.Tensor(rng.uniform(-2, 2, [NK if v == "N" else v for v in shape]).astype(np.float32))
    wq, wk = (ms.Tensor(rng.uniform(0.5, 1.5, D).astype(np.float32)) for _ in range(2))
    positions = ms.Tensor(np.stack([POSITIONS, POSITIONS[::-1], (POSITIONS + 3) % CACHE]) if mrope else POSITIONS)

    def loss_of(cell):
        def loss(q, k, positions, wq, wk):
            q_rot, k_rot = cell(q, k, positions, wq, wk)
            return (q_rot * q_rot).sum() + (k_rot * ops.sin(k_rot)).sum()
        return loss

    results = []
    for layer, cell in ((normed, NormLayerCell(normed)), (plain, _composed(plain, offset))):
        fn = ms.grad(loss_of(cell), grad_position=(0, 1, 3, 4), weights=[layer.cos_cache, layer.sin_cache])
        ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
        try:
            results.append((ms.jit(fn) if exec_mode == "ms.jit" else fn)(q, k, positions, wq, wk))
        finally:
            ms.set_context(mode=ms.PYNATIVE_MODE)
    (inputs, caches), (want_inputs, want_caches) = results
    for got, want in zip((*inputs, *caches), (*want_inputs, *want_caches)):
        want = want.asnumpy()
        np.testing.assert_allclose(got.asnumpy(), want, atol=2e-4 * max(1, np.abs(want).max()), rtol=1e-4)
    assert np.abs(caches[0].asnumpy()).max() > 0.1  # the cache is trained, not handed zeros


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decode_loop_equals_the_full_sequence_bit_for_bit(backend):
    """Prefill of the first tokens, then one token a step at its position inside one compiled network: each step's
    q and k rows are the full sequence's, bit for bit (each row normalised and rotated alone)."""
    layer = _layer(1, backend, 1.0)
    rng = np.random.default_rng(4)
    (q, k, wq, wk), _ = _inputs(rng, "bfloat16", "float32")
    full_q, full_k = layer(q, k, ms.Tensor(POSITIONS), wq, wk)
    cell = NormLayerCell(layer)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        steps = [cell(q[:, :2], k[:, :2], ms.Tensor(POSITIONS[:, :2]), wq, wk)]
        steps += [cell(q[:, s:s + 1], k[:, s:s + 1], ms.Tensor(POSITIONS[:, s:s + 1]), wq, wk) for s in range(2, S)]
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    for got, want in ((ops.cat([q_rot for q_rot, _ in steps], 1), full_q),
                      (ops.cat([k_rot for _, k_rot in steps], 1), full_k)):
        assert np.array_equal(raw_bits(got), raw_bits(want))


@pytest.mark.parametrize("exec_mode", ["pynative", "GRAPH_MODE"])
def test_dynamic_rope_and_llama4_scaling_compose_with_the_norm(exec_mode):
    """Rows computed per call (dynamic NTK) and Llama-4's q scaling around the fused call: the composed network's
    numbers."""
    scaling = {"rope_type": "dynamic", "factor": 2.0}
    normed = RotaryEmbedding(D, None, 0, rope_theta=100.0, rope_scaling=scaling, max_position_embeddings=8,
                             qk_norm_eps=EPS)
    plain = RotaryEmbedding(D, None, 0, rope_theta=100.0, rope_scaling=scaling, max_position_embeddings=8)
    (q, k, wq, wk), _ = _inputs(np.random.default_rng(6), "float32", "float32")
    positions = ms.Tensor(POSITIONS + 20)  # past the original maximum: the frequencies follow the length
    got = _run(exec_mode, NormLayerCell(normed), q, k, positions, wq, wk)
    want = _run(exec_mode, _composed(plain, 0.0), q, k, positions, wq, wk)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=2e-5)
    scaled = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                  original_max_position_embeddings=4)
    normed, plain = (RotaryEmbedding(D, None, 0, rope_theta=100.0, rope_scaling=scaled, cache_positions=CACHE * 2,
                                     llama_4_scaling_beta=0.1, **extra) for extra in ({"qk_norm_eps": EPS}, {}))
    positions = ms.Tensor(POSITIONS)  # 0..15, the scale stepping every 4 (original_max_position_embeddings)
    got = _run(exec_mode, NormLayerCell(normed), q, k, positions, wq, wk)
    want = _run(exec_mode, _composed(plain, 0.0), q, k, positions, wq, wk)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=2e-5)


@pytest.mark.parametrize("exec_mode,backend", cycled_cases([EXEC_MODES], [BACKENDS]))
def test_in_place_writes_the_out_of_place_values_and_gradients(exec_mode, backend):
    """inplace=True with the norm: q and k themselves hold the out-of-place call's values bit for bit, and the
    gradients through the in-place call (PyNative: the rebinding; graphs: MindSpore's InplaceCopy) are the
    out-of-place call's."""
    out_of_place, in_place = (_layer(3, backend, 1.0, inplace=flag) for flag in (False, True))
    rng = np.random.default_rng(8)
    (q, k, wq, wk), _ = _inputs(rng, "bfloat16", "float32")
    positions = ms.Tensor(POSITIONS)
    want = out_of_place(q, k, positions, wq, wk)
    q_written, k_written = q.copy(), k.copy()
    got = _run(exec_mode, NormLayerCell(in_place), q_written, k_written, positions, wq, wk)
    for written, result, expected in ((q_written, got[0], want[0]), (k_written, got[1], want[1])):
        assert np.array_equal(raw_bits(written), raw_bits(expected))
        assert np.array_equal(raw_bits(result), raw_bits(expected))

    gq, gk = (ms.Tensor(rng.uniform(-1, 1, shape).astype(np.float32)) for shape in ((B, S, NQ, D), (B, S, NK, D)))

    class Through(nn.Cell):
        """The in-place call on copies the network makes (a leaf that requires grad is never written)."""

        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def construct(self, q, k, positions, wq, wk):
            q_rot, k_rot = self.layer(q * 1, k * 1, positions, wq, wk)
            return (q_rot.astype(ms.float32) * gq).sum() + (k_rot.astype(ms.float32) * gk).sum()

    grads = [_run(exec_mode, Through(layer), q, k, positions, wq, wk, grad=True) for layer in (in_place, out_of_place)]
    for a, b in zip(*grads):
        assert np.array_equal(raw_bits(a), raw_bits(b))


@pytest.mark.parametrize("exec_mode", ["GRAPH_MODE", "pynative"])
def test_in_place_refuses_views_and_aliased_weights_before_any_write(exec_mode):
    """A slice of a larger q in a graph (MindSpore 2.10 would scramble the base): the write guard's refusal; a
    weight sharing memory with the q written in place (the kernel would read it after writing q): refused by
    name. The caller's tensors bit for bit as they were."""
    layer = _layer(0, "aot", inplace=True)
    rng = np.random.default_rng(3)
    (_, k, wq, wk), _ = _inputs(rng, "float32", "float32")
    base = ms.Tensor(rng.uniform(-1, 1, (4, S, NQ, D)).astype(np.float32))
    before = raw_bits(base).copy()
    if exec_mode == "GRAPH_MODE":
        with pytest.raises(RuntimeError, match="cannot write q in place in this graph: q is a view"):
            _run(exec_mode, NormLayerCell(layer), base[1:3], k, ms.Tensor(POSITIONS), wq, wk)[0].asnumpy()
    else:
        q = base[1:3].contiguous()
        q_before = raw_bits(q).copy()
        flat = q.reshape(-1)
        with pytest.raises(ValueError, match="k_norm_weight shares memory with q"):
            layer(q, k, ms.Tensor(POSITIONS), wq, flat[D:2 * D])
        assert np.array_equal(raw_bits(q), q_before)
    assert np.array_equal(raw_bits(base), before)


@pytest.mark.parametrize("bad,exec_mode", cycled_cases([["wide q weight", "integer k weight", "position 99"]],
                                                        [EXEC_MODES]))
def test_in_place_refusals_in_the_users_cell_leave_q_and_k_as_they_were(bad, exec_mode):
    """inplace=True with the norm: a bad weight (at compile time in graphs) or a position outside the cache (while
    the graph runs) is ms_rotary's error, and q and k are bit for bit as they were."""
    layer = _layer(0, "aot", inplace=True)
    (q, k, wq, wk), _ = _inputs(np.random.default_rng(12), "float32", "float32")
    wq = ms.Tensor(np.ones(2 * D, np.float32)) if bad == "wide q weight" else wq
    wk = ms.Tensor(np.ones(D, np.int32)) if bad == "integer k weight" else wk
    positions = np.array(POSITIONS)
    positions[1, 2] = 99 if bad == "position 99" else positions[1, 2]
    before = [raw_bits(t).copy() for t in (q, k)]
    match = {"wide q weight": r"q_norm_weight of shape \(64,\)", "integer k weight": "k_norm_weight has dtype int32",
             "position 99": r"position 99 is outside the cos/sin cache \[0, 16\)"}[bad]
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        _run(exec_mode, NormLayerCell(layer), q, k, ms.Tensor(positions), wq, wk)[0].asnumpy()
    assert all(np.array_equal(raw_bits(t), b) for t, b in zip((q, k), before))


def test_each_backend_and_thread_count_give_the_same_bits():
    """The compiled kernel and the numpy kernel agree bit for bit on values and dx (the same fp32 operations in
    the same order, the sums over a head in one fixed order); the weights' gradients, summed in double, within an
    ulp; the compiled kernel's do not depend on its thread count."""
    rng = np.random.default_rng(11)
    shape, positions = (4, 300, 3, 96), rng.integers(0, CACHE, (1, 4, 300))
    for dtype, mode in (("float32", 0), ("bfloat16", 3), ("float16", 1)):
        start, end = (16, 80)
        x = ms.Tensor(rng.uniform(-3, 3, shape).astype(np.float32), DTYPES[dtype])
        dy = ms.Tensor(rng.uniform(-1, 1, shape).astype(np.float32), DTYPES[dtype])
        weight = ms.Tensor(rng.uniform(-1, 1, 96).astype(np.float32), ms.bfloat16)
        cos, sin = (ms.Tensor(rng.uniform(-1, 1, (1, CACHE, 1, 64)).astype(np.float32)) for _ in range(2))
        results = {}
        for backend in BACKENDS:
            call = ms_rotary.call.RotaryCall(mode, (start, end), False, False, "q",
                                             ms_rotary.call.CacheRead(96), ms_rotary.call.HeadNorm(EPS, 1.0))
            kernel = ms_rotary.targets.KERNELS[backend](call, "CPU")
            out = kernel(x, cos, sin, positions, weight)
            results[backend] = (raw_bits(out), *kernel.norm_grads_now(dy, x, cos, sin, positions, weight))
        (out_a, dx_a, dw_a), (out_b, dx_b, dw_b) = results["aot"], results["pyfunc"]
        assert np.array_equal(out_a, out_b) and np.array_equal(raw_bits(dx_a), raw_bits(dx_b)), dtype
        np.testing.assert_allclose(dw_a.float().asnumpy(), dw_b.float().asnumpy(), rtol=1e-2)  # bf16 weight
        # the compiled kernel at 1, 2 and 3 threads: fp32 weight gradients bit for bit
        grads = []
        for threads in (1, 2, 3):
            dx, dw = np.empty(shape, np.float32), np.empty(96, np.float32)
            x32, dy32 = x.float().asnumpy(), dy.float().asnumpy()
            w32 = weight.float().asnumpy()
            c32, s32 = cos.asnumpy(), sin.asnumpy()
            p = np.ascontiguousarray(positions, np.int64)
            assert library.load().norm_by_positions_grad(
                dy32.ctypes.data, x32.ctypes.data, dx.ctypes.data, w32.ctypes.data, dw.ctypes.data, "float32", EPS,
                1.0, c32.ctypes.data, s32.ctypes.data, p.ctypes.data, p.shape, None, (0, 1), shape, c32.shape,
                "float32", "float32", mode, start, end, threads) == 0
            grads.append((dx.copy(), dw.copy()))
        assert all(np.array_equal(a[0], grads[0][0]) and np.array_equal(a[1], grads[0][1]) for a in grads)


@pytest.mark.parametrize("cos_dtype", DTYPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", range(4))
def test_whole_heads_of_the_common_widths_write_the_numpy_kernels_bits(mode, dtype, cos_dtype):
    """Heads of 64, 128 and 256 lanes rotated whole take the kernel's own path for them (rotary_rows.h,
    norm_rotate_whole_rows: the row in registers, the next row summed ahead): the numpy kernel's bits for q and k,
    in and out of place, on 1 and 3 threads (ranges ending mid-token), k's results fp32 subnormals (which bf16's
    hardware conversion would flush); a width of 96 and a partial slice take the general path, checked alike."""
    from ms_rotary import numpy_kernel
    rng = np.random.default_rng(mode)
    kernel = library.load(ms_rotary.compiled_kernel_path())
    for width, (start, end) in ((64, (0, 64)), (128, (0, 128)), (256, (0, 256)), (96, (0, 96)), (128, (0, 64))):
        b, s, positions = 2, 7, rng.integers(0, CACHE, (1, 2, 7))
        q = kernel_bits(rng.uniform(-3, 3, (b, s, 3, width)), dtype)
        k = kernel_bits(rng.uniform(-3, 3, (b, s, 1, width)), dtype)
        weights = (rng.uniform(-1.5, 1.5, width).astype(np.float32),
                   (rng.uniform(0.5, 1.5, width) * 3e-39).astype(np.float32))  # k's norm: subnormal results
        cos, sin = (kernel_bits(rng.uniform(-1, 1, (1, CACHE, 1, end - start)), cos_dtype) for _ in range(2))
        expected = []
        with numpy_kernel.default_fp_environment():
            cos32, sin32 = (kernel_float32(c, cos_dtype)[0, positions[0]] for c in (cos, sin))
            for x, weight in zip((q, k), weights):
                normed = numpy_kernel.head_norm(kernel_float32(x, dtype), weight, EPS)
                rotated = numpy_kernel.rotate(normed, cos32, sin32, mode, start, end, False)
                expected.append(numpy_kernel.from_float32(rotated, dtype).view(x.dtype))
        assert (expected[1] != 0).any() and (expected[1] & (0x7f80 if dtype == "bfloat16" else 0) == 0).all()
        for threads in (1, 3):
            for in_place in (True, False):
                q_in, k_in = q.copy(), k.copy()
                q_out, k_out = (None, None) if in_place else (np.empty_like(q), np.empty_like(k))
                assert kernel.norm_by_positions(
                    q_in.ctypes.data, None if in_place else q_out.ctypes.data, k_in.ctypes.data,
                    None if in_place else k_out.ctypes.data, weights[0].ctypes.data, weights[1].ctypes.data,
                    ("float32", "float32"), EPS, 0.0, cos.ctypes.data, sin.ctypes.data, positions.ctypes.data,
                    positions.shape, None, (0, 1), q.shape, k.shape, cos.shape, dtype, cos_dtype, mode, start, end,
                    threads) == 0
                got = (q_in, k_in) if in_place else (q_out, k_out)
                for name, have, want in zip("qk", got, expected):
                    assert np.array_equal(have, want), (width, start, end, name, threads, in_place)


@pytest.mark.parametrize("mode,dtype", [(0, "float32"), (1, "bfloat16"), (3, "float16")])
def test_large_results_streamed_past_the_cache_keep_the_numpy_kernels_bits(mode, dtype):
    """Out of place, a thread's results of 8 MiB or more are written with streaming stores (rotary_rows.h,
    kStreamBytes): the numpy kernel's bits there too, into a buffer 16 bytes past a 64-byte boundary (where
    MindSpore's large buffers start), on 1 and 2 threads (16 MiB of q: each thread's 8 MiB streamed; k's few
    rows are not)."""
    from ms_rotary import numpy_kernel
    rng = np.random.default_rng(mode)
    item = 4 if dtype == "float32" else 2
    seq = (16 << 20) // (32 * 128 * item)
    q = kernel_bits(rng.uniform(-3, 3, (1, seq, 32, 128)), dtype)
    k = kernel_bits(rng.uniform(-3, 3, (1, seq, 1, 128)), dtype)
    weight = rng.uniform(-1.5, 1.5, 128).astype(np.float32)
    cos, sin = (kernel_bits(rng.uniform(-1, 1, (1, CACHE, 1, 128)), "float32") for _ in range(2))
    positions = rng.integers(0, CACHE, (1, 1, seq))
    expected = []
    with numpy_kernel.default_fp_environment():
        cos32, sin32 = (c.view(np.float32)[0, positions[0, 0]][None] for c in (cos, sin))
        for x in (q, k):
            rotated = numpy_kernel.rotate(numpy_kernel.head_norm(kernel_float32(x, dtype), weight, EPS), cos32, sin32,
                                          mode, 0, 128, False)
            expected.append(numpy_kernel.from_float32(rotated, dtype).view(x.dtype))
    kernel = library.load(ms_rotary.compiled_kernel_path())
    for threads in (1, 2):
        outs = []
        for x in (q, k):
            buffer = np.empty(x.nbytes + 128, np.uint8)
            at = (-buffer.ctypes.data) % 64 + 16
            outs.append(buffer[at:at + x.nbytes].view(x.dtype).reshape(x.shape))
        assert outs[0].ctypes.data % 64 == 16
        assert kernel.norm_by_positions(
            q.ctypes.data, outs[0].ctypes.data, k.ctypes.data, outs[1].ctypes.data, weight.ctypes.data,
            weight.ctypes.data, ("float32", "float32"), EPS, 0.0, cos.ctypes.data, sin.ctypes.data,
            positions.ctypes.data, positions.shape, None, (0, 1), q.shape, k.shape, cos.shape, dtype, "float32", mode,
            0, 128, threads) == 0
        for name, have, want in zip("qk", outs, expected):
            assert np.array_equal(have, want), (name, threads)


@pytest.mark.parametrize("exec_mode", ["pynative", "GRAPH_MODE"])
def test_a_grad_of_grad_is_refused_by_name(exec_mode):
    layer = _layer(0, "aot")
    rng = np.random.default_rng(0)
    (q, k, wq, wk), _ = _inputs(rng, "float32", "float32")
    positions = ms.Tensor(POSITIONS)

    def first(q, k, positions, wq, wk):
        q_rot, k_rot = layer(q, k, positions, wq, wk)
        return (q_rot * q_rot).sum() + (k_rot * k_rot).sum()

    def second(q, k, positions, wq, wk):
        return ms.grad(first)(q, k, positions, wq, wk).sum()

    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        fn = ms.grad(second)
        with pytest.raises((ValueError, RuntimeError), match="second-order gradients .* head norm"):
            (ms.jit(fn) if exec_mode == "GRAPH_MODE" else fn)(q, k, positions, wq, wk)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


BAD_CALLS = {  # name: (q weight, k weight, k given, error, match)
    "no weights": (None, None, True, TypeError, "norms each head first .* pass q_norm_weight"),
    "k weight missing": ("ok", None, True, TypeError, "k given without k_norm_weight"),
    "k weight without k": ("ok", "ok", False, TypeError, "k_norm_weight given without k"),
    "weight of the wrong width": ("wide", "ok", True, ValueError,
                                  r"q_norm_weight of shape \(64,\) must be \[head_dim\]"),
    "integer weight": ("ok", "int", True, TypeError, "k_norm_weight has dtype int32"),
}


@pytest.mark.parametrize("name,exec_mode", cycled_cases([list(BAD_CALLS)], [EXEC_MODES]))
def test_bad_norm_weights_are_refused_by_name_before_any_kernel(name, exec_mode):
    q_weight, k_weight, with_k, error, match = BAD_CALLS[name]
    weights = {None: None, "ok": ms.Tensor(np.ones(D, np.float32)), "wide": ms.Tensor(np.ones(2 * D, np.float32)),
               "int": ms.Tensor(np.ones(D, np.int32))}
    layer = _layer(0, "aot")
    (q, k, _, _), _ = _inputs(np.random.default_rng(0), "float32", "float32")

    class User(nn.Cell):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def construct(self, q, k, positions, wq, wk):
            return self.layer(q, k if with_k else None, positions, wq, wk)

    with pytest.raises(error, match=match):
        _run(exec_mode, User(), q, k, ms.Tensor(POSITIONS), weights[q_weight], weights[k_weight])


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
def test_norm_weights_for_a_layer_without_a_norm_are_refused(exec_mode):
    layer = RotaryEmbedding(D, None, 0, cache_positions=CACHE)
    (q, k, wq, wk), _ = _inputs(np.random.default_rng(0), "float32", "float32")
    with pytest.raises(TypeError, match="given to a layer built without qk_norm_eps"):
        _run(exec_mode, NormLayerCell(layer), q, k, ms.Tensor(POSITIONS), wq, wk)


def test_constructor_values_are_checked():
    with pytest.raises(ValueError, match="qk_norm_eps=-1.0 must be >= 0"):
        RotaryEmbedding(D, None, 0, cache_positions=CACHE, qk_norm_eps=-1.0)
    with pytest.raises(TypeError, match="qk_norm_offset='1' must be a finite number"):
        RotaryEmbedding(D, None, 0, cache_positions=CACHE, qk_norm_eps=1e-6, qk_norm_offset="1")
    olmo2 = {"model_type": "olmo2", "hidden_size": 256, "num_attention_heads": 8, "max_position_embeddings": 64,
             "rms_norm_eps": 1e-6}
    with pytest.raises(ValueError, match="'olmo2' normalises q and k over all heads of a token"):
        RotaryEmbedding.from_config(olmo2, qk_norm=True)
    llama = {**olmo2, "model_type": "llama"}
    with pytest.raises(ValueError, match="'llama' is not known to norm each head"):
        RotaryEmbedding.from_config(llama, qk_norm=True)
    qwen3 = {**olmo2, "model_type": "qwen3", "head_dim": 32, "rms_norm_eps": 1e-5}
    gemma3 = {**qwen3, "model_type": "gemma3_text", "rope_local_base_freq": 10000.0}
    assert RotaryEmbedding.from_config(qwen3, qk_norm=True).head_norm == ms_rotary.call.HeadNorm(1e-5, 0.0)
    assert RotaryEmbedding.from_config(gemma3, layer_type="sliding_attention", qk_norm=True).head_norm == \
        ms_rotary.call.HeadNorm(1e-5, 1.0)


def test_ascends_composed_path_equals_the_fused_one_on_the_cpu():
    """On Ascend the layer runs MindSpore's own norm around its rotation kernel (embedding.ComposedNorm): the
    same call built that way on the CPU gives the fused call's numbers and gradients."""
    layer = _layer(3, "aot", 1.0)
    composed = ms_rotary.embedding.ComposedNorm(layer.norm_qk.call, "aot", "RotaryEmbedding")
    (q, k, wq, wk), _ = _inputs(np.random.default_rng(2), "float32", "float32")
    positions = ms.Tensor(POSITIONS)
    got = layer(q, k, positions, wq, wk)
    want = composed(q, k, layer.cos_cache, layer.sin_cache, positions, wq, wk)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=1e-5)

    def loss(fn):
        return lambda q, k, wq, wk: sum((t * t * t).sum() for t in fn(q, k, wq, wk))

    fused = ms.grad(loss(lambda q, k, wq, wk: layer(q, k, positions, wq, wk)), grad_position=(0, 1, 2, 3))
    split = ms.grad(loss(lambda q, k, wq, wk: composed(q, k, layer.cos_cache, layer.sin_cache, positions, wq, wk)),
                    grad_position=(0, 1, 2, 3))
    for a, b in zip(fused(q, k, wq, wk), split(q, k, wq, wk)):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), atol=2e-4 * max(1, np.abs(b.asnumpy()).max()))


# --- against transformers' own modules ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def transformers():
    pytest.importorskip("torch")
    return pytest.importorskip("transformers")


def _attention(transformers, model_type, config):
    """The family's self-attention module built from `config` (its q_norm, k_norm and rotary parts)."""
    import importlib
    import inspect

    import torch

    from tools import rope_families

    _, rotary_class, apply = rope_families.rotary_module(model_type)
    module = importlib.import_module(rotary_class.__module__)
    for name, cls in vars(module).items():
        if inspect.isclass(cls) and name.endswith("Attention") and issubclass(cls, torch.nn.Module):
            try:
                attention = cls(config, layer_idx=0)
            except Exception:  # cross-attention or vision classes with other signatures
                continue
            if not isinstance(getattr(attention, "q_norm", torch.nn.Identity()), torch.nn.Identity):
                return attention, rotary_class, apply
    raise AssertionError(f"{model_type}: no self-attention with q_norm")


def test_each_family_in_the_table_norms_as_its_own_q_norm(transformers):
    """head_norms.PER_HEAD_NORM_OFFSETS: each family's q_norm/k_norm, built from its default config with random
    weights, equals x / sqrt(mean(x^2) + rms_norm_eps) * (offset + weight) over head_dim."""
    import torch

    from ms_rotary.head_norms import PER_HEAD_NORM_OFFSETS, head_norm_from_config
    from ms_rotary.rope_config import config_fields

    failures = {}
    for model_type in PER_HEAD_NORM_OFFSETS:
        config = transformers.CONFIG_MAPPING[model_type]()
        outer = getattr(config, "thinker_config", None) or config  # Qwen3-Omni: the thinker's text decoder
        text = getattr(outer, "text_config", None) or outer
        with torch.device("meta"):
            attention, _, _ = _attention(transformers, model_type, text)
        norm = head_norm_from_config(config_fields(config))
        for module in (attention.q_norm, attention.k_norm):
            module = module.to_empty(device="cpu")
            weight = torch.rand(module.weight.shape, dtype=torch.float64) - 0.5
            module.weight.data = weight.float()
            x = torch.randn(3, attention.head_dim)
            want = x.double() / torch.sqrt((x.double() ** 2).mean(-1, keepdim=True) + norm.eps) * \
                (norm.offset + weight)
            error = (module(x).double() - want).abs().max().item()
            if tuple(module.weight.shape) != (attention.head_dim,) or error > 1e-5:
                failures[model_type] = (tuple(module.weight.shape), error)
    assert not failures, failures


FAMILY_CONFIGS = {
    "Qwen3": {"model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "rms_norm_eps": 1e-6, "max_position_embeddings": 64, "rope_theta": 1000000.0,
              "intermediate_size": 64, "num_hidden_layers": 1},
    "Gemma-3": {"model_type": "gemma3_text", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 64, "rms_norm_eps": 1e-6, "max_position_embeddings": 64, "rope_theta": 1000000.0,
                "rope_local_base_freq": 10000.0, "intermediate_size": 64, "num_hidden_layers": 2,
                "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 16},
    "Qwen3-Next (partial 0.25, 1 + w)": {
        "model_type": "qwen3_next", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "rms_norm_eps": 1e-6, "max_position_embeddings": 64, "partial_rotary_factor": 0.25,
        "intermediate_size": 64, "num_hidden_layers": 4},
}


@pytest.mark.parametrize("name", FAMILY_CONFIGS)
@pytest.mark.parametrize("exec_mode", ["pynative", "GRAPH_MODE"])
def test_norm_and_rotation_match_transformers_attention_modules(transformers, name, exec_mode):
    """The family's own q_norm/k_norm and apply function on q and k laid out as its attention lays them
    ([B, N, S, D]), values and the gradients of q, k and both norm weights (torch autograd), against
    RotaryEmbedding.from_config(config, qk_norm=True)."""
    import torch

    config_json = FAMILY_CONFIGS[name]
    config = transformers.CONFIG_MAPPING[config_json["model_type"]](
        **{key: value for key, value in config_json.items() if key != "model_type"})
    layer_type = "full_attention" if "layer_types" in config_json else None
    attention, rotary_class, apply = _attention(transformers, config_json["model_type"], config)
    torch.manual_seed(0)
    for module in (attention.q_norm, attention.k_norm):
        module.weight.data = torch.rand(module.weight.shape) - 0.5
    rng = np.random.default_rng(1)
    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    q = rng.uniform(-2, 2, (B, S, heads, head_dim)).astype(np.float32)
    k = rng.uniform(-2, 2, (B, S, kv_heads, head_dim)).astype(np.float32)
    positions = POSITIONS * 3
    gq = rng.uniform(-1, 1, q.shape).astype(np.float32)
    gk = rng.uniform(-1, 1, k.shape).astype(np.float32)

    tq, tk = torch.tensor(q, requires_grad=True), torch.tensor(k, requires_grad=True)
    rotary = rotary_class(config)
    by_type = {} if layer_type is None else {"layer_type": layer_type}
    cos, sin = rotary(tq, torch.tensor(positions), **by_type)
    q_rot, k_rot = apply(attention.q_norm(tq).transpose(1, 2), attention.k_norm(tk).transpose(1, 2), cos, sin)
    loss = (q_rot.transpose(1, 2) * torch.tensor(gq)).sum() + (k_rot.transpose(1, 2) * torch.tensor(gk)).sum()
    loss.backward()
    want = [t.detach().numpy() for t in (q_rot.transpose(1, 2), k_rot.transpose(1, 2), tq.grad, tk.grad,
                                         attention.q_norm.weight.grad, attention.k_norm.weight.grad)]

    layer = RotaryEmbedding.from_config(config_json, layer_type=layer_type, qk_norm=True)
    wq, wk = (ms.Tensor(m.weight.detach().numpy()) for m in (attention.q_norm, attention.k_norm))
    args = (ms.Tensor(q), ms.Tensor(k), ms.Tensor(positions), wq, wk)
    got = [*_run(exec_mode, NormLayerCell(layer), *args),
           *_run(exec_mode, _LossCell(layer, ms.Tensor(gq), ms.Tensor(gk)), *args, grad=True)]
    for name_of, a, b in zip(("q", "k", "dq", "dk", "dq_norm", "dk_norm"), got, want):
        np.testing.assert_allclose(a.asnumpy(), b, atol=2e-5 * max(1, np.abs(b).max()), err_msg=name_of)
