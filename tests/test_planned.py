"""Eager calls planned once per signature (ms_rotary/planned.py): the layer's call and its prologue. Calls after
the first of a signature run its plan, bit for bit what the full path gives and writes; a value the plan does not
take goes the full path, which refuses it by name before anything is written."""
import mindspore as ms
import numpy as np
import pytest
from conftest import raw_bits
from test_kv_cache import NK, NQ, B, D, P, _caches, _inputs

from ms_rotary import RotaryEmbedding, planned


def _served(monkeypatch, plan_class):
    """Whether each eager call that found its signature's plan was served by it (the rest took the full path)."""
    served = []
    run = plan_class.run

    def counted(self, *args):
        result = run(self, *args)
        served.append(result is not None)
        return result

    monkeypatch.setattr(plan_class, "run", counted)
    return served


@pytest.fixture
def served_by_plans(monkeypatch):
    return _served(monkeypatch, planned.StepPlan)


@pytest.fixture
def calls_served_by_plans(monkeypatch):
    return _served(monkeypatch, planned.CallPlan)


# (paged, norm, dtype, batch, tokens a step, positions' form): a decode step, batched decode (rows apart in the
# contiguous caches' [B * P]), paged slots, positions [S] shared by the batch rows, fp16 tokens out of order
PLANNED = {"decode": (False, True, ms.float32, 1, 1, "BS"), "batched bf16": (False, False, ms.bfloat16, 2, 1, "BS"),
           "paged fp16": (True, True, ms.float16, 2, 1, "BS"), "shared positions": (False, True, ms.float32, 2, 3, "S"),
           "positions [S], fp16": (False, False, ms.float16, 1, 4, "S"),
           "paged bf16 run": (True, False, ms.bfloat16, 1, 3, "BS"),
           "M-RoPE [3, B, S], paged": (True, True, ms.float32, 2, 1, "BS")}  # Qwen3-VL's decode, its sections


@pytest.mark.parametrize("case", PLANNED)
def test_planned_decode_steps_write_what_the_full_path_writes(case, served_by_plans):
    """Steps after the first of one signature run its plan: q_rot bit for bit the layer's, k's rotated rows and
    v's rows where they belong, every other row as it was; each step's values differ."""
    paged, norm, dtype, batch, seq, form = PLANNED[case]
    mrope = dict(mrope_section=(2, 3, 3), mrope_interleaved=True) if case.startswith("M-RoPE") else {}
    layer, twin = (RotaryEmbedding(D, None, "half", rope_theta=100.0, cache_positions=P,
                                   qk_norm_eps=1e-6 if norm else None, **mrope) for _ in range(2))
    twin.call_plans = None  # the reference: the layer's call, each a full path
    k_cache, v_cache = _caches(paged, dtype)
    k_cache, v_cache = (c if paged else c[:batch] for c in (k_cache, v_cache))
    k_cache, v_cache = ms.Tensor(k_cache.asnumpy(), dtype), ms.Tensor(v_cache.asnumpy(), dtype)
    k_want, v_want = raw_bits(k_cache).copy(), raw_bits(v_cache).copy()
    rng = np.random.default_rng(8)
    steps = 4
    for step in range(steps):
        q, k, v, wq, wk = _inputs(seed=step, dtype=dtype, seq=seq)
        q, k, v = q[:batch], k[:batch], v[:batch]
        spread = rng.permutation(P)[:batch * seq].reshape(batch, seq)
        positions = spread[0] if form == "S" else spread
        if mrope:  # time, height, width of each token
            positions = np.stack([positions, (positions * 3 + 1) % P, (positions * 5 + 2) % P])
        slots = rng.permutation(P * B)[:batch * seq].reshape(batch, seq)
        weights = (wq, wk) if norm else ()
        q_rot = layer.prologue(q, k, v, ms.Tensor(positions), k_cache, v_cache, ms.Tensor(slots) if paged else None,
                               *weights)
        want_q, want_k = twin(q, k, ms.Tensor(positions), *weights)
        assert np.array_equal(raw_bits(q_rot), raw_bits(want_q)), step
        rows = (slots,) if paged else (np.arange(batch)[:, None], np.broadcast_to(positions, (batch, seq)))
        k_want[rows], v_want[rows] = raw_bits(want_k), raw_bits(v)
        assert np.array_equal(raw_bits(k_cache), k_want), step
        assert np.array_equal(raw_bits(v_cache), v_want), step
    assert served_by_plans == [True] * (steps - 1)


def _planned_layer_and_caches(cache_positions=P):
    """A layer whose prologue has planned a one-token decode step (B = 1), and its contiguous caches."""
    layer = RotaryEmbedding(D, None, "half", rope_theta=100.0, cache_positions=cache_positions)
    k_cache, v_cache = (ms.Tensor(c.asnumpy()[:1]) for c in _caches(False))
    q, k, v, _, _ = _inputs(seq=1)
    layer.prologue(q[:1], k[:1], v[:1], ms.Tensor(np.array([[2]])), k_cache, v_cache)
    return layer, k_cache, v_cache, (q[:1], k[:1], v[:1])


@pytest.mark.parametrize("bad", ["outside the cos/sin cache", "outside the KV cache", "v in the k cache's memory",
                                 "float positions"])
def test_a_planned_signature_refuses_what_the_full_path_refuses_and_writes_nothing(bad, served_by_plans):
    """A value the plan does not take goes the full path, which refuses it by name before any write."""
    layer, k_cache, v_cache, (q, k, v) = _planned_layer_and_caches(4 * P if bad == "outside the KV cache" else P)
    positions, match = {"outside the cos/sin cache": (np.array([[P]]), rf"position {P} is outside the cos/sin cache"),
                        "outside the KV cache": (np.array([[P]]), rf"positions value {P} is outside the KV cache"),
                        "v in the k cache's memory": (np.array([[5]]), "v shares memory with k_cache"),
                        "float positions": (np.array([[5.0]], np.float32), "positions must hold integers")}[bad]
    if bad == "v in the k cache's memory":
        v = k_cache[:, 7:8]
    before = [raw_bits(c).copy() for c in (k_cache, v_cache)]
    with pytest.raises((ValueError, TypeError), match=match):
        layer.prologue(q, k, v, ms.Tensor(positions), k_cache, v_cache)
    assert all(np.array_equal(raw_bits(c), b) for c, b in zip((k_cache, v_cache), before))
    assert True not in served_by_plans


def test_a_planned_signature_with_a_view_or_k_in_the_cache_takes_the_full_path():
    """q a strided view (copied by the full path); k read from the very row its rotated row is written to."""
    layer, k_cache, v_cache, (q, k, v) = _planned_layer_and_caches()
    wide = ms.Tensor(np.random.default_rng(2).uniform(-1, 1, (1, 1, 2 * NQ, D)).astype(np.float32))
    strided = wide[:, :, ::2]
    q_rot = layer.prologue(strided, k, v, ms.Tensor(np.array([[6]])), k_cache, v_cache)
    assert np.array_equal(raw_bits(q_rot), raw_bits(layer(ms.Tensor(strided.asnumpy()), k,
                                                          ms.Tensor(np.array([[6]])))[0]))
    k_in_cache = k_cache[:, 9:10]
    want_k = layer(q, ms.Tensor(k_in_cache.asnumpy()), ms.Tensor(np.array([[9]])))[1]
    layer.prologue(q, k_in_cache, v, ms.Tensor(np.array([[9]])), k_cache, v_cache)
    assert np.array_equal(raw_bits(k_cache)[:, 9:10], raw_bits(want_k))


# the layer's own call: (norm, k given, dtype, positions' form, layout, M-RoPE section and layout)
CALLS = {"q and k with the norm": (True, True, ms.float32, "BS", "BSND", None),
         "q alone, bf16, positions [S]": (False, False, ms.bfloat16, "S", "BSND", None),
         "q and k, fp16, SBND": (False, True, ms.float16, "BS", "SBND", None),
         "q alone with the norm, BNSD": (True, False, ms.float32, "S", "BNSD", None),
         "M-RoPE [3, B, S] with the norm": (True, True, ms.float32, "BS", "BSND", ((2, 3, 3), True)),
         "two-axis M-RoPE [2, S], bf16": (False, True, ms.bfloat16, "S", "BSND", ((8, 8), "alternate"))}
SHAPES = {"BSND": lambda b, s, n: (b, s, n, D), "SBND": lambda b, s, n: (s, b, n, D),
          "BNSD": lambda b, s, n: (b, n, s, D)}


def _call_layers(norm, layout="BSND", mode="half", **kwargs):
    """A layer and its twin without plans (every call the full path)."""
    layers = [RotaryEmbedding(D, None, mode, rope_theta=100.0, cache_positions=P, layout=layout,
                              qk_norm_eps=1e-6 if norm else None, **kwargs) for _ in range(2)]
    layers[1].call_plans = None
    return layers


def _call_inputs(rng, dtype, layout, batch=2, seq=3):
    shape = SHAPES[layout]
    q, k = (ms.Tensor(rng.uniform(-2, 2, shape(batch, seq, n)).astype(np.float32), dtype) for n in (NQ, NK))
    weights = tuple(ms.Tensor(rng.uniform(0.5, 1.5, D).astype(np.float32)) for _ in range(2))
    return q, k, weights


@pytest.mark.parametrize("case", CALLS)
def test_planned_layer_calls_give_the_full_paths_bits(case, calls_served_by_plans):
    norm, with_k, dtype, form, layout, mrope = CALLS[case]
    extra = {} if mrope is None else dict(mrope_section=mrope[0], mrope_interleaved=mrope[1])
    layer, twin = _call_layers(norm, layout, **extra)
    axes = () if mrope is None else (len(mrope[0]),)  # M-RoPE: one row of positions an axis, axes first
    rng = np.random.default_rng(4)
    steps = 4
    for step in range(steps):
        q, k, weights = _call_inputs(rng, dtype, layout)
        positions = rng.integers(0, P, (*axes, 3) if form == "S" else (*axes, 2, 3))
        args = (q, k if with_k else None, ms.Tensor(positions), *(weights[:2 if with_k else 1] if norm else ()))
        got, want = layer(*args), twin(*args)
        for g, w in zip(got if with_k else (got,), want if with_k else (want,)):
            assert np.array_equal(raw_bits(g), raw_bits(w)), step
    assert calls_served_by_plans == [True] * (steps - 1)


@pytest.mark.parametrize("bad", ["outside the cos/sin cache", "float positions", "norm weights to a layer without",
                                 "k without its norm weight"])
def test_a_planned_layer_call_refuses_what_the_full_path_refuses(bad, calls_served_by_plans):
    norm = bad == "k without its norm weight"
    layer, _ = _call_layers(norm)
    q, k, weights = _call_inputs(np.random.default_rng(1), ms.float32, "BSND")
    weights = weights if norm else ()
    layer(q, k, ms.Tensor(np.array([1, 2, 3])), *weights)  # planned
    positions, extra, error, match = {
        "outside the cos/sin cache": ([1, P, 3], (), ValueError, rf"position {P} is outside the cos/sin cache"),
        "float positions": (np.array([1.0, 2.0, 3.0], np.float32), (), TypeError, "positions must hold integers"),
        "norm weights to a layer without": ([1, 2, 3], (q[0, 0, 0], None), TypeError, "given to a layer built "
                                            "without qk_norm_eps"),
        "k without its norm weight": ([1, 2, 3], weights[:1], TypeError, "k given without k_norm_weight")}[bad]
    with pytest.raises(error, match=match):
        layer(q, k, ms.Tensor(np.asarray(positions)), *(extra or weights))
    assert True not in calls_served_by_plans


def test_a_planned_layer_call_that_grows_its_cache_or_records_a_gradient_takes_the_full_path():
    """A position past the cache (grow_cache) rebuilds it; under ms.grad the call records its backward."""
    layer, twin = _call_layers(False, grow_cache=True)
    q, k, _ = _call_inputs(np.random.default_rng(6), ms.float32, "BSND")
    layer(q, k, ms.Tensor(np.array([1, 2, 3])))  # planned
    far = ms.Tensor(np.array([1, 2, 3 * P]))
    got, want = layer(q, k, far), twin(q, k, far)
    assert layer.cos_cache.shape[1] > 3 * P and np.array_equal(raw_bits(got[0]), raw_bits(want[0]))
    near = ms.Tensor(np.array([4, 0, 2]))
    grads = [ms.grad(lambda q, rope=rope: (rope(q, k, near)[0] * q).sum())(q) for rope in (layer, twin)]
    assert np.array_equal(raw_bits(grads[0]), raw_bits(grads[1]))
    strided = ms.Tensor(np.random.default_rng(7).uniform(-1, 1, (2, 3, 2 * NQ, D)).astype(np.float32))[:, :, ::2]
    assert np.array_equal(raw_bits(layer(strided, k, near)[0]), raw_bits(twin(strided, k, near)[0]))


def test_quarter_mode_takes_the_full_path(calls_served_by_plans):
    """Its positions come channel last ([S, 2]), not in the kernels' form: no plan, every call the full path."""
    layer, twin = _call_layers(False, mode="quarter")
    q, k, _ = _call_inputs(np.random.default_rng(9), ms.float32, "BSND")
    positions = ms.Tensor(np.stack([np.array([1, 2, 3]), np.array([0, 0, 5])], -1))
    for _ in range(3):
        assert np.array_equal(raw_bits(layer(q, k, positions)[0]), raw_bits(twin(q, k, positions)[0]))
    assert calls_served_by_plans == [] and set(layer.call_plans.plans.plans.values()) == {None}
