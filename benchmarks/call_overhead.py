"""Per-call cost of the in-place forward in PyNative, with autograd recording and without: what each route
(functions.py) adds to a call. Run alone (2 cores are easily saturated):

    python -m benchmarks.call_overhead            # medians over rounds, microseconds per call

- not recording: the op on a tiny tensor (the kernel writes it in place), and on a [4, 4096, 32, 128] fp32
  tensor from memory (ms per call);
- recording: ms.value_and_grad of a function making K calls, each on a tensor of its own (as each layer
  rotates its own q), minus the same function with each call replaced by the identity, per call: the forward
  route (view, out-of-place kernel, rebinding, version bump) plus its backward; and K calls in a row on one
  tensor;
- beside each recording figure, the same rotary written with plain MindSpore ops (examples/rope_common.py).

Rows go to runs.csv (case "per call ...", benchmarks/runs_csv.py says where)."""
import argparse
import statistics
import time

import mindspore as ms
import numpy as np
from mindspore.graph.api import _pynative_executor

import ms_rotary
from benchmarks.runs_csv import append_rows
from examples.rope_common import plain_rotary

ROUNDS = 5


def median_seconds(fn, repeats):
    samples = []
    for _ in range(ROUNDS):
        fn()  # warm (compiles, caches)
        _pynative_executor.sync()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        _pynative_executor.sync()
        samples.append((time.perf_counter() - start) / repeats)
    return statistics.median(samples)


def tensors(shape, length, seed=0):
    rng = np.random.default_rng(seed)
    x = ms.Tensor(rng.uniform(-1, 1, shape).astype(np.float32))
    cos = ms.Tensor(rng.uniform(-1, 1, (1, shape[1], 1, length)).astype(np.float32))
    return x, cos, cos * 0.5


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="calls per recorded function (K)")
    args = parser.parse_args()
    op = ms_rotary.InplacePartialRotaryMul(0, [0, 8])
    rows = []

    def report(case, implementation, seconds, unit):
        scale = 1e6 if unit == "us" else 1e3
        print(f"{case}, {implementation}: {seconds * scale:.1f} {unit} per call")
        rows.append((f"per call, {case}", implementation, seconds, None))

    tiny, cos, sin = tensors((1, 2, 1, 16), 8)
    report("not recording, tiny tensor", "ms_rotary", median_seconds(lambda: op(tiny, cos, sin), 500), "us")
    big, big_cos, big_sin = tensors((4, 4096, 32, 128), 64)
    big_op = ms_rotary.InplacePartialRotaryMul(0, [0, 64])
    report("not recording, [4, 4096, 32, 128] fp32", "ms_rotary",
           median_seconds(lambda: big_op(big, big_cos, big_sin), 3), "ms")

    def plain(q, cos, sin):
        return plain_rotary(q, cos, sin, 0, 0, cos.shape[-1])

    def identity(q, cos, sin):
        return q

    def with_calls(rotate, chained):
        def loss(x):
            total = x.sum()
            q = x * 1.0
            for i in range(args.calls):
                q = rotate(q if chained else x * float(i + 1), cos, sin)
                total = total + q.sum()
            return total
        return ms.value_and_grad(loss)

    x = tiny.copy()
    for chained in (False, True):
        case = (f"recording, tiny tensor, {args.calls} calls in a row on one tensor" if chained
                else "recording, tiny tensor, each call on its own tensor")
        baseline = median_seconds(lambda: with_calls(identity, chained)(x), 10)
        for name, rotate in (("ms_rotary", op), ("plain MindSpore ops", plain)):
            grad = with_calls(rotate, chained)
            report(case, name, (median_seconds(lambda: grad(x), 10) - baseline) / args.calls, "us")

    def big_grad(rotate):
        return ms.value_and_grad(lambda x: rotate(x * 1.0, big_cos, big_sin).sum())

    big_baseline = median_seconds(lambda: big_grad(identity)(big), 2)
    for name, rotate in (("ms_rotary", big_op), ("plain MindSpore ops", plain)):
        grad = big_grad(rotate)
        report("recording, [4, 4096, 32, 128] fp32", name, median_seconds(lambda: grad(big), 2) - big_baseline, "ms")
    append_rows(rows)

if __name__ == "__main__":
    main()
