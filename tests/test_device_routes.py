"""Eager calls as on a device whose memory the host does not write (Ascend): routes.on_host says no, so the
ops and the layer run through their graph nodes (ops.Custom in PyNative, here with the CPU kernels) and an
in-place call writes its result with MindSpore's InplaceCopy. The Ascend kernels themselves need an NPU; the
routing around them is the same Python and is checked here, against the on-host results bit for bit."""
import numpy as np
import pytest
from conftest import random_tensor

import ms_rotary
from ms_rotary import routes

B, S, NQ, NK, D = 2, 5, 4, 2, 64
POSITIONS = np.array([[7, 8, 9, 10, 11], [0, 1, 2, 0, 1]])


@pytest.fixture
def off_host(monkeypatch):
    monkeypatch.setattr(routes, "on_host", lambda device_target: False)


def _inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (random_tensor(rng, (B, S, n, D), dtype)[0] for n in (NQ, NK))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("inplace", [False, True], ids=["out of place", "in place"])
def test_the_layer_off_host_equals_the_layer_on_host(monkeypatch, dtype, inplace):
    layer_args = dict(head_dim=D, partial_slice=(16, 64), rotary_mode="half", cache_positions=32)
    q, k = _inputs(dtype)
    expected = ms_rotary.RotaryEmbedding(**layer_args)(q, k, POSITIONS)  # on host: the kernel on q's memory
    monkeypatch.setattr(routes, "on_host", lambda device_target: False)
    layer = ms_rotary.RotaryEmbedding(**layer_args, inplace=inplace)
    got = layer(q, k, POSITIONS)
    for want, out, source in zip(expected, got, (q, k)):
        np.testing.assert_array_equal(out.float().asnumpy(), want.float().asnumpy())
        if inplace:
            assert out is source
            np.testing.assert_array_equal(source.float().asnumpy(), want.float().asnumpy())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_in_place_op_off_host_writes_x(off_host, dtype):
    """Before this was routed, the in-place op off host rotated a copy and left x as it was."""
    rng = np.random.default_rng(1)
    x = random_tensor(rng, (B, S, NQ, D), dtype)[0]
    cos, sin = (random_tensor(rng, (1, S, 1, 48), "float32")[0] for _ in range(2))
    expected = ms_rotary.PartialRotaryMul(0, [16, 64])(x, cos, sin).asnumpy()
    before = x.asnumpy().copy()
    version = x._version
    out = ms_rotary.InplacePartialRotaryMul(0, [16, 64])(x, cos, sin)
    assert out is x and x._version > version
    np.testing.assert_array_equal(x.asnumpy(), expected)
    assert not np.array_equal(before, expected)


def test_a_position_outside_the_cache_is_refused_before_anything_runs(off_host):
    layer = ms_rotary.RotaryEmbedding(D, (16, 64), "half", cache_positions=8, inplace=True)
    q, k = _inputs("float32")
    q_before = q.asnumpy().copy()
    with pytest.raises(ValueError, match=r"position 11 is outside the cos/sin cache \[0, 8\)"):
        layer(q, k, POSITIONS)
    np.testing.assert_array_equal(q.asnumpy(), q_before)


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_the_kv_cache_write_off_host_runs_its_ops_and_equals_the_host_write(monkeypatch, paged):
    """RotaryEmbedding.prologue on a device: the rows go in with MindSpore's ScatterNdUpdate in PyNative (the host's
    memory write is the CPU's only); the caches end bit for bit as the host write leaves them, and a row outside
    the cache or named for two tokens is still refused by name with nothing written."""
    import mindspore as ms

    layer_args = dict(head_dim=D, partial_slice=None, rotary_mode="half", cache_positions=32, qk_norm_eps=1e-6)
    q, k = _inputs("float32")
    v = k * 2
    weights = (ms.Tensor(np.linspace(0.5, 1.5, D).astype(np.float32)),) * 2
    shape = (32, NK, D) if paged else (B, 32, NK, D)
    slots = ms.Tensor(np.array([[3, 30, 4, 5, 6], [7, 0, 1, 2, 31]])) if paged else None
    # a contiguous cache takes each batch row's tokens at positions of their own (POSITIONS' packed row repeats 0, 1)
    positions = POSITIONS if paged else np.array([[7, 8, 9, 10, 11], [0, 1, 2, 3, 4]])
    caches = {}
    for where in ("host", "device"):
        if where == "device":
            monkeypatch.setattr(routes, "on_host", lambda device_target: False)
        layer = ms_rotary.RotaryEmbedding(**layer_args)
        k_cache, v_cache = (ms.Tensor(np.full(shape, -1.0, np.float32)) for _ in range(2))
        q_rot = layer.prologue(q, k, v, positions, k_cache, v_cache, slots, *weights)
        caches[where] = (q_rot.asnumpy(), k_cache.asnumpy(), v_cache.asnumpy())
    for host, device in zip(caches["host"], caches["device"]):
        np.testing.assert_array_equal(device, host)
    layer = ms_rotary.RotaryEmbedding(**{**layer_args, "cache_positions": 64})
    outside = (POSITIONS, ms.Tensor(np.array([[3, 30, 4, 5, 6], [7, 0, 1, 2, 32]]))) if paged else \
        (np.where(positions == 11, 32, positions), None)
    twice = (POSITIONS, ms.Tensor(np.array([[3, 30, 4, 5, 6], [7, 0, 1, 2, 3]]))) if paged else (POSITIONS, None)
    for (rows, bad), match in ((outside, "is outside the KV cache's 32 rows"),
                               (twice, "names one KV cache row for two tokens")):
        k_cache, v_cache = (ms.Tensor(np.full(shape, -1.0, np.float32)) for _ in range(2))
        with pytest.raises((ValueError, RuntimeError), match=match):
            layer.prologue(q, k, v, rows, k_cache, v_cache, bad, *weights).asnumpy()
        assert (k_cache.asnumpy() == -1).all() and (v_cache.asnumpy() == -1).all()
