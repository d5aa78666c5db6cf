"""RotaryEmbedding per call, PyNative with nothing recording (CPU; run alone, two cores are easily saturated):

    python -m benchmarks.rope_layer

- decode: q [1, 1, 32, 128], k [1, 1, 8, 128], one position from a cache of 8192, half mode on the whole head:
  the layer (q and k in one call) against one built-in `add` on q, and against what users wrote before the
  layer (a table per step from rope_cos_sin plus two PartialRotaryMul calls; slicing a prebuilt table);
- prefill: q [1, 4096, 32, 128], k [1, 4096, 8, 128], positions 0..4095: the layer against rope_cos_sin plus two
  PartialRotaryMul calls, the same rotary written with plain MindSpore ops on a gathered table, and the
  same-bytes floor of an out-of-place call: q and k copied into buffers of their own on two threads.
- both, when torch is installed: the same rotation in torch (cos/sin gathered from a cache by position,
  rotate-half on q and k, out of place), eager and torch.compile'd.
Each call is timed in a loop of 100 (decode) or 10 (prefill) with one sync at the end, medians of 5 rounds.
Rows go to benchmarks/runs.csv (case "rope layer ...")."""
import importlib.util

import mindspore as ms
import numpy as np

import ms_rotary
from benchmarks.call_overhead import median_seconds  # 5 rounds, one sync per loop, median
from benchmarks.run import copy_impls
from benchmarks.runs_csv import append_rows
from examples.rope_common import plain_rotary

CACHE, D = 8192, 128


def case(name, seq, calls, rows, position):
    rng = np.random.default_rng(0)
    q = ms.Tensor(rng.uniform(-1, 1, (1, seq, 32, D)).astype(np.float32))
    k = ms.Tensor(rng.uniform(-1, 1, (1, seq, 8, D)).astype(np.float32))
    rope = ms_rotary.RotaryEmbedding(D, (0, D), "half", rope_theta=500000.0, cache_positions=CACHE)
    positions = ms.Tensor(np.arange(position, position + seq))
    op = ms_rotary.PartialRotaryMul("half", [0, D])
    cos_all, sin_all = ms_rotary.rope_cos_sin(np.arange(CACHE), D, "half", rope_theta=500000.0)

    def table_per_call():
        cos, sin = ms_rotary.rope_cos_sin(np.arange(position, position + seq), D, "half", rope_theta=500000.0)
        return op(q, cos, sin), op(k, cos, sin)

    def sliced_table():
        cos, sin = cos_all[:, position:position + seq], sin_all[:, position:position + seq]
        return op(q, cos, sin), op(k, cos, sin)

    def plain_ops():
        cos, sin = cos_all[:, position:position + seq], sin_all[:, position:position + seq]
        return plain_rotary(q, cos, sin, 0, 0, D), plain_rotary(k, cos, sin, 0, 0, D)

    implementations = {
        "RotaryEmbedding (q and k in one call)": lambda: rope(q, k, positions),
        "built-in add on q": lambda: q + q,
        "rope_cos_sin + two PartialRotaryMul": table_per_call,
        "sliced prebuilt table + two PartialRotaryMul": sliced_table,
        "plain MindSpore ops on a sliced table": plain_ops,
    }
    if seq > 1:
        moved = 2 * (q.nbytes + k.nbytes)  # read q and k, write both results
        implementations["same-bytes floor (q and k copied, 2 threads)"] = copy_impls(moved)["2-thread memcpy"]
    if importlib.util.find_spec("torch") is not None:
        implementations.update(torch_implementations(q, k, cos_all, sin_all, positions))
    times = {label: median_seconds(fn, calls) for label, fn in implementations.items()}
    ours = times["RotaryEmbedding (q and k in one call)"]
    for label, seconds in times.items():
        print(f"{name}, {label}: {seconds * 1e6:.1f} us per call, {seconds / ours:.2f}x the layer")
        rows.append((f"rope layer {name}", label, seconds, None))
    print(f"{name}: the layer / built-in add = {ours / times['built-in add on q']:.2f}x")


def torch_implementations(q, k, cos_all, sin_all, positions):
    """The same call in torch: cos/sin rows gathered by position from a [P, D] cache, rotate-half on q and k."""
    import torch

    q_t, k_t = torch.from_numpy(q.asnumpy()), torch.from_numpy(k.asnumpy())
    cos_cache, sin_cache = (torch.from_numpy(t.asnumpy()[0, :, 0]) for t in (cos_all, sin_all))
    positions_t = torch.from_numpy(positions.asnumpy())

    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), -1)

    def rope(q, k, positions):
        cos, sin = cos_cache[positions][None, :, None], sin_cache[positions][None, :, None]
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    compiled = torch.compile(rope)
    compiled(q_t, k_t, positions_t)  # compile outside the timing
    return {"torch eager": lambda: rope(q_t, k_t, positions_t),
            "torch.compile": lambda: compiled(q_t, k_t, positions_t)}


def main():
    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    rows = []
    case("decode [1, 1, 32|8, 128] at position 4000", 1, 100, rows, 4000)
    case("prefill [1, 4096, 32|8, 128]", 4096, 10, rows, 0)
    append_rows(rows)


if __name__ == "__main__":
    main()
