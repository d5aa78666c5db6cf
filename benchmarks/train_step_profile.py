"""Where a GRAPH_MODE training step's time goes, per op type, for each rotary variant of benchmarks.train_step
(MindSpore's profiler, CPU; run alone):

    python -m benchmarks.train_step_profile [--shape NAME]

Prints, per variant, the step's kernel time by op type and the rotary's own ops (Custom for ms_rotary; the
slices, products and joins of the plain-ops rotary) against the rest. The rest differs between variants with
the same ops on the same shapes: MindSpore schedules the graphs differently (benchmarks/NOTES.md)."""
import argparse
import collections
import csv
import glob
import os
import tempfile

import mindspore as ms
from mindspore.profiler import Profiler

from benchmarks.train_step import GRAPH_WARMUP_STEPS, ROTARIES, SHAPES, make_step

# Op types only a rotary adds to the block (the attention itself uses MatMul, Transpose, Softmax, ...).
ROTARY_OP_TYPES = {"Custom", "StridedSlice", "StridedSliceGrad", "Slice", "SliceGrad", "Stack", "Unstack", "Concat",
                   "Split", "AddN", "Sub", "InplaceCopy", "Identity", "Cast"}
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
    path = glob.glob(os.path.join(directory, "**", "cpu_op_type_info_0.csv"), recursive=True)[0]
    per_type = collections.Counter()
    for row in csv.DictReader(open(path)):
        per_type[row["op_type"]] += float(row["total_compute_time"]) / PROFILED_STEPS
    return per_type


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=list(SHAPES), default=list(SHAPES)[1])
    args = parser.parse_args()
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    print(f"{args.shape}, GRAPH_MODE fp32, kernel ms per step (profiler, {PROFILED_STEPS} steps after "
          f"{GRAPH_WARMUP_STEPS} warm-up)")
    # Mul is both the plain rotary's and the loss's: counted with the rest, so the plain share is a floor.
    for rotary in ROTARIES:
        with tempfile.TemporaryDirectory() as directory:
            per_type = profile(SHAPES[args.shape], rotary, directory)
        rotary_ms = sum(t for op, t in per_type.items() if op in ROTARY_OP_TYPES)
        rest = sum(t for op, t in per_type.items() if op not in ROTARY_OP_TYPES)
        top = ", ".join(f"{op} {t:.1f}" for op, t in per_type.most_common(4))
        print(f"{rotary:16s} rotary ops {rotary_ms:6.1f} ms, the rest {rest:6.1f} ms (largest: {top})", flush=True)


if __name__ == "__main__":
    main()
