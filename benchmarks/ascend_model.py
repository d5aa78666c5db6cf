"""Modeled (not measured) time of the Ascend kernel on a 910B and a 950, from what the host shim counts.

No NPU is reachable here. The kernel sources run on the host shim (kernel/ascend/host_shim), which counts per
core and launch: vector instructions by kind with their elements and 256-byte repeats, copies GM->UB and
UB->GM with their bursts and bytes, pipe barriers, flag and queue waits, scalar writes, and how many buffers
the queues have. This script turns the counts of the busiest core into a time with the figures below, for
the kernel in this tree (tiled for each chip's cores and unified buffer) and, for comparison, the kernel at
another revision built against today's shim
(revisions from 201f0d9's successor on, where the tiling fields are stated once; the kernel before the
throughput restructure, 7558ad1, is modeled in benchmarks/NOTES.md):
    python -m benchmarks.ascend_model [--against REV] [--chips 910B,950] [--hbm-gbs GBS] [--memory-kernel]
With --memory-kernel it also models the memory-based kernel where the chip's tiling picks the register-based
one (the 950). It prints per chip and case the modeled time, the modeled share of HBM bandwidth (the op's
bytes over HBM bandwidth, divided by the modeled time) and the limiting unit, then
`worst modeled HBM efficiency: NN% (910B), MM% (950)` (after).

The model (per core; the kernel takes the slowest core plus the launch):
  memory  = sum over copies (COPY_SETUP + bytes / (HBM / cores)): every core streams at once, so each gets
            its share of HBM; COPY_SETUP makes a 16 KB copy reach ~90% of it (asc-devkit guide: copies of
            16 KB and more "usually reach the best bandwidth").
  vector  = sum over instructions (ISSUE + repeats * cycles per repeat of its kind) + barriers * BARRIER,
            at CLOCK; the 950's register instructions REG_CYCLES each, its VF calls ISSUE each.
  scalar  = scalar writes * SCALAR_WRITE.
  With two buffers per queue and no explicit flag waits, copy-in, compute and copy-out of successive blocks
  overlap: time = max(memory, vector) + one block of the other unit (fill and drain) + scalar. Otherwise
  they serialize: time = memory + vector + scalar.
"""
import argparse
import collections
import glob
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
from ms_rotary.targets.ascend import DTYPE_IDS  # the Ascend kernel's dtype ids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Figures per chip. Sources: [ops] hicann/ops-transformer tiling tests' Ascend910B platform info
# ("vector_core_cnt": 48, "UB_SIZE": 196608); [asc] cannmirror/asc-devkit 0da921b9: docs Mul.md ("each repeat
# reads 256 contiguous bytes"), Vector逻辑架构.md (UB 192 KB on Atlas A2), 尽量一次搬运较大的数据块.md (copies of
# 16 KB and more reach the best bandwidth); [asc3510] asc-devkit 0da921b9 for __NPU_ARCH__ 3510:
# impl/basic_api/utils/kernel_utils_constants.h (TOTAL_UB_SIZE 248 KB, AIV_CORE_NUM 72, the most AIV cores the
# headers provision for), docs NPU架构版本3510.md (the vector unit processes 256 bytes per cycle, as on 2201),
# Mul.md / Gather.md (on the 950 the memory-based API we use runs as a register-based VF function);
# [hbm] Huawei's published HBM2e bandwidth for 910B parts ranges 1.2-1.6 TB/s by SKU; [hbm950] reported, not
# in a datasheet: Huawei Connect 2025 roadmap, 950PR 1.6 TB/s (HiBL 1.0), 950DT 4 TB/s (HiZQ 2.0). The
# faster figure of each is used: the stricter bound (a slower HBM only raises efficiency).
# Marked "assumed" where no public source gives the figure; change them with the flags below.
Chip = collections.namedtuple("Chip", "vector_cores ub_bytes hbm_gbs clock_ghz issue_cycles npu_arch sources")
CHIPS = {
    "910B": Chip(vector_cores=48, ub_bytes=196608, hbm_gbs=1600.0, clock_ghz=1.8, issue_cycles=8, npu_arch=2201,
                 sources="48 vector cores [ops], UB 192 KB [ops][asc], HBM 1.6 TB/s [hbm]"),
    # The memory-based calls become VF functions on the 950: a per-call cost twice the 910B's is assumed, and
    # the same for starting one of the register-based kernel's VF functions.
    "950": Chip(vector_cores=72, ub_bytes=253952, hbm_gbs=4000.0, clock_ghz=1.8, issue_cycles=16, npu_arch=3510,
                sources="72 vector cores, UB 248 KB [asc3510], HBM 4 TB/s (reported) [hbm950]"),
}
REPEAT_BYTES = 256         # [asc], [asc3510]
# The 950's register instructions ("Reg::" counts), each over one 256-byte register: one cycle each, the
# documented rate of every kind the kernel uses ([reg] asc-devkit 0da921b9 docs
# 附录/Reg矢量计算接口理论性能汇总.md: 64 fp32 elements per cycle for LoadAlign, StoreAlign, Mul, Add, Sub,
# Cast, Interleave, DeInterleave). Loads, Mul, Add, Sub and Cast may dual-issue (附录/...指令单双发汇总.md);
# the model does not count on it. A VF call ("VF") costs the chip's issue_cycles.
REG_CYCLES = 1.0
CYCLES_PER_REPEAT = {"Gather": 8.0}  # assumed: a gather moves one 32-byte block per cycle; others 1 repeat/cycle
BARRIER_CYCLES = 30        # assumed: the vector pipe drains
SCALAR_WRITE_CYCLES = 4    # assumed
# assumed: a scalar read of GM through the data cache (the gathering ops read each token's position; 8 int64
# positions share a 64-byte line, so most reads hit)
GM_SCALAR_READ_CYCLES = 100
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
    """kernel/ of this tree, or of a git revision with today's host shim (so both are counted alike) and the
    revision's own runner (which fills the revision's tiling)."""
    if revision is None:
        return os.path.join(ROOT, "kernel")
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision, "kernel"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(out_dir, filter="data")
    shim = os.path.join(out_dir, "kernel", "ascend", "host_shim")
    runner = os.path.join(shim, "run_kernel_host.cpp")
    with open(runner) as f:
        own_runner = f.read()
    shutil.rmtree(shim)
    shutil.copytree(os.path.join(ROOT, "kernel", "ascend", "host_shim"), shim)
    with open(runner, "w") as f:
        f.write(own_runner)
    return os.path.join(out_dir, "kernel")


# The host runner's sources under kernel/ascend (tests/builds.py builds the same).
RUNNER_SOURCES = ["host_shim/run_kernel_host.cpp", "op_host/rotary_tiling.cpp", "host_shim/kernel_entries.cpp"]


def build_runner(kernel, out):
    """The runner of a kernel tree, its entry points in one unit (as host_shim/kernel_entries.cpp has them):
    whichever a revision has."""
    ascend = os.path.join(kernel, "ascend")
    entries = sorted(glob.glob(os.path.join(ascend, "op_kernel", "ms_rotary_*.cpp")))
    unit = out + "_entries.cpp"
    with open(unit, "w") as f:
        f.writelines(f'#include "{entry}"\n' for entry in entries)
    sources = [os.path.join(ascend, source) for source in RUNNER_SOURCES[:2]] + [unit]
    subprocess.run(["g++", "-std=c++17", "-O2", f"-I{ascend}/host_shim", f"-I{ascend}/op_host",
                    f"-I{os.path.join(kernel, 'common')}", *sources, "-o", out], check=True)
    return out


def runner_input(payload=b"", **fields):
    """The host runner's input (kernel/ascend/host_shim/run_kernel_host.cpp): its fields by name on one line
    (lists: dy, cos), then the tensors' bytes."""
    line = " ".join(f"{name}={','.join(map(str, value)) if isinstance(value, (list, tuple)) else int(value)}"
                    for name, value in fields.items())
    return line.encode() + b"\n" + payload


# Runners of revisions before the named header (`--against REV`) read these, in this order, as int64 values.
_POSITIONAL_HEADER = ("conjugate", "mode", "dy_dtype", "cos_dtype", "dy", "cos", "start", "end", "cores",
                      "ub_bytes", "npu_arch", "channels", "positions_batch", "batch_axis", "seq_axis", "k_heads")


def _positional(fields):
    values = [v for name in _POSITIONAL_HEADER for v in (fields[name] if name in ("dy", "cos") else [fields[name]])]
    return b"".join(int(v).to_bytes(8, "little", signed=True) for v in values)


def count(runner, work, case, backward, chip, npu_arch=None, gathers=False, k_heads=0):
    """The runner's counts for a launch of `case` on `chip` (as an `npu_arch` chip, if given); `gathers`: by
    the ops that read cos/sin rows by position (a prompt's 0, 1, 2, ...) from the cache `case` names as cos,
    with k_heads: the q+k op, k of that many heads in the same launch."""
    _, dy, cos, (start, end), mode, dtype = case
    fields = dict(conjugate=backward, mode=mode, dy_dtype=DTYPE_IDS[dtype], cos_dtype=DTYPE_IDS[dtype], dy=dy, cos=cos,
                  start=start, end=end, cores=chip.vector_cores, ub_bytes=chip.ub_bytes,
                  npu_arch=npu_arch or chip.npu_arch, channels=int(gathers), positions_batch=1, batch_axis=0,
                  seq_axis=1, k_heads=k_heads)  # one channel, BSND; no tensors: zeros
    source, counts = os.path.join(work, "in.bin"), os.path.join(work, "counts.json")
    # older runners: positional, before the q+k ops no k_heads, before the gathering ops no positions fields,
    # before the 950's kernel no npu_arch
    positional = _positional(fields)
    legacy = () if gathers else (positional, positional[:-8], positional[:-40], positional[:-48])
    for header in (runner_input(**fields), *legacy):
        with open(source, "wb") as f:
            f.write(header)
        if subprocess.run([runner, source, os.devnull, counts]).returncode == 0:
            with open(counts) as f:
                return json.load(f)
    raise RuntimeError(f"{runner} failed on {case[0]}")


def core_time_us(core, blocks, chip):
    """(modeled microseconds, limiting unit) of one core's counts."""
    per_core_gbs = chip.hbm_gbs / chip.vector_cores
    memory = 0.0
    for unit in ("mte2", "mte3"):
        transfers, _bursts, nbytes = core[unit]
        memory += (transfers * COPY_SETUP_BYTES + nbytes) / (per_core_gbs * 1e3)  # bytes / (GB/s) -> us
    cycles = core["barriers"] * BARRIER_CYCLES
    for kind, (instructions, _elements, repeats) in core["vector"].items():
        if kind.startswith("Reg::"):
            cycles += instructions * REG_CYCLES
        else:
            cycles += instructions * chip.issue_cycles + repeats * CYCLES_PER_REPEAT.get(kind, 1.0)
    vector = cycles / (chip.clock_ghz * 1e3)
    scalar_cycles = core["scalar_writes"] * SCALAR_WRITE_CYCLES + core.get("gm_scalar_reads", 0) * GM_SCALAR_READ_CYCLES
    scalar = scalar_cycles / (chip.clock_ghz * 1e3)
    overlaps = core["queue_buffers"] >= 2 and core["flag_waits"] == 0
    if overlaps:
        time = max(memory, vector) + min(memory, vector) / max(blocks, 1) + scalar
    else:
        time = memory + vector + scalar
    limit = max((("HBM", memory), ("vector", vector), ("scalar", scalar)), key=lambda kv: kv[1])[0]
    return time, limit + ("" if overlaps else ", serialized")


def model(counts, case, chip, gathers=False, k_heads=0):
    _, dy, cos, (start, end), _, dtype = case
    if gathers:  # the cos/sin rows the positions touch, not the cache
        cos = (1, dy[1], 1, end - start)
    rows = dy[0] * dy[1] * (dy[2] + k_heads)
    blocks = math.ceil(math.ceil(rows / counts["used_cores"]) / counts["rows_per_loop"])  # per core
    times = [core_time_us(core, blocks, chip) for core in counts["cores"]]
    core_us, limit = max(times)
    total_us = core_us + LAUNCH_US
    op_bytes = (2 * rows * (end - start) + 2 * cos[0] * cos[1] * cos[2] * cos[3]) * DTYPE_BYTES[dtype]
    hbm_us = op_bytes / (chip.hbm_gbs * 1e3)
    return total_us, hbm_us / total_us, limit


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default="", help="kernel revision to model for comparison (default: none)")
    parser.add_argument("--chips", default=",".join(CHIPS), help="chips to model, from " + ", ".join(CHIPS))
    parser.add_argument("--hbm-gbs", type=float, help="HBM bandwidth for every chip modeled (default: each chip's)")
    parser.add_argument("--clock-ghz", type=float, help="vector clock for every chip modeled (default: each chip's)")
    parser.add_argument("--memory-kernel", action="store_true",
                        help="also model each chip with the memory-based kernel (the 950's is register-based where "
                             "the slice fits it)")
    args = parser.parse_args()
    chips = {}
    for name in args.chips.split(","):
        chip = CHIPS[name]
        chips[name] = chip._replace(hbm_gbs=args.hbm_gbs or chip.hbm_gbs, clock_ghz=args.clock_ghz or chip.clock_ghz)
    with tempfile.TemporaryDirectory(prefix="ms_rotary_ascend_model_") as work:
        after = build_runner(kernel_tree(None, work), os.path.join(work, "after"))
        runners = {"after": (after, None)}  # name: (runner, npu_arch it models: None for the chip's)
        if args.memory_kernel:
            runners["memory kernel"] = (after, CHIPS["910B"].npu_arch)
        if args.against:
            try:
                runners["before"] = (build_runner(kernel_tree(args.against, os.path.join(work, "rev")),
                                                  os.path.join(work, "before")), None)
            except (OSError, subprocess.CalledProcessError) as error:
                print(f"(no comparison: the kernel at {args.against} could not be built: {error})")
        worst = {}
        for name, chip in chips.items():
            print(f"\nmodeled, not measured: {name}: {chip.sources}; vector clock {chip.clock_ghz:g} GHz and "
                  f"{chip.issue_cycles} cycles per call (assumed); cos/sin [1, S, 1, L] in the dtype of dy")
            header = "| case | direction |"
            for runner_name in runners:
                header += (f" {runner_name}: modeled us | {runner_name}: modeled % of HBM |"
                           f" {runner_name}: limited by |")
            print(header)
            print("|---|---|" + "---|---|---|" * len(runners))
            worst[name] = 1.0
            for case in model_cases():
                for backward in (False, True):
                    row = f"| {case[0]} | {'backward' if backward else 'forward'} |"
                    for runner_name, (runner, npu_arch) in runners.items():
                        us, efficiency, limit = model(count(runner, work, case, backward, chip, npu_arch), case,
                                                      chip)
                        row += f" {us:.1f} | {100 * efficiency:.0f}% | {limit} |"
                        if runner_name == "after":
                            worst[name] = min(worst[name], efficiency)
                    print(row, flush=True)
        print_layer_table(chips, runners["after"][0], work)
        print("worst modeled HBM efficiency: " + ", ".join(f"{100 * w:.0f}% ({n})" for n, w in worst.items()))


# RotaryEmbedding's calls (benchmarks/rope_layer.py's shapes, bf16, one position from a cache of 8192 or a
# prompt; q of 32 heads, k of 8): q and k by position from the cache in one launch, against q and k on a
# [1, S, 1, L] table, a launch each.
LAYER_CASES = [(f"{what} q [1, {seq}, 32, 128] + k [1, {seq}, 8, 128] bf16", (1, seq, 32, 128), (1, 8192, 1, 128),
                (0, 128), 0, "bfloat16") for what, seq in (("decode", 1), ("prefill", 4096))]
LAYER_K_HEADS = 8


def print_layer_table(chips, runner, work):
    print("\nmodeled, not measured: RotaryEmbedding's forward, q and k by position in one launch (positions 0, 1, "
          "... read by the kernel, one scalar read each assumed at 100 cycles), against q and k on a gathered table "
          "(two launches)")
    print("| case | chip | by position: modeled us | by position: % of HBM | on a table: modeled us | ratio |")
    print("|---|---|---|---|---|---|")
    for case in LAYER_CASES:
        seq = case[1][1]
        q_case = case[:2] + ((1, seq, 1, 128),) + case[3:]
        k_case = (case[0], (1, seq, LAYER_K_HEADS, 128)) + q_case[2:]
        for name, chip in chips.items():
            gathered_us, efficiency, _ = model(
                count(runner, work, case, False, chip, gathers=True, k_heads=LAYER_K_HEADS), case, chip,
                gathers=True, k_heads=LAYER_K_HEADS)
            table_us = sum(model(count(runner, work, c, False, chip), c, chip)[0] for c in (q_case, k_case))
            print(f"| {case[0]} | {name} | {gathered_us:.1f} | {100 * efficiency:.0f}% | {table_us:.1f} | "
                  f"{gathered_us / table_us:.2f}x |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
