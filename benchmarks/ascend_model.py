"""Modeled (not measured) time of the Ascend kernel on a 910B, from what the host shim counts.

No NPU is reachable here. The kernel sources run on the host shim (kernel/ascend/host_shim), which counts per
core and launch: vector instructions by kind with their elements and 256-byte repeats, copies GM->UB and
UB->GM with their bursts and bytes, pipe barriers, flag and queue waits, scalar writes, and how many buffers
the queues have. This script turns the counts of the busiest core into a time with the figures below, for
the kernel in this tree and, for comparison, the kernel at another revision built against today's shim
(revisions from 201f0d9's successor on, where the tiling fields are stated once; the kernel before the
throughput restructure, 7558ad1, is modeled in benchmarks/NOTES.md):
    python -m benchmarks.ascend_model [--against REV] [--hbm-gbs 1600]
It prints per case the modeled time, the modeled share of HBM bandwidth (the op's bytes over HBM bandwidth,
divided by the modeled time) and the limiting unit, then `worst modeled HBM efficiency: NN%` (after).

The model (per core; the kernel takes the slowest core plus the launch):
  memory  = sum over copies (COPY_SETUP + bytes / (HBM / cores)): every core streams at once, so each gets
            its share of HBM; COPY_SETUP makes a 16 KB copy reach ~90% of it (asc-devkit guide: copies of
            16 KB and more "usually reach the best bandwidth").
  vector  = sum over instructions (ISSUE + repeats * cycles per repeat of its kind) + barriers * BARRIER,
            at CLOCK.
  scalar  = scalar writes * SCALAR_WRITE.
  With two buffers per queue and no explicit flag waits, copy-in, compute and copy-out of successive blocks
  overlap: time = max(memory, vector) + one block of the other unit (fill and drain) + scalar. Otherwise
  they serialize: time = memory + vector + scalar.
"""
import argparse
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

from benchmarks.cases import D_SCALING_DS, D_SCALING_ROWS, LARGE_CASES
from ms_rotary.kernels import AscendKernel

DTYPE_IDS = AscendKernel.DTYPE_IDS  # the Ascend kernel's dtype ids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Ascend 910B figures. Sources: [ops] hicann/ops-transformer tiling tests' Ascend910B platform info
# ("vector_core_cnt": 48, "UB_SIZE": 196608); [asc] cannmirror/asc-devkit docs: Mul.md ("each repeat reads
# 256 contiguous bytes"), Vector逻辑架构.md (UB 192 KB on Atlas A2), 尽量一次搬运较大的数据块.md (copies of
# 16 KB and more reach the best bandwidth); [hbm] Huawei's published HBM2e bandwidth for 910B parts ranges
# 1.2-1.6 TB/s by SKU: 1.6 is used, the stricter for this bound (a slower HBM only raises efficiency).
# Marked "assumed" where no public source gives the figure; change them with the flags below.
VECTOR_CORES = 48          # [ops]
UB_BYTES = 196608          # [ops], [asc]
HBM_GBS = 1600.0           # [hbm]
REPEAT_BYTES = 256         # [asc]
CLOCK_GHZ = 1.8            # assumed
ISSUE_CYCLES = 8           # assumed: per vector instruction, before its first repeat
CYCLES_PER_REPEAT = {"Gather": 8.0}  # assumed: a gather moves one 32-byte block per cycle; others 1 repeat/cycle
BARRIER_CYCLES = 30        # assumed: the vector pipe drains
SCALAR_WRITE_CYCLES = 4    # assumed
COPY_SETUP_BYTES = 1800    # so a 16 KB copy runs at ~90% of the core's share [asc]
LAUNCH_US = 3.0            # assumed: kernel launch and tiling read

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def model_cases():
    """(name, dy shape, cos shape, slice, mode, dtype): run.py's large cases and the D=1024 case, cos [1, S, 1, L]."""
    cases = []
    for label, shape, (start, end), mode, dtype in LARGE_CASES:
        cases.append((f"{label} {dtype}", shape, (1, shape[1], 1, end - start), (start, end), mode, dtype))
    d = max(D_SCALING_DS)
    shape = D_SCALING_ROWS + (d,)
    cases.append((f"D={d} float32", shape, (1, shape[1], 1, 64), (0, 64), 0, "float32"))
    return cases


def kernel_tree(revision, out_dir):
    """kernel/ of this tree, or of a git revision with today's host shim (so both are counted alike)."""
    if revision is None:
        return os.path.join(ROOT, "kernel")
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision, "kernel"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(out_dir, filter="data")
    shim = os.path.join(out_dir, "kernel", "ascend", "host_shim")
    shutil.rmtree(shim)
    shutil.copytree(os.path.join(ROOT, "kernel", "ascend", "host_shim"), shim)
    return os.path.join(out_dir, "kernel")


def build_runner(kernel, out):
    ascend = os.path.join(kernel, "ascend")
    sources = ["host_shim/run_kernel_host.cpp", "op_host/rotary_tiling.cpp",
               "op_kernel/ms_rotary_partial_rotary_mul.cpp",
               "op_kernel/ms_rotary_partial_rotary_mul_grad.cpp"]
    subprocess.run(["g++", "-std=c++17", "-O2", f"-I{ascend}/host_shim", f"-I{ascend}/op_host",
                    f"-I{os.path.join(kernel, 'common')}", *(os.path.join(ascend, s) for s in sources), "-o", out],
                   check=True)
    return out


def count(runner, work, case, backward):
    _, dy, cos, (start, end), mode, dtype = case
    header = [int(backward), mode, DTYPE_IDS[dtype], DTYPE_IDS[dtype], *dy, *cos, start, end, VECTOR_CORES, UB_BYTES]
    source, counts = os.path.join(work, "in.bin"), os.path.join(work, "counts.json")
    with open(source, "wb") as f:
        f.write(b"".join(v.to_bytes(8, "little", signed=True) for v in header))  # header only: zero tensors
    subprocess.run([runner, source, os.devnull, counts], check=True)
    with open(counts) as f:
        return json.load(f)


def core_time_us(core, blocks, args):
    """(modeled microseconds, limiting unit) of one core's counts."""
    per_core_gbs = args.hbm_gbs / VECTOR_CORES
    memory = 0.0
    for unit in ("mte2", "mte3"):
        transfers, _bursts, nbytes = core[unit]
        memory += (transfers * COPY_SETUP_BYTES + nbytes) / (per_core_gbs * 1e3)  # bytes / (GB/s) -> us
    cycles = core["barriers"] * BARRIER_CYCLES
    for kind, (instructions, _elements, repeats) in core["vector"].items():
        cycles += instructions * ISSUE_CYCLES + repeats * CYCLES_PER_REPEAT.get(kind, 1.0)
    vector = cycles / (args.clock_ghz * 1e3)
    scalar = core["scalar_writes"] * SCALAR_WRITE_CYCLES / (args.clock_ghz * 1e3)
    overlaps = core["queue_buffers"] >= 2 and core["flag_waits"] == 0
    if overlaps:
        time = max(memory, vector) + min(memory, vector) / max(blocks, 1) + scalar
    else:
        time = memory + vector + scalar
    limit = max((("HBM", memory), ("vector", vector), ("scalar", scalar)), key=lambda kv: kv[1])[0]
    return time, limit + ("" if overlaps else ", serialized")


def model(counts, case, args):
    _, dy, cos, (start, end), _, dtype = case
    rows = dy[0] * dy[1] * dy[2]
    blocks = math.ceil(math.ceil(rows / counts["used_cores"]) / counts["rows_per_loop"])  # per core
    times = [core_time_us(core, blocks, args) for core in counts["cores"]]
    core_us, limit = max(times)
    total_us = core_us + LAUNCH_US
    op_bytes = (2 * rows * (end - start) + 2 * cos[0] * cos[1] * cos[2] * cos[3]) * DTYPE_BYTES[dtype]
    hbm_us = op_bytes / (args.hbm_gbs * 1e3)
    return total_us, hbm_us / total_us, limit


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default="", help="kernel revision to model for comparison (default: none)")
    parser.add_argument("--hbm-gbs", type=float, default=HBM_GBS)
    parser.add_argument("--clock-ghz", type=float, default=CLOCK_GHZ)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ms_rotary_ascend_model_") as work:
        runners = {"after": build_runner(kernel_tree(None, work), os.path.join(work, "after"))}
        if args.against:
            try:
                runners["before"] = build_runner(kernel_tree(args.against, os.path.join(work, "rev")),
                                                 os.path.join(work, "before"))
            except (OSError, subprocess.CalledProcessError) as error:
                print(f"(no comparison: the kernel at {args.against} could not be built: {error})")
        print(f"modeled, not measured: 910B, {VECTOR_CORES} vector cores, HBM {args.hbm_gbs:g} GB/s, "
              f"vector clock {args.clock_ghz:g} GHz (assumed); cos/sin [1, S, 1, L] in the dtype of dy")
        header = "| case | direction |"
        for name in runners:
            header += f" {name}: modeled us | {name}: modeled % of HBM | {name}: limited by |"
        print(header)
        print("|---|---|" + "---|---|---|" * len(runners))
        worst = 1.0
        for case in model_cases():
            for backward in (False, True):
                row = f"| {case[0]} | {'backward' if backward else 'forward'} |"
                for name, runner in runners.items():
                    us, efficiency, limit = model(count(runner, work, case, backward), case, args)
                    row += f" {us:.1f} | {100 * efficiency:.0f}% | {limit} |"
                    if name == "after":
                        worst = min(worst, efficiency)
                print(row, flush=True)
        print(f"worst modeled HBM efficiency: {100 * worst:.0f}%")


if __name__ == "__main__":
    sys.exit(main())
