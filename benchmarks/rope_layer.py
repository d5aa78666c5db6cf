"""RotaryEmbedding per call, PyNative with nothing recording (CPU; run alone, two cores are easily saturated):

    python -m benchmarks.rope_layer

- decode: q [1, 1, 32, 128], k [1, 1, 8, 128], one position from a cache of 8192, half mode on the whole head:
  the layer (q and k in one call) against one built-in `add` on q, and against what users wrote before the
  layer (a table per step from rope_cos_sin plus two PartialRotaryMul calls; slicing a prebuilt table);
- prefill: q [1, 4096, 32, 128], k [1, 4096, 8, 128], positions 0..4095: the layer against rope_cos_sin plus two
  PartialRotaryMul calls, and the same rotary written with plain MindSpore ops on a gathered table.
Each call is timed in a loop of 100 (decode) or 10 (prefill) with one sync at the end, medians of 5 rounds.
Rows go to benchmarks/runs.csv (case "rope layer ...")."""

import mindspore as ms
import numpy as np

import ms_rotary
from benchmarks.call_overhead import median_seconds  # 5 rounds, one sync per loop, median
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
    times = {label: median_seconds(fn, calls) for label, fn in implementations.items()}
    ours = times["RotaryEmbedding (q and k in one call)"]
    for label, seconds in times.items():
        print(f"{name}, {label}: {seconds * 1e6:.1f} us per call, {seconds / ours:.2f}x the layer")
        rows.append((f"rope layer {name}", label, seconds, None))
    print(f"{name}: the layer / built-in add = {ours / times['built-in add on q']:.2f}x")


def main():
    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    rows = []
    case("decode [1, 1, 32|8, 128] at position 4000", 1, 100, rows, 4000)
    case("prefill [1, 4096, 32|8, 128]", 4096, 10, rows, 0)
    append_rows(rows)


if __name__ == "__main__":
    main()
