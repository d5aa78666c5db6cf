"""Reliability under odd values, odd arguments, threads, long loops and large tensors."""
import gc
import threading

import mindspore as ms
import numpy as np
import psutil
import pytest
from conftest import BACKENDS, random_tensor, to_float64
from reference import rotary_grad

import ms_rotary

# (dy shape, slice, positions set to NaN/inf in dy): narrow runs the CPU kernel's single-pair path, wide
# (36 pairs) its SIMD chunks too, width 64 its fixed-width path.
NAN_GEOMETRIES = {
    "narrow": ((2, 3, 2, 16), (4, 12), (4, 9)),
    "wide": ((2, 3, 2, 80), (3, 75), (5, 40)),
    "width 64": ((2, 3, 2, 80), (8, 72), (9, 40)),
}


@pytest.mark.parametrize("geometry", NAN_GEOMETRIES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_nan_and_inf_propagate_like_the_reference(dtype, geometry):
    shape, (start, end), (nan_at, inf_at) = NAN_GEOMETRIES[geometry]
    length = end - start
    rng = np.random.default_rng(0)
    dy_np = rng.uniform(-1, 1, shape).astype(np.float32)
    dy_np[0, 0, 0, [nan_at, inf_at]] = [np.nan, np.inf]
    dy_np[1, 2, 1, nan_at + 1] = -np.inf
    cos_np = rng.uniform(-1, 1, (1, 3, 1, length)).astype(np.float32)
    cos_np[0, 1, 0, 3] = np.inf
    sin_np = rng.uniform(-1, 1, (1, 3, 1, length)).astype(np.float32)
    sin_np[0, 2, 0, 0] = np.nan
    cos, sin = ms.Tensor(cos_np, getattr(ms, dtype)), ms.Tensor(sin_np, getattr(ms, dtype))
    bits = []
    for backend in BACKENDS:
        dy = ms.Tensor(dy_np, getattr(ms, dtype))
        expected = rotary_grad(0, to_float64(dy), to_float64(cos), to_float64(sin), start, end)
        ms_rotary.InplacePartialRotaryMulGrad(0, [start, end], backend=backend)(dy, cos, sin)
        got = to_float64(dy)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected))
        finite = np.isfinite(expected)
        np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-2, atol=1e-2)
        bits.append(dy.view(ms.int32 if dtype == "float32" else ms.int16).asnumpy())
    np.testing.assert_array_equal(bits[0], bits[1])  # NaN payloads and signs included


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_d_dy(backend, exec_mode):
    with pytest.raises(ValueError, match=r"dy must be 4-D \[B, S, N, D\] \(BSND\), got shape \(\)"):
        ms_rotary.InplacePartialRotaryMulGrad(0, [0, 2], backend=backend)(
            ms.Tensor(1.0), ms.Tensor(np.ones((1, 1, 1, 2), np.float32)), ms.Tensor(np.ones((1, 1, 1, 2), np.float32)))


@pytest.mark.parametrize("partial_slice", [[0, 2**40], [2**62, 2**62 + 8]])
def test_huge_slice_values(partial_slice, exec_mode, backend):
    dy, _ = random_tensor(np.random.default_rng(1), (1, 2, 1, 16), "float32")
    cos, _ = random_tensor(np.random.default_rng(2), (1, 2, 1, 8), "float32")
    before = dy.asnumpy().copy()
    with pytest.raises(ValueError, match="is out of range; need 0 <= start <= end <= D=16"):
        ms_rotary.InplacePartialRotaryMulGrad(0, partial_slice, backend=backend)(dy, cos, cos.copy())
    np.testing.assert_array_equal(dy.asnumpy(), before)


def test_sin_as_a_view_into_dy_is_refused(backend):
    dy, _ = random_tensor(np.random.default_rng(3), (1, 2, 1, 16), "float32")
    cos, _ = random_tensor(np.random.default_rng(4), (1, 2, 1, 8), "float32")
    before = dy.asnumpy().copy()
    with pytest.raises(ValueError, match="sin shares memory with dy"):
        ms_rotary.InplacePartialRotaryMulGrad(0, [8, 16], backend=backend)(dy, cos, dy[..., 0:8])
    np.testing.assert_array_equal(dy.asnumpy(), before)


@pytest.mark.parametrize("mode", range(4))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("partial_slice", [(0, 1024), (512, 1024)])
def test_head_dim_1024_every_mode(mode, dtype, partial_slice):
    rng = np.random.default_rng(mode)
    start, end = partial_slice
    dy, dy64 = random_tensor(rng, (2, 3, 2, 1024), dtype)
    cos, cos64 = random_tensor(rng, (1, 3, 2, end - start), dtype)
    sin, sin64 = random_tensor(rng, (1, 3, 2, end - start), dtype)
    ms_rotary.InplacePartialRotaryMulGrad(mode, list(partial_slice))(dy, cos, sin)
    tol = 1e-5 if dtype == "float32" else 4e-3
    np.testing.assert_allclose(to_float64(dy), rotary_grad(mode, dy64, cos64, sin64, start, end), rtol=tol, atol=tol)


def test_threads_on_separate_tensors(backend):
    """Python threads calling the ops at once, each on its own tensors, all get correct results."""
    errors = []

    def worker(seed):
        try:
            rng = np.random.default_rng(seed)
            mode = seed % 4
            op = ms_rotary.InplacePartialRotaryMulGrad(mode, [0, 16], backend=backend)
            for _ in range(30):
                dy, dy64 = random_tensor(rng, (2, 64, 4, 32), "float32")
                cos, cos64 = random_tensor(rng, (1, 64, 1, 16), "float32")
                sin, sin64 = random_tensor(rng, (1, 64, 1, 16), "float32")
                op(dy, cos, sin)
                np.testing.assert_allclose(to_float64(dy), rotary_grad(mode, dy64, cos64, sin64, 0, 16),
                                           rtol=1e-5, atol=1e-5)
        except Exception as error:  # reported below, with the thread's seed
            errors.append((seed, repr(error)))

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_no_memory_growth_over_10000_calls_with_changing_shapes():
    shapes = [(1, 4, 2, 16), (2, 8, 1, 32), (1, 1, 1, 8), (3, 2, 4, 64), (1, 16, 2, 24)]
    rng = np.random.default_rng(5)
    cases = []
    for shape in shapes:
        dy, _ = random_tensor(rng, shape, "float32")
        cos, _ = random_tensor(rng, (1, shape[1], 1, 8), "float32")
        sin, _ = random_tensor(rng, (1, shape[1], 1, 8), "float32")
        cases.append((ms_rotary.InplacePartialRotaryMulGrad(1, [0, 8]), dy, cos, sin))
    process = psutil.Process()

    def loop(calls):
        for index in range(calls):
            op, dy, cos, sin = cases[index % len(cases)]
            op(dy, cos, sin)

    loop(2000)
    gc.collect()
    before = process.memory_info().rss
    loop(10000)
    gc.collect()
    growth = process.memory_info().rss - before
    assert growth < 8 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB over 10,000 calls"
    # and no state leaked between shapes: the last tensors still give the reference result
    op, dy, cos, sin = cases[0]
    dy64 = to_float64(dy)
    op(dy, cos, sin)
    np.testing.assert_allclose(to_float64(dy), rotary_grad(1, dy64, to_float64(cos), to_float64(sin), 0, 8),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_more_than_2_to_the_31_elements():
    """64-bit indexing: a bf16 dy of 2**31 + 2**14 elements (4 GiB); the last rows are checked."""
    bf16 = ms.Tensor(np.zeros(1, np.float32), ms.bfloat16).asnumpy().dtype
    rows = 2**17 + 1  # S; dy [1, S, 128, 128]
    dy_np = np.zeros((1, rows, 128, 128), bf16)
    rng = np.random.default_rng(6)
    tail = rng.uniform(-1, 1, (1, 2, 128, 128)).astype(np.float32)
    dy_np[:, -2:] = tail.astype(bf16)
    dy = ms.Tensor(dy_np)
    del dy_np
    cos_np = rng.uniform(-1, 1, (1, rows, 1, 64)).astype(np.float32)
    sin_np = rng.uniform(-1, 1, (1, rows, 1, 64)).astype(np.float32)
    ms_rotary.InplacePartialRotaryMulGrad(1, [64, 128])(dy, ms.Tensor(cos_np), ms.Tensor(sin_np))
    got = dy[:, -2:].float().asnumpy().astype(np.float64)
    tail64 = tail.astype(bf16).astype(np.float64)
    expected = rotary_grad(1, tail64, cos_np[:, -2:], sin_np[:, -2:], 64, 128)
    np.testing.assert_allclose(got, expected, rtol=4e-3, atol=4e-3)
