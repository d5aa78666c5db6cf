"""RotaryEmbedding.prologue (issue #37): q and k rotated (normalised first with a head norm) and k's rotated rows
and v's rows written into KV caches in one call, contiguous [B, P, Nk, D] at the positions or paged [T, Nk, D] at
slots; in PyNative, ms.jit and GRAPH_MODE inside a user's Cell, both backends. Every other row of the caches
stays bit for bit as it was; a refused call writes nothing."""
import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, cycled_cases, raw_bits
from mindspore import nn

from ms_rotary import RotaryEmbedding

B, S, NQ, NK, D, P = 2, 4, 4, 2, 32, 16
EXEC_MODES = ["pynative", "ms.jit", "GRAPH_MODE"]
POSITIONS = np.array([[3, 4, 5, 6], [0, 1, 2, 9]])


class _User(nn.Cell):
    def __init__(self, layer, paged, norm):
        super().__init__()
        self.layer, self.paged, self.norm = layer, paged, norm

    def construct(self, q, k, v, positions, k_cache, v_cache, slots, wq, wk):
        if self.paged and self.norm:
            return self.layer.prologue(q, k, v, positions, k_cache, v_cache, slots, wq, wk)
        if self.paged:
            return self.layer.prologue(q, k, v, positions, k_cache, v_cache, slots)
        if self.norm:
            return self.layer.prologue(q, k, v, positions, k_cache, v_cache, None, wq, wk)
        return self.layer.prologue(q, k, v, positions, k_cache, v_cache)


def _run(exec_mode, cell, *args):
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        return ms.jit(cell.construct)(*args) if exec_mode == "ms.jit" else cell(*args)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def _inputs(seed=0, dtype=ms.float32, seq=S):
    rng = np.random.default_rng(seed)
    q, k, v = (ms.Tensor(rng.uniform(-2, 2, (B, seq, n, D)).astype(np.float32), dtype) for n in (NQ, NK, NK))
    wq, wk = (ms.Tensor(rng.uniform(0.5, 1.5, D).astype(np.float32)) for _ in range(2))
    return q, k, v, wq, wk


def _caches(paged, dtype=ms.float32, seed=1):
    rng = np.random.default_rng(seed)  # rows that must stay as they were
    shape = (P * B, NK, D) if paged else (B, P, NK, D)
    return tuple(ms.Tensor(rng.uniform(-9, -8, shape).astype(np.float32), dtype) for _ in range(2))


def _layer(backend, norm):
    return RotaryEmbedding(D, None, "half", rope_theta=100.0, cache_positions=P, backend=backend,
                           qk_norm_eps=1e-6 if norm else None)


SLOTS = np.array([[31, 2, 17, 8], [0, 25, 9, 14]])  # shuffled rows of a paged cache of 32


# Each cache kind, with and without the norm, in each execution mode, the backends cycling; the rest: -m slow.
@pytest.mark.parametrize("paged,norm,exec_mode,backend",
                         cycled_cases([[False, True], [False, True], EXEC_MODES], [BACKENDS]))
def test_the_prologue_writes_the_layers_rows_and_nothing_else(paged, norm, exec_mode, backend):
    layer = _layer(backend, norm)
    # 16-bit with the norm: bf16 in PyNative, fp16 in graphs (MindSpore 2.10's CPU graphs cannot move bf16 rows)
    q, k, v, wq, wk = _inputs(dtype=ms.float32 if not norm else ms.bfloat16 if exec_mode == "pynative" else
                              ms.float16)
    k_cache, v_cache = _caches(paged, q.dtype)
    k_before, v_before = (c.float().asnumpy().copy() for c in (k_cache, v_cache))
    positions = ms.Tensor(POSITIONS)
    q_rot = _run(exec_mode, _User(layer, paged, norm), q, k, v, positions, k_cache, v_cache, ms.Tensor(SLOTS), wq, wk)
    want_q, want_k = layer(q, k, positions, wq, wk) if norm else layer(q, k, positions)
    assert np.array_equal(raw_bits(q_rot), raw_bits(want_q))
    k_now, v_now = (c.float().asnumpy() for c in (k_cache, v_cache))
    rows = (SLOTS,) if paged else (np.arange(B)[:, None], POSITIONS)
    np.testing.assert_array_equal(k_now[rows], want_k.float().asnumpy())
    np.testing.assert_array_equal(v_now[rows], v.float().asnumpy())
    k_now[rows], v_now[rows] = k_before[rows], v_before[rows]
    np.testing.assert_array_equal(k_now, k_before)  # every other row as it was
    np.testing.assert_array_equal(v_now, v_before)


@pytest.mark.parametrize("exec_mode,norm", cycled_cases([EXEC_MODES], [[False, True]]))
def test_an_in_place_layers_prologue_writes_q_k_and_the_caches(exec_mode, norm):
    """inplace=True: q and k take their rotated values (in graphs written last, after the caches), the caches
    the rows of k's rotation and v at the positions, nothing else."""
    layer = RotaryEmbedding(D, None, "half", rope_theta=100.0, cache_positions=P, inplace=True,
                            qk_norm_eps=1e-6 if norm else None)
    q, k, v, wq, wk = _inputs(4)
    want_q, want_k = _layer("aot", norm)(q, k, ms.Tensor(POSITIONS), *((wq, wk) if norm else ()))
    k_cache, v_cache = _caches(False)
    k_before, v_before = (c.asnumpy().copy() for c in (k_cache, v_cache))
    q_rot = _run(exec_mode, _User(layer, False, norm), q, k, v, ms.Tensor(POSITIONS), k_cache, v_cache, None, wq, wk)
    for got in (q_rot, q):
        assert np.array_equal(raw_bits(got), raw_bits(want_q))
    assert np.array_equal(raw_bits(k), raw_bits(want_k))
    rows = (np.arange(B)[:, None], POSITIONS)
    k_now, v_now = k_cache.asnumpy(), v_cache.asnumpy()
    np.testing.assert_array_equal(k_now[rows], want_k.asnumpy())
    np.testing.assert_array_equal(v_now[rows], v.asnumpy())
    k_now[rows], v_now[rows] = k_before[rows], v_before[rows]
    np.testing.assert_array_equal(k_now, k_before)
    np.testing.assert_array_equal(v_now, v_before)


@pytest.mark.parametrize("exec_mode,inplace", cycled_cases([EXEC_MODES], [[False, True]]))
def test_a_length_dependent_ropes_prologue_writes_the_layers_rows(exec_mode, inplace):
    """dynamic (NTK): each call's cos/sin rows computed from its length (length_rope.py), read at 0..n-1; the
    prologue's q and cache rows are the layer's own call's, in place too."""
    config = dict(model_type="llama", hidden_size=64, num_attention_heads=4, max_position_embeddings=8,
                  rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    rng = np.random.default_rng(8)
    q, k, v = (ms.Tensor(rng.uniform(-1, 1, (2, 3, 1, 16)).astype(np.float32)) for _ in range(3))
    positions = np.array([[7, 8, 9], [0, 1, 11]])  # past the original maximum: the rows follow the length
    want_q, want_k = RotaryEmbedding.from_config(config)(q, k, positions)
    k_cache, v_cache = (ms.Tensor(rng.uniform(-9, -8, (2, 12, 1, 16)).astype(np.float32)) for _ in range(2))
    layer = RotaryEmbedding.from_config(config, inplace=inplace)
    q_rot = _run(exec_mode, _User(layer, False, False), q, k, v, ms.Tensor(positions), k_cache, v_cache, None, None,
                 None)
    np.testing.assert_array_equal(q_rot.asnumpy(), want_q.asnumpy())
    rows = (np.arange(2)[:, None], positions)
    np.testing.assert_array_equal(k_cache.asnumpy()[rows], want_k.asnumpy())
    np.testing.assert_array_equal(v_cache.asnumpy()[rows], v.asnumpy())
    if inplace:
        np.testing.assert_array_equal(q.asnumpy(), want_q.asnumpy())
        np.testing.assert_array_equal(k.asnumpy(), want_k.asnumpy())


SHARED = {  # name: (layer in place?, which tensor is which, error)
    "k_cache is v_cache": (False, ("v_cache", "k_cache"), "v_cache shares memory with k_cache"),
    "q is k_cache": (True, ("q", "k_cache"), "q shares memory with k_cache"),
    "k is v_cache": (True, ("k", "v_cache"), "k shares memory with v_cache"),
    "a position past the KV cache": (True, None, r"positions value 5 is outside the KV cache's 4 rows"),
}


# Each case eagerly and in a graph (ms.jit and GRAPH_MODE alternating by case; q, k and the caches of one
# shape, so that one can be another), the norm cycling; the rest: -m slow.
@pytest.mark.parametrize("name,exec_mode,norm", [
    pytest.param(name, mode, norm, marks=() if (mode, norm) in (("pynative", i % 2 == 0), (EXEC_MODES[1 + i % 2],
                                                                                        i % 2 == 1)) else
                 pytest.mark.slow)
    for i, name in enumerate(SHARED) for mode in EXEC_MODES for norm in (False, True)])
def test_tensors_sharing_memory_or_a_bad_row_with_an_in_place_layer_are_refused_before_any_write(name, exec_mode,
                                                                                              norm):
    """Eagerly, an in-place layer's prologue used to rotate q and k before the write refused a row (its message
    said nothing was written), and took q in the k cache's memory; a graph wrote both caches into one tensor, or
    q and the cache into one. Now every case is refused before anything is written, in every mode."""
    in_place, same, match = SHARED[name]
    layer = RotaryEmbedding(16, None, "half", rope_theta=100.0, cache_positions=8, inplace=in_place,
                            qk_norm_eps=1e-6 if norm else None)
    rng = np.random.default_rng(6)
    tensors = {name: ms.Tensor(rng.uniform(-1, 1, (1, 4, 1, 16)).astype(np.float32))
               for name in ("q", "k", "v", "k_cache", "v_cache")}
    if same is not None:
        tensors[same[0]] = tensors[same[1]]
    wq, wk = (ms.Tensor(rng.uniform(0.5, 1.5, 16).astype(np.float32)) for _ in range(2))
    before = {name: raw_bits(t).copy() for name, t in tensors.items()}
    positions = np.array([[0, 1, 2, 5 if same is None else 3]])
    with pytest.raises((ValueError, RuntimeError), match=rf"prologue: {match}"):
        _run(exec_mode, _User(layer, False, norm), tensors["q"], tensors["k"], tensors["v"], ms.Tensor(positions),
             tensors["k_cache"], tensors["v_cache"], None, wq, wk).asnumpy()
    for name, tensor in tensors.items():
        assert np.array_equal(raw_bits(tensor), before[name]), name


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decode_loop_over_the_caches_equals_the_full_sequence_and_paged_equals_contiguous(backend):
    """Prefill of two tokens, then one token a step, in one compiled network: the caches hold the full
    sequence's rotated k and v, bit for bit; a paged cache at shuffled slots holds the same rows."""
    layer = _layer(backend, True)
    q, k, v, wq, wk = _inputs(3)
    positions = np.array([[0, 1, 2, 3], [5, 6, 7, 8]])
    _, full_k = layer(q, k, ms.Tensor(positions), wq, wk)
    contiguous, paged = _caches(False), _caches(True)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        for cell, caches, is_paged in ((_User(layer, False, True), contiguous, False),
                                       (_User(layer, True, True), paged, True)):
            for start, end in ((0, 2), (2, 3), (3, 4)):
                cell(q[:, start:end], k[:, start:end], v[:, start:end], ms.Tensor(positions[:, start:end]), *caches,
                     ms.Tensor(SLOTS[:, start:end]), wq, wk)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    rows = (np.arange(B)[:, None], positions)
    assert np.array_equal(contiguous[0].asnumpy()[rows], full_k.asnumpy())
    assert np.array_equal(contiguous[1].asnumpy()[rows], v.asnumpy())
    assert np.array_equal(paged[0].asnumpy()[SLOTS], contiguous[0].asnumpy()[rows])
    assert np.array_equal(paged[1].asnumpy()[SLOTS], contiguous[1].asnumpy()[rows])


@pytest.mark.parametrize("dtype,backend", cycled_cases([["float32", "bfloat16"]], [BACKENDS]))
def test_each_eager_write_path_writes_its_rows_and_nothing_else(dtype, backend):
    """Eagerly, rows that follow each other (a decode step, a prompt) are written by the kernel itself (k) and
    in one copy (v), others by index: each writes k's rotated rows and v's rows where they belong and nothing
    else, bit for bit (rows that fill a span out of order, [5, 7, 6, 8], go by index)."""
    dtype = {"float32": ms.float32, "bfloat16": ms.bfloat16}[dtype]
    layer = _layer(backend, False)
    for paged, rows in ((False, [[9]]), (False, [[4, 5, 6]]), (False, [[7, 3, 8]]), (False, [[5, 7, 6, 8]]),
                        (True, [[20]]), (True, [[11, 12, 13, 14]]), (True, [[30, 2]]), (True, [[12, 14, 13, 15]])):
        q, k, v, _, _ = _inputs(seed=len(rows[0]), dtype=dtype, seq=len(rows[0]))
        q, k, v = q[:1], k[:1], v[:1]
        k_cache, v_cache = _caches(paged, dtype)
        k_cache, v_cache = (c[:1] if not paged else c for c in (k_cache, v_cache))
        before = [raw_bits(c).copy() for c in (k_cache, v_cache)]
        positions = ms.Tensor(np.array(rows) % P)
        slots = ms.Tensor(np.array(rows)) if paged else None
        q_rot = layer.prologue(q, k, v, positions, k_cache, v_cache, slots)
        want_q, want_k = layer(q, k, positions)
        assert np.array_equal(raw_bits(q_rot), raw_bits(want_q))
        index = (np.array(rows[0]),) if paged else (0, np.array(rows[0]))
        for cache, old, values in zip((k_cache, v_cache), before, (want_k, v)):
            want = old.copy()
            want[index] = raw_bits(values)[0]
            assert np.array_equal(raw_bits(cache), want), (paged, rows)


def _bad_rows(refusal, paged):
    """(layer, positions, slots, what the error says) for a row outside the KV cache or one row for two tokens."""
    layer = _layer("aot", False)
    positions, slots = POSITIONS.copy(), SLOTS.copy()
    if refusal == "outside the cache" and paged:
        slots[1, 3] = 2 * P
        return layer, positions, slots, rf"slots value {2 * P} is outside the KV cache"
    if refusal == "outside the cache":  # inside the cos/sin cache (64), outside the KV cache's P rows
        positions[1, 3] = P
        layer = RotaryEmbedding(D, None, "half", rope_theta=100.0, cache_positions=4 * P)
        return layer, positions, slots, rf"positions value {P} is outside the KV cache"
    # one token's k and v would be lost (eagerly the last write won, in a graph ScatterNdUpdate's order decided)
    if paged:
        slots[1, 2] = slots[0, 1]  # another batch row's slot
        return layer, positions, slots, rf"slots value {slots[0, 1]} names one KV cache row for two tokens"
    positions[1, 3] = positions[1, 0]  # the same batch row's position (other batch rows may share it)
    return layer, positions, slots, rf"positions value {positions[1, 0]} names one KV cache row for two tokens"


# Each refusal in each execution mode, the cache kinds cycling; the rest: -m slow.
@pytest.mark.parametrize("refusal,exec_mode,paged",
                         cycled_cases([["outside the cache", "named twice"], EXEC_MODES], [[False, True]]))
def test_a_row_outside_the_cache_or_named_twice_is_refused_by_name_and_nothing_is_written(refusal, exec_mode, paged):
    layer, positions, slots, match = _bad_rows(refusal, paged)
    q, k, v, _, _ = _inputs()
    k_cache, v_cache = _caches(paged)
    before = [raw_bits(c).copy() for c in (k_cache, v_cache)]
    with pytest.raises((ValueError, RuntimeError), match=rf"prologue: {match}"):
        _run(exec_mode, _User(layer, paged, False), q, k, v, ms.Tensor(positions), k_cache, v_cache,
             ms.Tensor(slots), None, None).asnumpy()  # a graph raises while it runs
    assert all(np.array_equal(raw_bits(c), b) for c, b in zip((k_cache, v_cache), before))


# Each cache eagerly (where the one-token fast paths run); a graph's check op for two of them.
@pytest.mark.parametrize("where,exec_mode", [*((where, "pynative") for where in ("KV cache", "paged KV cache",
                                                                                "cos/sin cache")),
                                             ("KV cache", "ms.jit"), ("paged KV cache", "GRAPH_MODE")])
def test_a_decode_steps_one_row_outside_a_cache_is_refused_by_name_and_nothing_is_written(where, exec_mode):
    """One token (B = S = 1): its row, read and checked as a decode step's few, outside the KV cache, the
    paged cache's slots or the cos/sin cache."""
    paged = where == "paged KV cache"
    layer = RotaryEmbedding(D, None, "half", rope_theta=100.0, cache_positions=4 * P) if where == "KV cache" else \
        _layer("aot", False)
    rng = np.random.default_rng(5)
    q, k, v = (ms.Tensor(rng.uniform(-2, 2, (1, 1, n, D)).astype(np.float32)) for n in (NQ, NK, NK))
    k_cache, v_cache = (c[:1] for c in _caches(False)) if not paged else _caches(True)
    k_cache, v_cache = ms.Tensor(k_cache.asnumpy()), ms.Tensor(v_cache.asnumpy())
    position, slot, match = {"KV cache": (P, 0, rf"positions value {P} is outside the KV cache"),
                             "paged KV cache": (3, 2 * P, rf"slots value {2 * P} is outside the KV cache"),
                             "cos/sin cache": (P, 0, rf"position {P} is outside the cos/sin cache")}[where]
    before = [raw_bits(c).copy() for c in (k_cache, v_cache)]
    with pytest.raises((ValueError, RuntimeError), match=match):
        _run(exec_mode, _User(layer, paged, False), q, k, v, ms.Tensor(np.array([[position]])), k_cache, v_cache,
             ms.Tensor(np.array([[slot]])), None, None).asnumpy()
    assert all(np.array_equal(raw_bits(c), b) for c, b in zip((k_cache, v_cache), before))


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_read_from_the_rows_it_is_written_to_rotates_as_a_copy_of_it(backend):
    """k a view of cache rows that its rotated rows overwrite (token 1's k is row 4, where token 0's rotated k
    goes: in one pass the kernel would read a row it has written): the result is that of a copy of k."""
    layer = _layer(backend, True)
    q, _, v, wq, wk = _inputs(seq=2)
    q, v = q[:1], v[:1]
    k_cache, v_cache = (ms.Tensor(c.asnumpy()[:1]) for c in _caches(False))
    k = k_cache[:, 3:5]
    k_copy = ms.Tensor(k.asnumpy())
    positions = ms.Tensor(np.array([[4, 5]]))
    want_q, want_k = layer(q, k_copy, positions, wq, wk)
    q_rot = layer.prologue(q, k, v, positions, k_cache, v_cache, None, wq, wk)
    assert np.array_equal(raw_bits(q_rot), raw_bits(want_q))
    assert np.array_equal(raw_bits(k_cache)[:, 4:6], raw_bits(want_k))


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_no_token_writes_nothing(paged, exec_mode):
    """S = 0: an empty q_rot, the caches as they were (empty work is a no-op)."""
    q, k, v, wq, wk = _inputs(seq=0)
    k_cache, v_cache = _caches(paged)
    before = [raw_bits(c).copy() for c in (k_cache, v_cache)]
    empty = ms.Tensor(np.zeros((B, 0), np.int64))
    q_rot = _run(exec_mode, _User(_layer("aot", True), paged, True), q, k, v, empty, k_cache, v_cache, empty, wq, wk)
    assert q_rot.shape == (B, 0, NQ, D)
    assert all(np.array_equal(raw_bits(c), b) for c, b in zip((k_cache, v_cache), before))


def test_positions_shared_by_batch_rows_are_no_conflict():
    """Contiguous caches: batch rows at the same positions write rows of their own batch."""
    layer = _layer("aot", False)
    q, k, v, _, _ = _inputs()
    k_cache, v_cache = _caches(False)
    layer.prologue(q, k, v, ms.Tensor(np.array([2, 5, 6, 7])), k_cache, v_cache)
    assert np.array_equal(v_cache.asnumpy()[:, [2, 5, 6, 7]], v.asnumpy())


BAD = {  # name: (change, error, match)
    "cache of another width": ("k_cache", ValueError, r"k_cache of shape \(2, 16, 2, 16\) must be \[2, P, 2, 32\]"),
    "cache of another dtype": ("v_cache_dtype", TypeError, "v_cache has dtype Float16"),
    "v of another shape": ("v", ValueError, "v of shape .* must be shaped like k"),
    "float slots": ("slots", TypeError, "slots must hold integers .* got dtype float32"),
}


@pytest.mark.parametrize("name,exec_mode", cycled_cases([list(BAD)], [EXEC_MODES]))
def test_bad_caches_are_refused_by_name_before_any_write(name, exec_mode):
    change, error, match = BAD[name]
    layer = _layer("aot", False)
    q, k, v, _, _ = _inputs()
    k_cache, v_cache = _caches(False)
    paged, slots = change == "slots", None
    if paged:
        k_cache, v_cache = _caches(True)
        slots = ms.Tensor(SLOTS.astype(np.float32))
    elif change == "k_cache":
        k_cache = ms.Tensor(np.zeros((B, P, NK, D // 2), np.float32))
    elif change == "v_cache_dtype":
        v_cache = v_cache.astype(ms.float16)
    elif change == "v":
        v = ms.Tensor(np.zeros((B, S, NK + 1, D), np.float32))
    before = [raw_bits(c).copy() for c in (k_cache, v_cache)]
    with pytest.raises(error, match=match):
        _run(exec_mode, _User(layer, paged, False), q, k, v, ms.Tensor(POSITIONS), k_cache, v_cache, slots, None,
             None)
    assert all(np.array_equal(raw_bits(c), b) for c, b in zip((k_cache, v_cache), before))


def test_layouts_mrope_without_slots_views_and_autograd_are_refused():
    q, k, v, _, _ = _inputs()
    k_cache, v_cache = _caches(False)
    sbnd = RotaryEmbedding(D, None, "half", cache_positions=P, layout="SBND")
    with pytest.raises(ValueError, match="build the layer with layout='BSND'"):
        sbnd.prologue(q, k, v, POSITIONS, k_cache, v_cache)
    mrope = RotaryEmbedding(D, None, "half", cache_positions=P, mrope_section=[4, 6, 6])
    with pytest.raises(ValueError, match="give the cache rows as slots"):
        mrope.prologue(q, k, v, np.stack([POSITIONS] * 3), k_cache, v_cache)
    layer = _layer("aot", False)
    with pytest.raises(ValueError, match="prologue writes the KV caches for inference and has no gradient"):
        ms.grad(lambda q: layer.prologue(q, k, v, POSITIONS, k_cache, v_cache).sum())(q)

    class Loss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def construct(self, q, k, v, positions, k_cache, v_cache):
            return self.layer.prologue(q, k, v, positions, k_cache, v_cache).sum()

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(ValueError, match="prologue writes the KV caches for inference and has no gradient"):
            ms.grad(Loss())(q, k, v, ms.Tensor(POSITIONS), k_cache, v_cache)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    base = ms.Tensor(np.zeros((B, 2 * P, NK, D), np.float32))
    before = raw_bits(base).copy()
    with pytest.raises(RuntimeError, match="cannot write k_cache in place in this graph: k_cache is a view"):
        _run("GRAPH_MODE", _User(layer, False, False), q, k, v, ms.Tensor(POSITIONS), base[:, :P], v_cache, None,
             None, None).asnumpy()
    assert np.array_equal(raw_bits(base), before)
    bf16 = tuple(c.astype(ms.bfloat16) for c in (k_cache, v_cache))
    with pytest.raises(TypeError, match="bf16 KV caches are written in PyNative only on CPU"):
        _run("GRAPH_MODE", _User(layer, False, False), *(t.astype(ms.bfloat16) for t in (q, k, v)),
             ms.Tensor(POSITIONS), *bf16, None, None, None)
    with pytest.raises(ValueError, match=r"slots of shape \(4,\) must be \[B, S\] = \[2, 4\]$"):
        layer.prologue(q, k, v, POSITIONS, *_caches(True), slots=SLOTS[0])
    shared = _caches(False)  # positions [S] serve both batch rows
    layer.prologue(q, k, v, POSITIONS[0], *shared)
    want_k = layer(q, k, POSITIONS[0])[1].asnumpy()
    assert np.array_equal(shared[0].asnumpy()[:, POSITIONS[0]], want_k)
    versions = (k_cache._version, v_cache._version)
    layer.prologue(q, k, v, POSITIONS, k_cache, v_cache)
    assert (k_cache._version, v_cache._version) == (versions[0] + 1, versions[1] + 1)

