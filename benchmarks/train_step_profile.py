"""Where a GRAPH_MODE training step's time goes, per op type, for each rotary variant of benchmarks.train_step
(MindSpore's profiler, CPU; run alone):

    python -m benchmarks.train_step_profile [--shape NAME]

Prints, per variant, the kernel time per step of the rotary's own ops (those under the blocks' `rope` cells,
forward and backward) and of the rest. The rest can differ between variants with the same ops on the same
shapes: MindSpore schedules graphs of different sizes differently (benchmarks/NOTES.md)."""
import argparse
import collections
import csv
import glob
import os
import tempfile

import mindspore as ms
from mindspore.profiler import Profiler

from benchmarks.train_step import GRAPH_WARMUP_STEPS, ROTARIES, SHAPES, make_step

PROFILED_STEPS = 3


def profile(shape, rotary, directory):
    step = make_step(shape, rotary, ms.float32)
    for _ in range(GRAPH_WARMUP_STEPS):
        out = step()
    out.asnumpy()
    profiler = Profiler(output_path=directory)
    for _ in range(PROFILED_STEPS):
        out = step()
    out.asnumpy()
    profiler.stop()
    profiler.analyse()
    path = glob.glob(os.path.join(directory, "**", "cpu_op_detail_info_0.csv"), recursive=True)[0]
    rotary, rest = collections.Counter(), collections.Counter()
    for row in csv.DictReader(open(path)):  # the blocks' rotary cells are named `rope`: their ops, forward and grad
        side = rotary if "/rope-" in row["full_op_name"] else rest
        side[row["op_type"]] += float(row["op_total_time(ms)"]) / PROFILED_STEPS
    return rotary, rest


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=list(SHAPES), default=list(SHAPES)[1])
    args = parser.parse_args()
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    print(f"{args.shape}, GRAPH_MODE fp32, kernel ms per step (profiler, {PROFILED_STEPS} steps after "
          f"{GRAPH_WARMUP_STEPS} warm-up)")
    for rotary in ROTARIES:
        with tempfile.TemporaryDirectory() as directory:
            rotary_ops, rest = profile(SHAPES[args.shape], rotary, directory)
        ops = ", ".join(f"{op} {t:.1f}" for op, t in rotary_ops.most_common(4)) or "none"
        print(f"{rotary:16s} rotary {sum(rotary_ops.values()):6.1f} ms ({ops}), the rest {sum(rest.values()):6.1f} ms "
              f"(MatMul {rest['MatMul']:.1f}, BatchMatMul {rest['BatchMatMul']:.1f})", flush=True)


if __name__ == "__main__":
    main()
