"""Does the layer hold every rule where models run? RotaryEmbedding (and the in-place ops) attacked as a hostile
user would: bad positions, shapes and values in PyNative, ms.jit and GRAPH_MODE inside the user's own Cell,
on both backends; in-place writes into views; aliasing; lazy tensors; a trainable cache; constructor and
config values. Each case was a wrong number, a raw error or a crash before (issue #34)."""
import os
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, NormLayerCell, cycled_cases, random_tensor, raw_bits, to_float64
from mindspore import nn, ops
from reference import rotary_forward

import ms_rotary
from ms_rotary import RotaryEmbedding

B, S, NQ, NK, D = 1, 6, 2, 1, 16
CACHE = 8
EXEC_MODES = ["pynative", "ms.jit", "GRAPH_MODE"]


def _layer(mode="half", backend="aot", **kwargs):
    return RotaryEmbedding(D, (0, D), mode, rope_theta=100.0, cache_positions=CACHE, backend=backend, **kwargs)


class _UserCell(nn.Cell):
    """The user's own network around the layer: its construct is what a graph compiles."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def construct(self, q, k, positions):
        return self.layer(q, k, positions)


def _run(exec_mode, layer, *args):
    """The layer inside a user's Cell, in one execution mode (a new Cell each time: MindSpore runs no graph again
    whose kernel failed)."""
    cell = _UserCell(layer)
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        if exec_mode == "ms.jit":
            return ms.jit(cell.construct)(*args)
        return cell(*args)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def _qk(seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    return random_tensor(rng, (B, S, NQ, D), dtype)[0], random_tensor(rng, (B, S, NK, D), dtype)[0]


def _expected(layer, t, positions):
    """The float64 rotation of t by the layer's own cache rows at `positions` ([S])."""
    rows = np.asarray(positions)
    cos, sin = (to_float64(c)[0, :, 0][rows][None, :, None, :] for c in (layer.cos_cache, layer.sin_cache))
    return rotary_forward(layer.rotary_mode, to_float64(t), cos, sin, *layer.partial_slice)


BAD_POSITIONS = {  # name: (layer arguments, positions, error, message)
    "quarter [2, S], not [S, 2]": (dict(mode="quarter"), np.zeros((2, S), np.int64), ValueError,
                                   r"positions of shape \(2, 6\) must be \[S, 2\] or \[B, S, 2\]"),
    "M-RoPE [S, 3], not [3, S]": (dict(mrope_section=(2, 3, 3)), np.zeros((S, 3), np.int64), ValueError,
                                  r"positions of shape \(6, 3\) must be \[3, S\] or \[3, B, S\]"),
    "M-RoPE [S]": (dict(mrope_section=(2, 3, 3)), np.arange(S), ValueError, r"must be \[3, S\] or \[3, B, S\]"),
    # two M-RoPE axes (NeoMME) come first, where quarter mode's two channels come last
    "two-axis M-RoPE [S, 2], not [2, S]": (dict(mrope_section=(4, 4), mrope_interleaved="alternate"),
                                           np.zeros((S, 2), np.int64), ValueError,
                                           r"positions of shape \(6, 2\) must be \[2, S\] or \[2, B, S\] \(M-RoPE"),
    "float positions": ({}, np.arange(S) + 0.7, TypeError, "positions must hold integers .* got dtype float"),
    "uint64 positions": ({}, np.arange(S, dtype=np.uint64), TypeError, "got dtype uint64; cast them to int64"),
    "bool positions": ({}, np.ones(S, bool), TypeError, "got dtype bool"),
    "S differs from q's": ({}, np.arange(S - 1), ValueError, r"positions for B = 1, S = 5 do not fit q \(1, 6, 2,"),
    "batch neither 1 nor B": ({}, np.zeros((3, S), np.int64), ValueError, r"must be \[S\] or \[B, S\] = \[1, 6\]"),
}


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
@pytest.mark.parametrize("name", BAD_POSITIONS)
def test_positions_of_the_wrong_form_or_dtype_are_refused_in_every_mode(name, exec_mode):
    """Graphs used to reshape or truncate them into wrong numbers (quarter [2, S]: relative error 2.1; float
    1.7 read row 1); now the same error as eagerly, at compile time."""
    kwargs, positions, error, match = BAD_POSITIONS[name]
    q, k = _qk()
    with pytest.raises(error, match=match):
        _run(exec_mode, _layer(**kwargs), q, k, ms.Tensor(positions))


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
def test_q_or_k_whose_head_dim_differs_from_the_layers_is_refused(exec_mode):
    """A graph used to rotate such a q on its first lanes."""
    q, k = _qk()
    wide = ms.Tensor(np.ones((B, S, NQ, 2 * D), np.float32))
    for args, name in (((wide, k), "q"), ((q, wide), "k")):
        with pytest.raises(ValueError, match=rf"{name} of shape \(1, 6, 2, 32\) must be 4-D BSND with D = head_dim=16"):
            _run(exec_mode, _layer(), *args, ms.Tensor(np.arange(S)))


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
def test_q_and_k_of_different_batches_or_dtypes_are_refused(exec_mode):
    q, k = _qk()
    other_batch = ms.Tensor(np.ones((2, S, NK, D), np.float32))
    with pytest.raises(ValueError, match="must share B and S"):
        _run(exec_mode, _layer(), q, other_batch, ms.Tensor(np.arange(S)))
    with pytest.raises(TypeError, match="q and k must share a dtype"):
        _run(exec_mode, _layer(), q, k.astype(ms.float16), ms.Tensor(np.arange(S)))


# A refusal inside a graph costs MindSpore's 3 s wait after a failed kernel: each case in one mode (cycling).
@pytest.mark.parametrize("bad,backend,exec_mode", cycled_cases([[-1, CACHE], BACKENDS], [EXEC_MODES]))
def test_a_position_outside_the_cache_is_ms_rotarys_error_naming_it(bad, exec_mode, backend):
    """Never a wrapped read (the numpy backend read row 7 for -1) nor a raw "Return value ... is 15"; nothing
    is written. In a graph the error arises while it runs: MindSpore then runs that network no more
    (test_mindspore_runs_no_network_again_after_a_failed_kernel)."""
    q, k = _qk()
    before = raw_bits(q).copy()
    positions = np.arange(S)
    positions[3] = bad
    error = RuntimeError if exec_mode != "pynative" and backend == "aot" else ValueError  # MindSpore's wrapper
    with pytest.raises(error, match=rf"ms_rotary.RotaryEmbedding: position {bad} is outside the cos/sin cache "
                                    rf"\[0, {CACHE}\); build the layer with cache_positions above"):
        _run(exec_mode, _layer(backend=backend), q, k, ms.Tensor(positions))[0].asnumpy()
    np.testing.assert_array_equal(raw_bits(q), before)


class _Asserts(nn.Cell):
    def construct(self, x):
        ops.Assert()(x.min() >= 0, [x])
        return x + 1


def test_mindspore_runs_no_network_again_after_a_failed_kernel():
    """MindSpore 2.10 marks a compiled network failed for good when any kernel fails while it runs (its
    graph scheduler's is_execution_failed_, reset only for its fault-tolerance modes): its own Assert here.
    So a refused position in a graph leaves that network unusable, and the README says so."""
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        net = _Asserts()
        np.testing.assert_array_equal(net(ms.Tensor([1, 2])).asnumpy(), [2, 3])
        with pytest.raises(RuntimeError):
            net(ms.Tensor([-1, 2])).asnumpy()
        with pytest.raises(RuntimeError, match="An error occurred in the previous step of this model execution"):
            net(ms.Tensor([1, 2])).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
@pytest.mark.parametrize("form", ["list", "tuple", "numpy", "int32 tensor", "uint8 tensor"])
def test_positions_as_lists_arrays_and_other_integer_tensors_give_the_same_numbers(form, exec_mode):
    """A Python list under ms.jit used to fail with "'List' object has no attribute 'astype'"."""
    values = [0, 1, 5, 7, 2, 2]
    positions = {"list": values, "tuple": tuple(values), "numpy": np.array(values),
                 "int32 tensor": ms.Tensor(values, ms.int32), "uint8 tensor": ms.Tensor(values, ms.uint8)}[form]
    q, k = _qk()
    layer = _layer()
    q_rot, k_rot = _run(exec_mode, layer, q, k, positions)
    for got, t in ((q_rot, q), (k_rot, k)):
        np.testing.assert_allclose(got.asnumpy(), _expected(layer, t, values), rtol=1e-5, atol=1e-5)


def test_the_layer_called_at_top_level_in_graph_mode_takes_positions_as_a_list_or_array():
    """Called itself in GRAPH_MODE (no Cell of the user's around it), a list or numpy array of positions used to
    reach the compiled calls as a shape-() constant and be refused ("positions of shape () do not fit q")."""
    values = [0, 1, 5, 7, 2, 2]
    q, k = _qk()
    layer = _layer()
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        for positions in (values, np.array(values)):
            q_rot, k_rot = layer(q, k, positions)
            for got, t in ((q_rot, q), (k_rot, k)):
                np.testing.assert_allclose(got.asnumpy(), _expected(layer, t, values), rtol=1e-5, atol=1e-5)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
def test_empty_positions_with_an_empty_sequence_are_a_no_op(exec_mode):
    """positions=[] with S = 0 used to be refused as "dtype float64"."""
    q = ms.Tensor(np.ones((B, 0, NQ, D), np.float32))
    k = ms.Tensor(np.ones((B, 0, NK, D), np.float32))
    q_rot, k_rot = _run(exec_mode, _layer(), q, k, [] if exec_mode == "pynative" else ms.Tensor(np.zeros(0, np.int64)))
    assert q_rot.shape == q.shape and k_rot.shape == k.shape


class _InPlaceOpCell(nn.Cell):
    def __init__(self):
        super().__init__()
        self.op = ms_rotary.InplacePartialRotaryMul("half", [0, D])

    def construct(self, x, cos, sin):
        return self.op(x, cos, sin)


@pytest.mark.parametrize("who,view,exec_mode", [
    ("layer", "slice", "GRAPH_MODE"), ("InplacePartialRotaryMul", "transposed whole tensor", "ms.jit"),
    *(pytest.param(*case, marks=pytest.mark.slow) for case in (("layer", "transposed whole tensor", "ms.jit"),
                                                                ("InplacePartialRotaryMul", "slice", "GRAPH_MODE")))])
def test_in_place_on_a_view_inside_the_users_cell_is_refused_before_any_write(who, view, exec_mode):
    """MindSpore 2.10 writes a view passed into a graph in its logical order over the base (its own
    Tensor.add_ too) and only then raises; the caller's data was scrambled. Now the write guard refuses first:
    the base is bit for bit as it was."""
    rng = np.random.default_rng(3)
    base, _ = random_tensor(rng, (4, S, NQ, D), "float32") if view == "slice" else \
        random_tensor(rng, (S, 2, NQ, D), "float32")
    target = base[1:2] if view == "slice" else base.transpose(1, 0, 2, 3)
    assert not target.is_contiguous() or target.storage_offset()
    before = raw_bits(base).copy()
    name = "q" if who == "layer" else "x"
    with pytest.raises(RuntimeError, match=rf"cannot write {name} in place in this graph: {name} is a view"):
        if who == "layer":
            _run(exec_mode, _layer(inplace=True), target, None, ms.Tensor(np.arange(S))).asnumpy()
        else:
            cos, sin = (ms.Tensor(rng.uniform(-1, 1, (1, S, 1, D)).astype(np.float32)) for _ in range(2))
            cell = _InPlaceOpCell()
            ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
            try:
                (ms.jit(cell.construct) if exec_mode == "ms.jit" else cell)(target, cos, sin).asnumpy()
            finally:
                ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_array_equal(raw_bits(base), before)


# Each execution mode, with and without the head norm (whose weights make q's and k's results differ) and the
# backends cycling; the rest: -m slow.
@pytest.mark.parametrize("exec_mode,norm,backend", cycled_cases([EXEC_MODES], [[True, False], BACKENDS]))
def test_q_passed_as_k_in_place_is_refused_in_every_mode(exec_mode, norm, backend):
    """Eagerly refused; a graph used to write both results into the one tensor, which kept k's (q's normalised
    by k's weight). Now the graph's guard refuses it too, before anything is written."""
    q, _ = _qk(9)
    before = raw_bits(q).copy()
    rng = np.random.default_rng(9)
    wq, wk = (ms.Tensor(rng.uniform(0.5, 1.5, D).astype(np.float32)) for _ in range(2))
    layer = _layer(backend=backend, inplace=True, qk_norm_eps=1e-6 if norm else None)
    cell = NormLayerCell(layer) if norm else _UserCell(layer)
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        with pytest.raises((ValueError, RuntimeError), match="ms_rotary: k shares memory with q, which it writes in "
                                                             "place; pass k in memory of its own"):
            args = (q, q, ms.Tensor(np.arange(S)), *((wq, wk) if norm else ()))
            (ms.jit(cell.construct) if exec_mode == "ms.jit" else cell)(*args)[0].asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_array_equal(raw_bits(q), before)


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
def test_cos_in_the_memory_an_in_place_op_writes_is_refused_in_every_mode(exec_mode):
    """x passed as cos too: refused eagerly; a graph used to run it. Now refused in every mode, x untouched."""
    rng = np.random.default_rng(4)
    x, _ = random_tensor(rng, (1, S, 1, D), "float32")
    sin, _ = random_tensor(rng, (1, S, 1, D), "float32")
    before = raw_bits(x).copy()
    cell = _InPlaceOpCell()
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        with pytest.raises((ValueError, RuntimeError), match="ms_rotary: cos shares memory with x"):
            (ms.jit(cell.construct) if exec_mode == "ms.jit" else cell)(x, x, sin).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    np.testing.assert_array_equal(raw_bits(x), before)


@pytest.mark.parametrize("exec_mode", ["ms.jit", "GRAPH_MODE"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_on_a_whole_contiguous_tensor_in_a_graph_writes_it(backend, exec_mode):
    q, k = _qk(5)
    expected = [t.asnumpy() for t in _layer(backend=backend)(q, k, np.arange(S))]
    _run(exec_mode, _layer(backend=backend, inplace=True), q, k, ms.Tensor(np.arange(S)))
    for got, want in zip((q, k), expected):
        np.testing.assert_array_equal(got.asnumpy(), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_positions_sharing_memory_with_q_are_read_before_q_is_written(backend):
    """inplace=True with positions that alias q's memory used to crash the process (the kernel read a position
    after writing q's first row). The positions here are q's first S int64 words, small non-negative ints."""
    words = np.zeros((B, S, NQ, D), np.float32)
    words.reshape(-1).view(np.int32)[:2 * S:2] = [3, 1, 4, 1, 5, 2]  # int64 words 0..S-1: 3, 1, 4, 1, 5, 2
    words.reshape(-1)[2 * S:] = np.random.default_rng(1).uniform(-1, 1, words.size - 2 * S)
    q = ms.Tensor(words)
    positions = q.view(ms.int64).reshape(-1)[:S]
    expected_positions = positions.asnumpy().copy()
    np.testing.assert_array_equal(expected_positions, [3, 1, 4, 1, 5, 2])
    layer = _layer(backend=backend, inplace=True)
    expected = _layer(backend=backend)(ms.Tensor(words), None, expected_positions).asnumpy()
    assert layer(q, None, positions) is q
    np.testing.assert_array_equal(q.asnumpy(), expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inplace", [False, True])
def test_lazy_q_and_k_are_materialised_before_the_kernel_reads_them(inplace, backend):
    """A k made with init= came back as uninitialised memory (out of place) or unrotated with its version
    bumped (in place); a lazy q was refused as "bad parameter count or null pointer"."""
    from mindspore.common.initializer import One

    q, k = ms.Tensor(shape=(B, S, NQ, D), dtype=ms.float32, init=One()), \
        ms.Tensor(shape=(B, S, NK, D), dtype=ms.float32, init=One())
    layer = _layer(backend=backend, inplace=inplace)
    q_rot, k_rot = layer(q, k, np.arange(S))
    for got, heads in ((q_rot, NQ), (k_rot, NK)):
        np.testing.assert_allclose(got.asnumpy(), _expected(layer, ms.Tensor(np.ones((B, S, heads, D), np.float32)),
                                                            np.arange(S)), rtol=1e-5, atol=1e-5)
    if inplace:
        np.testing.assert_array_equal(k.asnumpy(), k_rot.asnumpy())


def _cache_gradient_reference(layer, q, k, wq, wk, positions):
    """d/dcache of sum(wq * q_rot) + sum(wk * k_rot), float64: each token's table gradient summed over heads
    and added into the cache row its lane reads."""
    (start, end), mode = layer.partial_slice, layer.rotary_mode
    lanes = np.asarray(layer.rotate_q.call.cache.lane_channels or (0,) * (end - start))
    dcos, dsin = np.zeros(layer.cos_cache.shape[1:2] + (end - start,)), np.zeros(layer.cos_cache.shape[1:2] +
                                                                                  (end - start,))
    from ms_rotary.modes import lane_pairs
    xa, xb, ya, yb = lane_pairs(mode, end - start)
    for t, w in ((q, wq), (k, wk)):
        x, g = to_float64(t)[..., start:end], to_float64(w)[..., start:end]
        per_c, per_s = np.zeros(x.shape), np.zeros(x.shape)
        per_c[..., ya], per_c[..., yb] = g[..., ya] * x[..., xa], g[..., yb] * x[..., xb]
        per_s[..., ya], per_s[..., yb] = -g[..., ya] * x[..., xb], g[..., yb] * x[..., xa]
        for b in range(x.shape[0]):
            for s in range(x.shape[1]):
                rows = positions[lanes, s] if positions.ndim == 2 else np.full(end - start, positions[s])
                np.add.at(dcos, (rows, np.arange(end - start)), per_c[b, s].sum(0))
                np.add.at(dsin, (rows, np.arange(end - start)), per_s[b, s].sum(0))
    return dcos, dsin


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
@pytest.mark.parametrize("kind", ["one channel", "M-RoPE", "two-axis M-RoPE", "quarter"])
def test_a_trainable_cache_gets_its_true_gradient(kind, exec_mode):
    """cos_cache/sin_cache set to require grad used to get silent zeros (true |dcos| up to 5.5)."""
    kwargs, positions = {"one channel": ({}, np.array([3, 1, 4, 1, 5, 3])),
                         "M-RoPE": (dict(mrope_section=(2, 3, 3)), np.array([[3, 1, 4, 1, 5, 3], [0, 0, 7, 7, 2, 2],
                                                                             [6, 5, 4, 3, 2, 1]])),
                         "two-axis M-RoPE": (dict(mrope_section=(4, 4), mrope_interleaved="alternate"),
                                             np.array([[3, 1, 4, 1, 5, 3], [0, 0, 7, 7, 2, 2]])),
                         "quarter": (dict(mode="quarter"), np.array([[3, 0], [1, 0], [4, 2], [1, 2], [5, 7],
                                                                     [3, 3]]))}[kind]
    layer = _layer(**kwargs)
    layer.cos_cache.requires_grad = layer.sin_cache.requires_grad = True
    q, k = _qk(7)
    wq, wk = _qk(8)

    class Loss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def construct(self, q, k, positions):
            q_rot, k_rot = self.layer(q, k, positions)
            return (q_rot * wq).sum() + (k_rot * wk).sum()

    grad = ms.grad(Loss(), grad_position=None, weights=[layer.cos_cache, layer.sin_cache])
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        got = (ms.jit(grad) if exec_mode == "ms.jit" else grad)(q, k, ms.Tensor(positions))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    kernel_positions = positions.T if kind == "quarter" else positions
    expected = _cache_gradient_reference(layer, q, k, wq, wk, kernel_positions)
    assert np.abs(expected[0]).max() > 0.5
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.asnumpy()[0, :, 0], e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(partial_slice=(0, 15.5)), TypeError, r"partial_slice=\(0, 15.5\) must be None \(the whole head\) or"),
    (dict(partial_slice=(0, 8, 16)), TypeError, r"partial_slice=\(0, 8, 16\) must be None"),
    (dict(mrope_section=(2.5, 3, 2.5)), ValueError, r"mrope_section=\(2.5, 3, 2.5\) must be three non-negative"),
    (dict(mrope_section=(3, 3, 3)), ValueError, r"sums to 9; rotary_dim / 2 = 8 frequencies need it to sum to that"),
    (dict(cache_positions=None), ValueError, "give cache_positions .or max_position_embeddings"),
    (dict(cache_dtype="float64"), TypeError, "cache_dtype='float64' must be ms.float32, ms.float16 or ms.bfloat16"),
    (dict(head_dim=0), ValueError, "head_dim=0 must be a positive integer"),
    (dict(partial_slice=(0, 6), rotary_mode="quarter"), ValueError, "has length 6, which rotary_mode 2 needs"),
])
def test_constructor_values_are_refused_by_name(kwargs, error, match):
    arguments = dict(head_dim=D, partial_slice=(0, D), rotary_mode="half", cache_positions=CACHE)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        RotaryEmbedding(**arguments)


def test_constructor_values_that_mean_one_thing_are_taken():
    """partial_slice=None (the whole head), a cache dtype by name, interleaved M-RoPE sections below half the
    width (transformers' Qwen3-VL: the frequencies past them turn with time) or above it (its slices stop at the
    last frequency: Qwen3-Omni's talker's default config)."""
    whole = RotaryEmbedding(D, None, "half", cache_positions=CACHE, cache_dtype="float16")
    assert whole.partial_slice == (0, D) and whole.cos_cache.dtype == ms.float16
    below = RotaryEmbedding(D, (0, D), "half", cache_positions=CACHE, mrope_section=(1, 2, 2), mrope_interleaved=True)
    frequencies = ms_rotary.tables.mrope_channels((1, 2, 2), True, D // 2)
    np.testing.assert_array_equal(frequencies, [0, 1, 2, 0, 1, 2, 0, 0])
    assert below.rotate_q.call.cache.lane_channels[:D // 2] == tuple(frequencies)
    np.testing.assert_array_equal(ms_rotary.tables.mrope_channels((3, 3, 3), True, D // 2), [0, 1, 2, 0, 1, 2, 0, 1])


def test_config_values_are_read_or_refused_by_name():
    base = dict(model_type="llama", hidden_size=64, num_attention_heads=4, max_position_embeddings=32)
    with pytest.raises(ValueError, match="num_attention_heads=0 must be a positive integer"):
        ms_rotary.RopeConfig.from_config({**base, "num_attention_heads": 0})

    class Config:  # fields as class attributes: model_type used to read as None
        model_type, hidden_size, num_attention_heads, max_position_embeddings = "llama", 64, 4, 32

    assert ms_rotary.RopeConfig.from_config(Config()).model_type == "llama"
    with pytest.raises(ValueError, match=r"mrope_section=\[16.5, 24, 23.5\] must be non-negative integers"):
        ms_rotary.RopeConfig.from_config({**base, "model_type": "qwen2_vl", "hidden_size": 256,
                                          "num_attention_heads": 2,
                                          "rope_scaling": {"mrope_section": [16.5, 24, 23.5]}})


_PEAK = """
import gc, resource, sys
import mindspore as ms
import ms_rotary
ms_rotary.RotaryEmbedding(128, (0, 128), "half", cache_positions=16)  # MindSpore's own first-use allocations
gc.collect()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
positions = int(sys.argv[1])
# the same bytes in both: the second, built after the first is freed, must not raise the peak much beyond it
for dtype, count in ((ms.float32, positions), (ms.bfloat16, 2 * positions)):
    layer = ms_rotary.RotaryEmbedding(128, (0, 128), "half", cache_positions=count, cache_dtype=dtype)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
    del layer
    gc.collect()
"""


def test_building_the_cache_peaks_at_most_one_and_a_half_times_its_size():
    """A cache of 1M positions x 128 lanes used to peak at ~4 GB, four times its size. Here 256K positions in
    fp32, then 512K in bf16 (the same 256 MiB for both caches) in a fresh process: the growth of its peak
    resident size while each layer is built."""
    positions = 1 << 18
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's ms_rotary
    done = subprocess.run([sys.executable, "-c", _PEAK, str(positions)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[-2000:]
    final = 2 * positions * 128 * 4
    for growth in (int(line) for line in done.stdout.split()[-2:]):
        assert growth <= 1.5 * final
