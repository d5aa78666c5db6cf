"""The CPU kernel alone against the same-bytes loop, from memory, on the large cases of run.py: kernel_rows (dy
where MindSpore puts it, caches evicted before each call) run for several rounds, medians of kernel/loop time,
for each thread count asked. With --against REV, the kernel at that git revision is built too and the two
builds run in turn: alternating them, and comparing each to the loop in the same process, is what makes a
10-20% difference visible on machines this noisy. Needs python3, g++ and cc only (no package: it runs as it
is on a bare server).
    python3 -m benchmarks.kernel_ab [--against REV] [--rounds N] [--threads 1,2,4,8,16] [--norm]
    python3 -m benchmarks.kernel_ab --build DIR                       builds kernel_rows into DIR only
"""
import argparse
import glob
import importlib.util
import os
import re
import statistics
import subprocess
import tempfile

from benchmarks.cases import D_SCALING_DS, D_SCALING_ROWS, LARGE_CASES, LOOP_FLAGS, NORM_CASES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# By path, as setup.py loads it: importing ms_rotary would need MindSpore.
_spec = importlib.util.spec_from_file_location("kernel_build", os.path.join(ROOT, "ms_rotary", "kernel_build.py"))
kernel_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_build)

DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
CASES = {f"{label.removesuffix('-like')} {DTYPE_NAMES[dtype]}": (shape, (start, end), mode, dtype)
         for label, shape, (start, end), mode, dtype in LARGE_CASES}
CASES["GPT-NeoX fp16"] = ((4, 4096, 32, 128), (0, 64), 0, "float16")  # the kernel's third storage type
# The whole head rotated (Llama, Qwen, Mistral): the most common width of all
CASES.update({f"Llama {DTYPE_NAMES[dtype]}": ((4, 4096, 32, 128), (0, 128), 0, dtype)
              for dtype in ("float32", "bfloat16")})
CASES.update({f"D={d} fp32": (D_SCALING_ROWS + (d,), (0, 64), 0, "float32") for d in D_SCALING_DS})
NORM = {f"{label.removesuffix('-like')} norm {DTYPE_NAMES[dtype]}": (shape, (start, end), mode, dtype)
        for label, shape, (start, end), mode, dtype in NORM_CASES}


def build_loop(out_dir):
    """slice_touch.c as an object: the loop every kernel build is compared with."""
    loop = os.path.join(out_dir, "slice_touch.o")
    subprocess.run(["cc", *LOOP_FLAGS, "-c", os.path.join(ROOT, "benchmarks", "slice_touch.c"), "-o", loop], check=True)
    return loop


def build(kernel_dir, slice_touch, out_dir, name):
    """kernel_rows with the kernel in kernel_dir, compiled as setup.py compiles the library's code."""
    binary = os.path.join(out_dir, name)
    # the revision's kernel files (one file before the row loops were split out), without MindSpore's AOT entry
    kernel = [source for source in sorted(glob.glob(os.path.join(kernel_dir, "*.cc")))
              if os.path.basename(source) != "aot_entry.cc"]
    with open(os.path.join(kernel_dir, "rotary_kernel.h")) as header:
        norm = ["-DKERNEL_ROWS_HEAD_NORM"] if "struct HeadNorm" in header.read() else []
    subprocess.run(["g++", "-O3", *kernel_build.NATIVE, *kernel_build.FLAGS, *norm, "-I", kernel_dir,
                    os.path.join(ROOT, "benchmarks", "kernel_rows.cc"), *kernel, slice_touch, "-o", binary], check=True)
    return binary


def kernel_at(rev, out_dir):
    """kernel/ of git revision `rev`, written under out_dir; returns its cpu/ directory."""
    root = os.path.join(out_dir, "kernel_" + re.sub(r"\W", "_", rev))
    listed = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", rev, "kernel/cpu", "kernel/common"],
                            check=True, capture_output=True, text=True).stdout.split()
    for path in listed:
        target = os.path.join(root, os.path.relpath(path, "kernel"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            shown = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], check=True, capture_output=True)
            f.write(shown.stdout)
    return os.path.join(root, "cpu")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", metavar="REV", help="also build and run the kernel at this git revision")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--build", metavar="DIR", help="only build DIR/kernel_rows (for kernel_rows.sh) and exit")
    parser.add_argument("--threads", default="2", help="comma-separated thread counts (default 2)")
    parser.add_argument("--norm", action="store_true", help="the head norm's cases (NORM_CASES) instead")
    args = parser.parse_args()
    cases = NORM if args.norm else CASES
    thread_counts = [int(t) for t in args.threads.split(",")]
    if args.build:
        print(build(os.path.join(ROOT, "kernel", "cpu"), build_loop(args.build), args.build, "kernel_rows"))
        return
    with tempfile.TemporaryDirectory() as out_dir:
        slice_touch = build_loop(out_dir)  # the loop: the same object in every build
        builds = {"working tree": build(os.path.join(ROOT, "kernel", "cpu"), slice_touch, out_dir, "kernel_rows_tree")}
        if args.against:
            builds[args.against] = build(kernel_at(args.against, out_dir), slice_touch, out_dir, "kernel_rows_rev")
        columns = [(name, threads) for threads in thread_counts for name in builds]
        ratios = {(case, column): [] for case in cases for column in columns}
        millis = {(case, column): [] for case in cases for column in columns}
        for _ in range(args.rounds):
            for case, (shape, (start, end), mode, dtype) in cases.items():
                for name, threads in columns:
                    case_args = [*shape, start, end, mode, dtype, threads, 9] + ["norm"] * args.norm  # 9 repeats
                    line = subprocess.run([builds[name], *map(str, case_args)], check=True, capture_output=True,
                                          text=True).stdout
                    ratios[(case, (name, threads))].append(float(re.search(r"kernel/loop ([0-9.]+)", line).group(1)))
                    millis[(case, (name, threads))].append(float(re.search(r"kernel ([0-9.]+) ms", line).group(1)))
    print(f"kernel/loop time, median over {args.rounds} round(s) (kernel ms in brackets), from memory, "
          f"{os.cpu_count()} CPUs here")
    print("case".ljust(20) + "".join(f"{name}, {threads} thr".rjust(24) for name, threads in columns))
    for case in cases:
        print(case.ljust(20) + "".join(f"{statistics.median(ratios[(case, c)]):.2f} "
                                       f"({statistics.median(millis[(case, c)]):.2f})".rjust(24) for c in columns))


if __name__ == "__main__":
    main()
