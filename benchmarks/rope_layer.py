"""RotaryEmbedding per call, PyNative with nothing recording (CPU; run alone, two cores are easily saturated):

    python -m benchmarks.rope_layer

- decode: q [1, 1, 32, 128], k [1, 1, 8, 128], one position from a cache of 8192, half mode on the whole head,
  a new positions tensor each call as a decode loop makes it: the layer (q and k in one call) against one
  built-in `add` on q, and against what users wrote before the
  layer (a table per step from rope_cos_sin plus two PartialRotaryMul calls; slicing a prebuilt table);
- prefill: q [1, 4096, 32, 128], k [1, 4096, 8, 128], positions 0..4095: the layer (and with inplace=True)
  against rope_cos_sin plus two PartialRotaryMul calls, the same rotary written with plain MindSpore ops on a
  gathered table, and the same-bytes floor of an out-of-place call: q and k copied into buffers of their own on
  two threads, kept between calls, and copied into buffers MindSpore allocates per call as any op's results
  (here glibc maps results over 32 MiB afresh each time: the OS zeroes their pages). The ratios to the floors
  are also taken from 30 interleaved rounds (median and quartiles), less exposed to this host's drifting
  memory bandwidth than separate medians.
- both, when torch is installed: the same rotation in torch (cos/sin gathered from a cache by position,
  rotate-half on q and k, out of place), eager and torch.compile'd.
Each call is timed in a loop of 100 (decode) or 10 (prefill) with one sync at the end, medians of 5 rounds;
the decode case with MindSpore's ops synchronous (synchronous_ops).
Rows go to runs.csv (case "rope layer ...", benchmarks/runs_csv.py says where)."""
import contextlib
import importlib.util
import threading
import time

import mindspore as ms
import numpy as np
from mindspore import mint
from mindspore.graph.api import _pynative_executor

import ms_rotary
from benchmarks.call_overhead import median_seconds  # 5 rounds, one sync per loop, median
from benchmarks.run import _memcpy, copy_impls
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

    def new_positions():  # a decode loop makes each step's positions afresh; prefill's are made once
        return ms.Tensor(np.arange(position, position + seq)) if seq == 1 else positions

    implementations = {
        "RotaryEmbedding (q and k in one call)": lambda: rope(q, k, new_positions()),
        "built-in add on q": lambda: q + q,
        "rope_cos_sin + two PartialRotaryMul": table_per_call,
        "sliced prebuilt table + two PartialRotaryMul": sliced_table,
        "plain MindSpore ops on a sliced table": plain_ops,
    }
    if seq > 1:
        moved = 2 * (q.nbytes + k.nbytes)  # read q and k, write both results
        floor = copy_impls(moved)["2-thread memcpy"]
        implementations["same-bytes floor (q and k copied, 2 threads)"] = floor
        implementations["same-bytes floor into fresh MindSpore results"] = lambda: fresh_copies(q, k)
        in_place = ms_rotary.RotaryEmbedding(D, (0, D), "half", rope_theta=500000.0, cache_positions=CACHE,
                                             inplace=True)
        implementations["RotaryEmbedding inplace=True"] = lambda: in_place(q, k, positions)
    if importlib.util.find_spec("torch") is not None:
        implementations.update(torch_implementations(q, k, cos_all, sin_all, positions))
    times = {label: median_seconds(fn, calls) for label, fn in implementations.items()}
    ours = times["RotaryEmbedding (q and k in one call)"]
    for label, seconds in times.items():
        print(f"{name}, {label}: {seconds * 1e6:.1f} us per call, {seconds / ours:.2f}x the layer")
        rows.append((f"rope layer {name}", label, seconds, None))
    print(f"{name}: the layer / built-in add = {ours / times['built-in add on q']:.2f}x")
    pairs = {"the layer / the same-bytes floor": ("RotaryEmbedding (q and k in one call)",
                                                  "same-bytes floor (q and k copied, 2 threads)"),
             "the layer / the floor into fresh results": ("RotaryEmbedding (q and k in one call)",
                                                          "same-bytes floor into fresh MindSpore results"),
             "inplace=True / the same-bytes floor": ("RotaryEmbedding inplace=True",
                                                     "same-bytes floor (q and k copied, 2 threads)")}
    for label, (first, second) in pairs.items() if seq > 1 else ():
        quartiles = interleaved_ratios(implementations[first], implementations[second], calls)
        print(f"{name}: {label}, 30 interleaved rounds: median {quartiles[1]:.2f}x "
              f"(quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f})")


def fresh_copies(q, k):
    """q and k copied into new MindSpore tensors (allocated as any op's results), one thread each."""
    outs = [mint.empty_like(q), mint.empty_like(k)]
    _pynative_executor.sync()
    workers = [threading.Thread(target=_memcpy, args=(out.data_ptr(), src.data_ptr(), src.nbytes))
               for out, src in zip(outs, (q, k))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return outs


def interleaved_ratios(fn, floor, calls, rounds=30):
    """Quartiles of fn's time over floor's, each round timing `calls` calls of one, then of the other."""
    ratios = []
    for _ in range(rounds):
        seconds = []
        for timed_fn in (fn, floor):
            _pynative_executor.sync()
            start = time.perf_counter()
            for _ in range(calls):
                timed_fn()
            _pynative_executor.sync()
            seconds.append(time.perf_counter() - start)
        ratios.append(seconds[0] / seconds[1])
    return tuple(float(v) for v in np.percentile(ratios, [25, 50, 75]))


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


@contextlib.contextmanager
def synchronous_ops():
    """MindSpore 2.10's asynchronous PyNative queue, on the 2-core VMs measured here, now and then costs ~4 ms
    an op (a built-in `add` on q: 30-80 us, then 3.9-4.0 ms a call for minutes; a 4-ms timer tick, NOTES.md,
    issue 37): a decode case's baseline op would read 100x slower than it is. With ops synchronous it keeps its
    30-80 us in every run seen, which is also the stricter baseline (no queue to overlap)."""
    ms.set_context(pynative_synchronize=True)
    try:
        yield
    finally:
        ms.set_context(pynative_synchronize=False)


def main():
    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    rows = []
    with synchronous_ops():
        case("decode [1, 1, 32|8, 128] at position 4000", 1, 100, rows, 4000)
    case("prefill [1, 4096, 32|8, 128]", 4096, 10, rows, 0)
    append_rows(rows)


if __name__ == "__main__":
    main()
