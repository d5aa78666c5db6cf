"""Per-call cost of the in-place forward in PyNative, with autograd recording and without: what each route
(functions.py) adds to a call. Run alone (2 cores are easily saturated):

    python benchmarks/call_overhead.py            # medians over rounds, microseconds per call

- not recording: the op on a tiny tensor (the kernel writes it in place), and on a [4, 4096, 32, 128] fp32
  tensor from memory (ms per call);
- recording: ms.value_and_grad of a function making K calls, each on a tensor of its own (as each layer
  rotates its own q), minus the same function with each call replaced by the identity, per call: the forward route (view,
  out-of-place kernel, rebinding, version bump) plus its backward; and K calls in a row on one tensor, where
  the n-th call moves the version counter n times (functions.py)."""
import argparse
import statistics
import time

import mindspore as ms
import numpy as np
from mindspore.graph.api import _pynative_executor

import ms_rotary

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

    tiny, cos, sin = tensors((1, 2, 1, 16), 8)
    print(f"not recording, tiny tensor: {median_seconds(lambda: op(tiny, cos, sin), 500) * 1e6:.1f} us per call")
    big, big_cos, big_sin = tensors((4, 4096, 32, 128), 64)
    big_op = ms_rotary.InplacePartialRotaryMul(0, [0, 64])
    print(f"not recording, [4, 4096, 32, 128] fp32: {median_seconds(lambda: big_op(big, big_cos, big_sin), 3) * 1e3:.1f}"
          f" ms per call")

    def with_calls(rotate, chained):
        def loss(x):
            total = x.sum()
            q = x * 1.0
            for i in range(args.calls):
                q = rotate(q if chained else x * float(i + 1), cos, sin)
                total = total + q.sum()
            return total
        return ms.value_and_grad(loss)

    def identity(q, cos, sin):
        return q

    x = tiny.copy()
    for chained in (False, True):
        with_k, without = with_calls(op, chained), with_calls(identity, chained)
        per_call = (median_seconds(lambda: with_k(x), 10) - median_seconds(lambda: without(x), 10)) / args.calls
        what = f"{args.calls} calls in a row on one tensor" if chained else "each call on its own tensor"
        print(f"recording, tiny tensor, {what}: {per_call * 1e6:.1f} us per call (forward and backward)")

    def big_loss(x):
        return big_op(x * 1.0, big_cos, big_sin).sum()

    def big_baseline(x):
        return (x * 1.0).sum()

    big_grad, big_base = ms.value_and_grad(big_loss), ms.value_and_grad(big_baseline)
    cost = median_seconds(lambda: big_grad(big), 4) - median_seconds(lambda: big_base(big), 4)
    print(f"recording, [4, 4096, 32, 128] fp32: {cost * 1e3:.1f} ms per call (forward and backward)")


if __name__ == "__main__":
    main()
