"""The CPU kernel alone against the same-bytes loop, from memory, on the large cases of run.py: kernel_rows (dy
where MindSpore puts it, caches evicted before each call) run for several rounds, medians of kernel/loop time.
With --against REV, the kernel at that git revision is built too and the two builds run in turn: alternating
them, and comparing each to the loop in the same process, is what makes a 10-20% difference visible on
machines this noisy.
    python benchmarks/kernel_ab.py [--against REV] [--rounds N]      e.g. --against HEAD~1
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

from cases import D_SCALING_DS, D_SCALING_ROWS, LARGE_CASES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16"}
CASES = {f"{label.removesuffix('-like')} {DTYPE_NAMES[dtype]}": (shape, (start, end), mode, dtype)
         for label, shape, (start, end), mode, dtype in LARGE_CASES}
CASES.update({f"D={d} fp32": (D_SCALING_ROWS + (d,), (0, 64), 0, "float32") for d in D_SCALING_DS})
FLAGS = ["-O3", "-march=native", "-std=c++17", "-ffp-contract=off", "-pthread"]


def build(kernel_dir, slice_touch, out_dir, name):
    binary = os.path.join(out_dir, name)
    subprocess.run(["g++", *FLAGS, "-I", kernel_dir, os.path.join(ROOT, "benchmarks", "kernel_rows.cc"),
                    os.path.join(kernel_dir, "rotary_kernel.cc"), slice_touch, "-o", binary], check=True)
    return binary


def kernel_at(rev, out_dir):
    kernel_dir = os.path.join(out_dir, "kernel_" + re.sub(r"\W", "_", rev))
    os.makedirs(kernel_dir)
    for source in ("rotary_kernel.cc", "rotary_kernel.h"):
        text = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:kernel/cpu/{source}"], check=True,
                              capture_output=True, text=True).stdout
        with open(os.path.join(kernel_dir, source), "w") as f:
            f.write(text)
    return kernel_dir


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REV", help="also build and run the kernel at this git revision")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out_dir:
        slice_touch = os.path.join(out_dir, "slice_touch.o")  # the loop: the same object in every build
        subprocess.run(["cc", "-O3", "-march=native", "-c", os.path.join(ROOT, "benchmarks", "slice_touch.c"), "-o",
                        slice_touch], check=True)
        builds = {"working tree": build(os.path.join(ROOT, "kernel", "cpu"), slice_touch, out_dir, "kernel_rows_tree")}
        if args.against:
            builds[args.against] = build(kernel_at(args.against, out_dir), slice_touch, out_dir, "kernel_rows_rev")
        ratios = {(case, name): [] for case in CASES for name in builds}
        millis = {(case, name): [] for case in CASES for name in builds}
        for _ in range(args.rounds):
            for case, (shape, (start, end), mode, dtype) in CASES.items():
                case_args = [*shape, start, end, mode, dtype, 2, 9]  # ... threads, repeats
                for name, binary in builds.items():
                    line = subprocess.run([binary, *map(str, case_args)], check=True, capture_output=True,
                                          text=True).stdout
                    ratios[(case, name)].append(float(re.search(r"kernel/loop ([0-9.]+)", line).group(1)))
                    millis[(case, name)].append(float(re.search(r"kernel ([0-9.]+) ms", line).group(1)))
    print(f"kernel/loop time, median over {args.rounds} round(s) (kernel ms in brackets), 2 threads, from memory")
    print("case".ljust(16) + "".join(name.rjust(20) for name in builds))
    for case in CASES:
        print(case.ljust(16) + "".join(f"{statistics.median(ratios[(case, n)]):.2f} "
                                       f"({statistics.median(millis[(case, n)]):.2f})".rjust(20) for n in builds))


if __name__ == "__main__":
    main()
