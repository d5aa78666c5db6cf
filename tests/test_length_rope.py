"""RotaryEmbedding with rope types whose frequencies follow the sequence length (dynamic NTK, longrope): each
call's rows from its own length L = max(positions) + 1, against the formulas written out in test_tables
(float64), below and past the switch, in a decode loop that crosses it (one compiled graph serving every
step), with gradients and the inverse rotation; against transformers' own rotary classes, stepped as its
models step them, when it is installed. Also `inverse` on a plain cache."""
import mindspore as ms
import numpy as np
import pytest
from conftest import BACKENDS, cycled_cases, random_tensor, to_float64
from reference import rotary_forward, rotary_grad
from test_embedding import _run
from test_layer_rules import _run as _run_in_user_cell
from test_tables import CONFIGS, expected_angles

from ms_rotary import RotaryEmbedding
from tools.rope_families import MATCH, torch_in_float64

EXEC_MODES = ["pynative", "ms.jit", "GRAPH_MODE"]
# name in test_tables.CONFIGS: (head_dim, rotated lanes); the switch: where the frequencies start to change
LAYERS = {"dynamic x2": (72, (4, 68)), "longrope phi3": (24, (8, 24))}
SWITCH = {"dynamic x2": 4096, "longrope phi3": 4096}


def _layer(name, mode, backend="aot", **kwargs):
    dim, base, scaling, max_pos = CONFIGS[name]
    head_dim, lanes = LAYERS[name]
    return RotaryEmbedding(head_dim, list(lanes), mode, rope_theta=base, rope_scaling=scaling,
                           max_position_embeddings=max_pos, backend=backend, **kwargs)


def _expected_tables(name, mode, positions):
    """cos, sin [B, S, 1, L] float64 at each position for the call's length, in the mode's lane layout."""
    positions = np.asarray(positions).reshape(-1, np.shape(positions)[-1])
    angles, attention = expected_angles(name, positions.reshape(-1), seq_len=int(positions.max()) + 1)
    lanes = np.concatenate([angles, angles], -1) if mode in (0, 3) else np.repeat(angles, 2, -1)
    shape = positions.shape + (1, lanes.shape[-1])
    return (attention * np.cos(lanes)).reshape(shape), (attention * np.sin(lanes)).reshape(shape)


class Rotate(ms.nn.Cell):
    """The layer inside a user's compiled Cell: forward, and the inverse of the result."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def construct(self, q, k, positions):
        q_rot, k_rot = self.layer(q, k, positions)
        return q_rot, k_rot, self.layer.inverse(q_rot, k_rot, positions)


@pytest.mark.parametrize("name,mode,backend,exec_mode",
                         cycled_cases([list(LAYERS), [0, 1]], [BACKENDS, EXEC_MODES]))
@pytest.mark.parametrize("positions", [[[0, 1, 2, 7, 100, 4095], [3, 4, 5, 6, 7, 8]],
                                       [[0, 7, 100, 4095, 8191, 12000], [0, 1, 2, 0, 1, 5000]]],
                         ids=["below the switch", "past it"])
def test_rows_follow_the_calls_length(name, mode, backend, exec_mode, positions):
    """Each call's rows are the formulas' at L = max(positions) + 1 of the whole batch; the inverse is R^T."""
    rng = np.random.default_rng(mode)
    head_dim, (start, end) = LAYERS[name]
    q, q64 = random_tensor(rng, (2, 6, 4, head_dim), "float32")
    k, k64 = random_tensor(rng, (2, 6, 2, head_dim), "float32")
    layer = _layer(name, mode, backend)
    q_rot, k_rot, (q_back, k_back) = _run(exec_mode, Rotate(layer), q, k, ms.Tensor(positions))
    cos, sin = _expected_tables(name, mode, positions)
    for got, t64 in ((q_rot, q64), (k_rot, k64)):
        expected = rotary_forward(mode, t64, cos, sin, start, end)
        np.testing.assert_allclose(to_float64(got), expected, rtol=1e-5, atol=1e-5)
    for got, rotated in ((q_back, q_rot), (k_back, k_rot)):
        expected = rotary_grad(mode, to_float64(rotated), cos, sin, start, end)
        np.testing.assert_allclose(to_float64(got), expected, rtol=1e-5, atol=1e-5)


def test_the_lengths_change_the_rows():
    """Guards the test above from passing on a layer that ignores the length: past the switch, the rows differ
    from the plain frequencies' by far more than the tolerance."""
    for name in LAYERS:
        positions = np.array([[0, 7, 100, 4095, 8191, 12000]])
        past, _ = _expected_tables(name, 0, positions)
        below, _ = _expected_tables(name, 0, np.concatenate([positions[:, :-3], [[0, 1, 2]]], -1))
        assert np.abs(past[:, :3] - below[:, :3]).max() > 0.01, name


@pytest.mark.parametrize("exec_mode", ["pynative", "GRAPH_MODE"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_a_decode_loop_across_the_switch_takes_each_steps_length(name, exec_mode):
    """Prefill below the switch, then one token a step across it: each step's rows are those of its own
    length (transformers' for a growing sequence), and one compiled graph serves every step."""
    head_dim, (start, end) = LAYERS[name]
    layer = _layer(name, 0)
    rng = np.random.default_rng(5)
    switch = SWITCH[name]
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        for position in range(switch - 2, switch + 2):
            q, q64 = random_tensor(rng, (1, 1, 2, head_dim), "float32")
            got = layer(q, None, ms.Tensor([[position]]))
            cos, sin = _expected_tables(name, 0, [[position]])
            expected = rotary_forward(0, q64, cos, sin, start, end)
            np.testing.assert_allclose(to_float64(got), expected, rtol=1e-5, atol=1e-5)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
def test_gradients_are_the_inverse_rotation(exec_mode):
    """d sum(w * rotate(q)) / dq = R^T w, which the layer names `inverse`."""
    layer = _layer("longrope phi3", 1)
    positions = ms.Tensor([[0, 3, 5000]])
    rng = np.random.default_rng(2)
    q, _ = random_tensor(rng, (1, 3, 2, 24), "float32")
    w, _ = random_tensor(rng, (1, 3, 2, 24), "float32")

    def loss(q, positions):
        return (layer(q, None, positions) * w).sum()

    grad = _run(exec_mode, ms.grad(loss), q, positions)
    np.testing.assert_allclose(grad.asnumpy(), layer.inverse(w, None, positions).asnumpy(), rtol=1e-6, atol=1e-6)


# A refusal inside a graph costs MindSpore's 3 s wait after a failed kernel: each backend in one mode (cycling).
@pytest.mark.parametrize("backend,exec_mode", cycled_cases([BACKENDS], [["pynative", "GRAPH_MODE"]]))
def test_a_negative_position_is_refused_by_name_before_anything_is_written(backend, exec_mode):
    """In place, inside a user's Cell: q and k as they were."""
    layer = _layer("dynamic x2", 0, backend, inplace=True)
    q, k = ms.Tensor(np.ones((1, 3, 2, 72), np.float32)), ms.Tensor(np.ones((1, 3, 1, 72), np.float32))
    error = RuntimeError if exec_mode != "pynative" and backend == "aot" else ValueError  # MindSpore's wrapper
    with pytest.raises(error, match=r"RotaryEmbedding: position -2 is negative; positions must be >= 0"):
        _run_in_user_cell(exec_mode, layer, q, k, ms.Tensor([[0, -2, 5000]]))[0].asnumpy()
    np.testing.assert_array_equal(q.asnumpy(), 1.0)
    np.testing.assert_array_equal(k.asnumpy(), 1.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(cache_positions=8192), "computes each call's cos/sin rows .* leave cache_positions=8192 out"),
    (dict(mrope_section=(8, 12, 12)), "one position a token, not quarter mode's two or M-RoPE's several"),
])
def test_options_a_length_dependent_layer_cannot_serve_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _layer("dynamic x2", 0, **kwargs)


def test_empty_positions_are_a_no_op():
    layer = _layer("dynamic x2", 0)
    q = ms.Tensor(np.ones((1, 0, 2, 72), np.float32))
    assert layer(q, None, np.zeros((1, 0), np.int64)).shape == (1, 0, 2, 72)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_inverse_undoes_a_plain_caches_rotation_in_place_and_in_a_graph(mode):
    """On a cache without an attention factor R^T R = I: `inverse` returns q, in place too."""
    rng = np.random.default_rng(mode)
    layer = RotaryEmbedding(48, [8, 40], mode, rope_theta=500.0, cache_positions=64)
    positions = np.array([[3, 4, 63], [0, 1, 2]]) if mode != 2 else np.array([[[3, 0], [4, 0], [63, 1]]] * 2)
    q, _ = random_tensor(rng, (2, 3, 4, 48), "float32")
    k, _ = random_tensor(rng, (2, 3, 1, 48), "float32")
    _, _, (q_back, k_back) = _run("GRAPH_MODE", Rotate(layer), q, k, ms.Tensor(positions))
    np.testing.assert_allclose(q_back.asnumpy(), q.asnumpy(), atol=2e-6)
    np.testing.assert_allclose(k_back.asnumpy(), k.asnumpy(), atol=2e-6)
    in_place = RotaryEmbedding(48, [8, 40], mode, rope_theta=500.0, cache_positions=64, inplace=True)
    rotated = in_place(q.copy(), None, positions)
    assert in_place.inverse(rotated, None, positions) is rotated
    np.testing.assert_allclose(rotated.asnumpy(), q.asnumpy(), atol=2e-6)


# transformers' families: (model_type, config kwargs, modeling module)
HF_LENGTH_DEPENDENT = {
    "Llama (dynamic NTK)": ("llama", dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
                                          max_position_embeddings=4096,
                                          rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                           "rope_theta": 10000.0}), "llama"),
    "Phi-3 (longrope, partial 0.5)": (
        "phi3", dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=131072,
                     original_max_position_embeddings=4096, partial_rotary_factor=0.5,
                     rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                      "short_factor": list(np.linspace(1.0, 2.0, 8)),
                                      "long_factor": list(np.linspace(1.0, 40.0, 8))}), "phi3"),
}


@pytest.mark.parametrize("exec_mode", ["pynative", "GRAPH_MODE"])
@pytest.mark.parametrize("family", HF_LENGTH_DEPENDENT)
def test_from_config_matches_transformers_in_prefill_and_in_decode_across_the_switch(family, exec_mode):
    """transformers' rotary class called as its model calls it: a prefill past 3000 (shorter than the switch,
    then longer), then decode steps one position each across the original maximum (its state carried)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import importlib
    model_type, kwargs, module_name = HF_LENGTH_DEPENDENT[family]
    config = transformers.CONFIG_MAPPING[model_type](**kwargs)
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    with torch_in_float64():  # transformers' own code, its fp32 casts made float64
        rotary = next(getattr(module, name) for name in dir(module) if name.endswith("RotaryEmbedding"))(config)
    layer = RotaryEmbedding.from_config(config.to_dict())
    start, end = layer.partial_slice
    rng = np.random.default_rng(11)
    calls = [np.array([0, 1, 5, 17, 300, 3100]), np.array([0, 7, 3100, 4095, 4096, 6000])]
    calls += [np.array([p]) for p in range(4094, 4099)]
    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "GRAPH_MODE" else ms.PYNATIVE_MODE)
    try:
        for positions in calls:
            q = rng.uniform(-1, 1, (1, len(positions), 2, layer.head_dim)).astype(np.float32)
            with torch_in_float64():
                cos, sin = rotary(torch.zeros(1), torch.tensor(positions[None]))
                part = torch.tensor(q[..., start:end]).transpose(1, 2)
                expected, _ = module.apply_rotary_pos_emb(part, part, cos, sin)
            expected = expected.transpose(1, 2).numpy()
            got = layer(ms.Tensor(q), None, ms.Tensor(positions))
            np.testing.assert_allclose(got.asnumpy()[..., start:end], expected, atol=MATCH * np.abs(expected).max(),
                                       rtol=0)
            np.testing.assert_array_equal(got.asnumpy()[..., end:], q[..., end:])
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
