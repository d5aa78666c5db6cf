"""What a user gains per training step: one attention block (q/k/v projections, partial rotary on q and k, causal
attention, output projection), forward + backward + SGD update, with the rotary as ms_rotary's in-place op, as
the same rotary written with plain MindSpore ops (examples/rope_common.py), and with no rotary at all (the
rotary's share of the step is measured against that). Run alone (2 cores are easily saturated):

    python -m benchmarks.train_step                 # GRAPH_MODE and PyNative, fp32 (bf16: see below)

Rows go to benchmarks/runs.csv (case "train_step ..."). bf16 is attempted and reported as refused when
MindSpore 2.10 has no CPU kernel for the block's own ops (MatMul, softmax)."""
import argparse
import statistics
import time

import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore.graph.api import _pynative_executor

import ms_rotary
from benchmarks.runs_csv import append_rows
from examples.rope_common import RotaryAttention

# name: (batch, seq, heads, head_dim, mode, rotated slice)
SHAPES = {
    "NeoX-like S=512 N=8 D=64 rot 16": (1, 512, 8, 64, "half", [0, 16]),
    "GLM-4-like S=1024 N=8 D=128 rot 64": (1, 1024, 8, 128, "interleave", [0, 64]),
}


class NoRotary(nn.Cell):
    def construct(self, x, cos, sin):
        return x


class Loss(nn.Cell):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def construct(self, x, cos, sin):
        return (self.block(x, cos, sin) ** 2).mean()


def make_step(shape, rotary, dtype):
    b, s, n, d, mode, partial_slice = shape
    block = RotaryAttention(n * d, n, d, mode, partial_slice, use_ms_rotary=rotary == "ms_rotary")
    if rotary == "none":
        block.rope = NoRotary()
    if dtype != ms.float32:
        block.to_float(dtype)
    step = nn.TrainOneStepCell(Loss(block), nn.SGD(block.trainable_params(), learning_rate=1e-3))
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((b, s, n * d)).astype(np.float32), dtype)
    cos, sin = ms_rotary.rope_cos_sin(np.arange(s), partial_slice[1] - partial_slice[0], mode, dtype=dtype)
    return lambda: step(x, cos, sin)


def first_message_line(error):
    """MindSpore's messages open with rules of dashes and a heading; the first two lines with words say what
    failed."""
    words = [line.strip(" -") for line in str(error).splitlines() if line.strip(" -")]
    return " ".join(words[:2])


def median_step_seconds(steps_by_name, steps, rounds):
    """Rounds interleave the variants, so drift in the machine's speed hits them alike."""
    for step in steps_by_name.values():
        step().asnumpy()  # compile / warm up
    samples = {name: [] for name in steps_by_name}
    for _ in range(rounds):
        for name, step in steps_by_name.items():
            start = time.perf_counter()
            for _ in range(steps):
                out = step()
            out.asnumpy()
            samples[name].append((time.perf_counter() - start) / steps)
    return {name: statistics.median(times) for name, times in samples.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ms.set_device("CPU")
    rows = []
    print("| shape | exec | dtype | ms_rotary step | plain-ops step | no-rotary step | speed-up | rotary share "
          "(ms_rotary / plain) |")
    print("|---|---|---|---|---|---|---|---|")
    for exec_mode in ("GRAPH_MODE", "PYNATIVE_MODE"):
        ms.set_context(mode=getattr(ms, exec_mode))
        for dtype in (ms.float32, ms.bfloat16):
            for name, shape in SHAPES.items():
                case = f"train_step {name} {exec_mode} {dtype}"
                try:
                    times = median_step_seconds({rotary: make_step(shape, rotary, dtype)
                                                 for rotary in ("ms_rotary", "plain", "none")}, args.steps, args.rounds)
                except (RuntimeError, TypeError, ValueError) as error:
                    print(f"| {name} | {exec_mode} | {dtype} | refused by MindSpore: "
                          f"{first_message_line(error)[:120]} | | | | |")
                    _pynative_executor.clear_res()
                    continue
                ours, plain, none = times["ms_rotary"], times["plain"], times["none"]
                print(f"| {name} | {exec_mode} | {dtype} | {ours * 1e3:.1f} ms | {plain * 1e3:.1f} ms | "
                      f"{none * 1e3:.1f} ms | {plain / ours:.2f}x | {max(ours - none, 0) / ours:.0%} / "
                      f"{max(plain - none, 0) / plain:.0%} |", flush=True)
                rows += [(case, rotary, seconds, None) for rotary, seconds in times.items()]
    append_rows(rows)


if __name__ == "__main__":
    main()
