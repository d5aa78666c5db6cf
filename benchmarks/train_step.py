"""What a user gains per training step: a stack of attention blocks (default two; each: q/k/v projections,
partial rotary on q and k, causal attention, output projection), forward + backward + SGD update, with the
rotary as ms_rotary's in-place op, as the same rotary written with plain MindSpore ops
(examples/rope_common.py), with ms_rotary.RotaryEmbedding (q and k rotated in one out-of-place call by
positions from its cos/sin cache), and with no rotary at all (the rotary's share of the step is measured
against that). Run alone (2 cores are easily saturated):

    python -m benchmarks.train_step                 # GRAPH_MODE and PyNative, fp32 (bf16: see below)

Rows go to runs.csv (case "train_step ...", benchmarks/runs_csv.py says where). bf16 is attempted and
reported as refused when MindSpore 2.10 has no CPU kernel for the block's own ops (MatMul, softmax)."""
import argparse
import statistics
import time

import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore.graph.api import _pynative_executor

import ms_rotary
from benchmarks.runs_csv import append_rows
from examples.rope_common import RotaryAttention, causal_attention

# name: (batch, seq, heads, head_dim, mode, rotated slice)
SHAPES = {
    "NeoX-like S=512 N=8 D=64 rot 16": (1, 512, 8, 64, "half", [0, 16]),
    "GLM-4-like S=1024 N=8 D=128 rot 64": (1, 1024, 8, 128, "interleave", [0, 64]),
}
CACHE_POSITIONS = 4096  # RotaryEmbedding's cos/sin cache: a model's, not the step's length
# MindSpore 2.10's graph runtime tunes itself over a graph's first executions: CPU kernels search their
# thread counts, then a graph of at most 100 kernels is timed for 10 steps multi-threaded and 10 steps on one
# thread, and the faster is kept (runtime ActorDispatcher: kSingleThreadExecutionCountEnd = 50,
# kSingleThreadExecutionActorMaxNum = 100). Timing inside those steps compares search phases, not steps.
GRAPH_WARMUP_STEPS = 60
# The same runtime runs a graph of at most 100 kernels another way, which on the 2-core machine made one block's
# MatMuls ~1.7x slower (with no rotary, or either ms_rotary op) than in the plain-ops block's graph of 113
# kernels (benchmarks/NOTES.md). Models stack many blocks; two already put every variant above 100 kernels.
LAYERS = 2


class NoRotary(nn.Cell):
    def construct(self, x, cos, sin):
        return x


class PositionsAttention(RotaryAttention):
    """The same block with RotaryEmbedding: q and k rotated in one call by their positions."""

    def __init__(self, d_model, n_heads, head_dim, rotary_mode, partial_slice, cache_positions):
        super().__init__(d_model, n_heads, head_dim, rotary_mode, partial_slice, use_ms_rotary=False)
        self.rope = ms_rotary.RotaryEmbedding(head_dim, partial_slice, rotary_mode, cache_positions=cache_positions)

    def construct(self, x, positions):
        b, s, _ = x.shape
        shape = (b, s, self.n_heads, self.head_dim)
        q, k = self.rope(self.q(x).reshape(shape), self.k(x).reshape(shape), positions)
        return self.out(causal_attention(q, k, self.v(x).reshape(shape)))


class Stack(nn.Cell):
    """Blocks in sequence, as a model stacks them."""

    def __init__(self, blocks):
        super().__init__()
        self.blocks = nn.CellList(blocks)

    def construct(self, x, *rotary_inputs):
        for block in self.blocks:
            x = block(x, *rotary_inputs)
        return x


class Loss(nn.Cell):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def construct(self, x, *rotary_inputs):
        return (self.block(x, *rotary_inputs) ** 2).mean()


ROTARIES = ("ms_rotary", "RotaryEmbedding", "plain", "none")


def make_block(shape, rotary):
    b, s, n, d, mode, partial_slice = shape
    if rotary == "RotaryEmbedding":
        return PositionsAttention(n * d, n, d, mode, partial_slice, cache_positions=CACHE_POSITIONS)
    block = RotaryAttention(n * d, n, d, mode, partial_slice, use_ms_rotary=rotary == "ms_rotary")
    if rotary == "none":
        block.rope = NoRotary()
    return block


def make_step(shape, rotary, dtype, layers=LAYERS):
    b, s, n, d, mode, partial_slice = shape
    block = Stack([make_block(shape, rotary) for _ in range(layers)])
    if dtype != ms.float32:
        block.to_float(dtype)
    step = nn.TrainOneStepCell(Loss(block), nn.SGD(block.trainable_params(), learning_rate=1e-3))
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((b, s, n * d)).astype(np.float32), dtype)
    if rotary == "RotaryEmbedding":
        positions = ms.Tensor(np.arange(s))
        return lambda: step(x, positions)
    cos, sin = ms_rotary.rope_cos_sin(np.arange(s), partial_slice[1] - partial_slice[0], mode, dtype=dtype)
    return lambda: step(x, cos, sin)


def first_message_line(error):
    """MindSpore's messages open with rules of dashes and a heading; the first two lines with words say what
    failed."""
    words = [line.strip(" -") for line in str(error).splitlines() if line.strip(" -")]
    return " ".join(words[:2])



def median_step_seconds(steps_by_name, steps, rounds, warmup=1):
    """Rounds interleave the variants, so drift in the machine's speed hits them alike."""
    for step in steps_by_name.values():
        for _ in range(warmup):  # compile, warm up
            out = step()
        out.asnumpy()
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
    parser.add_argument("--layers", type=int, default=LAYERS, help="attention blocks in the stack")
    args = parser.parse_args()
    ms.set_device("CPU")
    rows = []
    print("| shape | exec | dtype | in-place op step | RotaryEmbedding step | plain-ops step | no-rotary step | "
          "plain / in-place | plain / RotaryEmbedding | rotary share (in-place / layer / plain) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for exec_mode in ("GRAPH_MODE", "PYNATIVE_MODE"):
        ms.set_context(mode=getattr(ms, exec_mode))
        for dtype in (ms.float32, ms.bfloat16):
            for name, shape in SHAPES.items():
                case = f"train_step {name} {exec_mode} {dtype}"
                try:
                    warmup = GRAPH_WARMUP_STEPS if exec_mode == "GRAPH_MODE" else 2
                    times = median_step_seconds({rotary: make_step(shape, rotary, dtype, args.layers)
                                                 for rotary in ROTARIES},
                                                args.steps, args.rounds, warmup)
                except (RuntimeError, TypeError, ValueError) as error:
                    print(f"| {name} | {exec_mode} | {dtype} | refused by MindSpore: "
                          f"{first_message_line(error)[:120]} | | | | | | |")
                    _pynative_executor.clear_res()
                    continue
                ours, layer, plain, none = (times[rotary] for rotary in ROTARIES)
                shares = " / ".join(f"{max(t - none, 0) / t:.0%}" for t in (ours, layer, plain))
                print(f"| {name} | {exec_mode} | {dtype} | {ours * 1e3:.1f} ms | {layer * 1e3:.1f} ms | "
                      f"{plain * 1e3:.1f} ms | {none * 1e3:.1f} ms | {plain / ours:.2f}x | {plain / layer:.2f}x | "
                      f"{shares} |", flush=True)
                rows += [(case, rotary, seconds, None) for rotary, seconds in times.items()]
    append_rows(rows)


if __name__ == "__main__":
    main()
