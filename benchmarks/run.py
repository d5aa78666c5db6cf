"""ms_rotary CPU benchmark: one command, one run, ratios side by side (these machines are noisy).

    pip install ".[bench]" && python -m benchmarks.run [--quick]

Prints a markdown table (shape, dtype, mode, ms, GB/s, % of copy bandwidth and of a same-bytes C loop, ratio vs
each peer), writes results/latest.md and results/bandwidth.png (GB/s vs problem size per implementation) and
appends the run's rows to runs.csv (not with --quick), under benchmarks/out/ (untracked); MS_ROTARY_BENCH_RECORD=1
writes the committed benchmarks/results/bandwidth.png and benchmarks/runs.csv instead (runs_csv.py).
Bytes counted are the bytes the op must move: the slice of dy read and written once, cos/sin read once.
"""
import argparse
import ctypes
import functools
import os
import statistics
import subprocess
import threading
import time

# torch's OpenMP workers spin after each op by default and steal the cores from whatever runs next.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import mindspore as ms  # noqa: E402
import numpy as np  # noqa: E402
from mindspore.graph.api import _pynative_executor

import ms_rotary
from benchmarks.cases import D_SCALING_DS, D_SCALING_ROWS, LARGE_CASES, LOOP_FLAGS
from benchmarks.runs_csv import append_rows, output_dir, runs_csv
from examples.rope_common import plain_rotary  # the same math from MindSpore built-ins
from ms_rotary import library, numpy_kernel

HERE = os.path.dirname(os.path.abspath(__file__))

NP_DTYPES = {"float32": np.float32, "bfloat16": None}


def timed(fn, repeats, warmup=2, before=None):
    """Median seconds of `repeats` calls (each ends with MindSpore's queue drained)."""
    return statistics.median(timed_in_turn({"fn": fn}, repeats, warmup, before)["fn"])


def timed_in_turn(fns, repeats, warmup=2, before=None):
    """Seconds of each call, per name: every round calls each fn once, so the machine's drift hits all alike.
    `before` runs untimed ahead of every timed call."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _pynative_executor.sync()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if before is not None:
                before()
            start = time.perf_counter()
            fn()
            _pynative_executor.sync()
            samples[name].append(time.perf_counter() - start)
    return samples


_L3_BYTES = os.sysconf("SC_LEVEL3_CACHE_SIZE") if "SC_LEVEL3_CACHE_SIZE" in os.sysconf_names else 0
_EVICTION_BUFFER = np.zeros(max(3 * _L3_BYTES, 64 << 20) // 4, np.float32)


def evict_caches():
    """Fill the caches with other dirty data, as the ops before a training step's rotary leave them. Without it
    a large case's data is partly still in L3 from the previous call (DeepSeek bf16 touches 25 MB of lines, the
    L3 here is 32 MB) and whichever implementation ran before decides how much."""
    np.add(_EVICTION_BUFFER, 1.0, out=_EVICTION_BUFFER)


# --- the machine's copy bandwidth ---------------------------------------------------------------------------------
_memcpy = ctypes.CDLL(None).memcpy
_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


def copy_impls(moved):
    """Copies moving `moved` bytes (moved/2 read + moved/2 written): numpy (1 thread) and memcpy on 2 threads."""
    src = np.ones(moved // 8, np.float32)
    dst = np.empty_like(src)
    half = src.nbytes // 2

    def two_threads():
        workers = [threading.Thread(target=_memcpy, args=(dst.ctypes.data + i * half, src.ctypes.data + i * half, half))
                   for i in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    return {"numpy copy": lambda: np.copyto(dst, src), "2-thread memcpy": two_threads}


def copy_bandwidth(moved, repeats):
    """GB/s of each copy moving `moved` bytes, from memory."""
    return {name: moved / timed(fn, repeats, before=evict_caches) / 1e9 for name, fn in copy_impls(moved).items()}


def load_slice_touch():
    """slice_touch.c compiled here (the package's build already needs a C compiler); None if that fails."""
    library = os.path.join(output_dir(), "results", "slice_touch.so")
    source = os.path.join(HERE, "slice_touch.c")
    if subprocess.run(["cc", *LOOP_FLAGS, "-shared", "-fPIC", source, "-o", library]).returncode:
        return None
    touch = ctypes.CDLL(library).slice_touch
    touch.argtypes = [ctypes.c_void_p] + [ctypes.c_int64] * 4 + [ctypes.c_int, ctypes.c_ubyte]
    return touch


PARALLEL_MIN_LANES = 1 << 20  # the kernel's rule (kParallelMinLanes): at least this many lanes per thread


def impl_slice_touch(touch, start, end):
    """The same bytes as the op, read and rewritten in place by the simplest loop, threaded like the kernel."""
    def run(dy, cos, sin):
        _pynative_executor.sync()
        itemsize = 4 if dy.dtype == ms.float32 else 2
        b, s, n, d = dy.shape
        rows = b * s * n
        threads = max(1, min(os.cpu_count(), rows, rows * (end - start) // PARALLEL_MIN_LANES))
        touch(dy.data_ptr(), rows, d * itemsize, start * itemsize, (end - start) * itemsize, threads, 0)
    return run


# --- implementations of the backward (all on the same inputs) --------------------------------------------------------
def make_inputs(shape, start, end, dtype, seed=0):
    b, s, n, d = shape
    rng = np.random.default_rng(seed)
    mstype = getattr(ms, dtype)
    cos, sin = ms_rotary.rope_cos_sin(np.arange(s), end - start, "half", dtype=mstype)  # unit rotations: no denormals
    dy = ms.Tensor(rng.uniform(-1, 1, shape).astype(np.float32), mstype)
    return dy, cos, sin


def moved_bytes(shape, start, end, dtype):
    itemsize = 4 if dtype == "float32" else 2
    b, s, n, _ = shape
    return (2 * b * s * n * (end - start) + 2 * s * (end - start)) * itemsize


def impl_ms_rotary(mode, start, end):
    op = ms_rotary.InplacePartialRotaryMulGrad(mode, [start, end])
    return lambda dy, cos, sin: op(dy, cos, sin)


def impl_raw_kernel(mode, start, end, threads):
    kernel = library.load(ms_rotary.compiled_kernel_path())

    def run(dy, cos, sin):
        name = str(dy.dtype).lower()
        kernel.rotate(dy.data_ptr(), None, cos.data_ptr(), sin.data_ptr(), dy.shape, cos.shape, sin.shape, name, name,
                      name, mode, start, end, True, threads)
    return run


def impl_numpy(mode, start, end):
    def run(dy, cos, sin):
        return numpy_kernel.rotate(dy.asnumpy(), cos.asnumpy(), sin.asnumpy(), mode, start, end, True)
    return run


def impl_mindspore_builtin(mode, start, end, jit):
    def run(dy, cos, sin):
        if dy.dtype == ms.bfloat16:  # MindSpore's CPU slicing has no bf16 kernel: compute in fp32, like the op
            return plain_rotary(dy.float(), cos.float(), sin.float(), mode, start, end, True).astype(ms.bfloat16)
        return plain_rotary(dy, cos, sin, mode, start, end, conjugate=True)
    return ms.jit(run) if jit else run


def torch_impls(mode, start, end):
    """torch eager and torch.compile (inductor) of the same backward; empty when torch is not installed."""
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(os.cpu_count())
    x_layout, y_layout = {0: ("h", "h"), 1: ("p", "p"), 2: ("q", "q"), 3: ("p", "h")}[mode]

    def split(t, layout):
        if layout == "h":
            return t.chunk(2, -1)
        if layout == "p":
            return t[..., 0::2], t[..., 1::2]
        first, second = t.chunk(2, -1)
        (a1, b1), (a2, b2) = first.chunk(2, -1), second.chunk(2, -1)
        return torch.cat([a1, a2], -1), torch.cat([b1, b2], -1)

    def merge(a, b, layout):
        if layout == "h":
            return torch.cat([a, b], -1)
        if layout == "p":
            return torch.stack([a, b], -1).flatten(-2)
        a1, a2 = a.chunk(2, -1)
        b1, b2 = b.chunk(2, -1)
        return torch.cat([a1, b1, a2, b2], -1)

    def backward(dy, cos, sin):
        d = dy[..., start:end].float()
        ca, cb = split(cos.float(), y_layout)
        sa, sb = split(sin.float(), y_layout)
        da, db = split(d, y_layout)
        dy[..., start:end] = merge(da * ca + db * sb, db * cb - da * sa, x_layout).to(dy.dtype)
        return dy

    torch._dynamo.config.recompile_limit = 64  # the size sweep compiles one graph per shape
    compiled = torch.compile(backward, dynamic=False)

    def on_torch(fn):
        cache = {}

        def run(dy, cos, sin):
            key = id(dy)
            if key not in cache:
                cache.clear()
                cache[key] = tuple(torch.from_numpy(t.float().asnumpy() if t.dtype == ms.bfloat16 else t.asnumpy())
                                   .to(torch.bfloat16 if t.dtype == ms.bfloat16 else torch.float32)
                                   for t in (dy, cos, sin))
            with torch.no_grad():
                fn(*cache[key])
        return run
    return {"torch eager": on_torch(backward), "torch.compile": on_torch(compiled)}


# --- the report -------------------------------------------------------------------------------------------------------
SLICE_TOUCH = None  # set in main(): the compiled slice_touch, or None


def benchmark_case(shape, start, end, mode, dtype, repeats, peers=True, copies=False, cold=False):
    """Median seconds per implementation, and for ms_rotary's companions (the same-bytes loop, with `copies` the
    copies moving the same bytes) the median over rounds of their time / ms_rotary's: they run in turn with it.
    With `cold` every call starts from caches full of other data."""
    before = evict_caches if cold else None
    dy, cos, sin = make_inputs(shape, start, end, dtype)
    nbytes = moved_bytes(shape, start, end, dtype)
    together = {"ms_rotary": functools.partial(impl_ms_rotary(mode, start, end), dy, cos, sin)}
    if SLICE_TOUCH is not None:
        together["same-bytes loop"] = functools.partial(impl_slice_touch(SLICE_TOUCH, start, end), dy, cos, sin)
    if copies:
        together.update(copy_impls(nbytes))
    samples = timed_in_turn(together, repeats, before=before)
    times = {name: statistics.median(sec) for name, sec in samples.items()}
    relative = {name: statistics.median(t / ours for t, ours in zip(sec, samples["ms_rotary"]))
                for name, sec in samples.items()}
    if peers:
        for name, fn in {
            "numpy fallback": impl_numpy(mode, start, end),
            "MindSpore built-ins": impl_mindspore_builtin(mode, start, end, jit=False),
            "MindSpore built-ins ms.jit": impl_mindspore_builtin(mode, start, end, jit=True),
            **torch_impls(mode, start, end),
        }.items():
            slow = name != "torch.compile"
            times[name] = timed(lambda fn=fn: fn(dy, cos, sin), max(3, repeats // 4) if slow else repeats,
                                before=before)
            relative[name] = times[name] / times["ms_rotary"]
    return nbytes, times, relative


def report_large_cases(repeats, emit):
    """The kernel table: each large case against the copies, the same-bytes loop and the peers."""
    emit("% columns: per case, ms_rotary, the copies (moving the same bytes) and the same-bytes loop (the slice bytes "
         "of every row read and rewritten in place by the simplest C loop, slice_touch.c, threaded like the kernel) "
         "run in turn, each call starting from caches full of other data; the median over rounds of their time / "
         "ms_rotary's")
    emit()
    emit("| case | dy shape | slice | mode | dtype | ms_rotary ms | GB/s | % numpy copy | % 2-thread memcpy | "
         "% same-bytes loop | x numpy | x MS built-ins | x MS ms.jit | x torch eager | x torch.compile |")
    emit("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    csv_rows = []
    for label, shape, (start, end), mode, dtype in LARGE_CASES:
        nbytes, times, relative = benchmark_case(shape, start, end, mode, dtype, repeats, copies=True, cold=True)
        ours = times["ms_rotary"]
        case = f"{label} {list(shape)} [{start}, {end}) {ms_rotary.MODE_NAMES[mode]} {dtype}"
        csv_rows += [(case, name, sec, nbytes) for name, sec in times.items()]

        def ratio(name):
            return f"{relative[name]:.1f}x" if name in relative else "n/a"

        def percent_of(name):
            return f"{100 * relative[name]:.0f}%" if name in relative else "n/a"
        emit(f"| {label} | {list(shape)} | [{start}, {end}) | {ms_rotary.MODE_NAMES[mode]} | {dtype} | "
             f"{ours * 1e3:.2f} | {nbytes / ours / 1e9:.1f} | {percent_of('numpy copy')} | "
             f"{percent_of('2-thread memcpy')} | {percent_of('same-bytes loop')} | {ratio('numpy fallback')} | "
             f"{ratio('MindSpore built-ins')} | {ratio('MindSpore built-ins ms.jit')} | {ratio('torch eager')} | "
             f"{ratio('torch.compile')} |")
    emit()
    return csv_rows


def report_d_scaling(repeats, emit):
    """Cost follows the slice, not D."""
    low, high = D_SCALING_DS
    rows = ", ".join(map(str, D_SCALING_ROWS))
    emit(f"cost follows the slice, not D (fp32, half mode, slice [0, 64), dy [{rows}, D]):")
    by_d = {d: benchmark_case(D_SCALING_ROWS + (d,), 0, 64, 0, "float32", repeats, peers=False, cold=True)[1]
            for d in D_SCALING_DS}
    for name in by_d[low]:
        emit(f"  {name}: D={low} {by_d[low][name] * 1e3:.3f} ms, D={high} {by_d[high][name] * 1e3:.3f} ms, "
             f"ratio {by_d[high][name] / by_d[low][name]:.2f}x" + (" (target <= 1.5x)" if name == "ms_rotary" else ""))
    emit()


def report_threads(repeats, moved, emit):
    """The raw kernel with 1 and 2 threads."""
    emit("threads (raw kernel through its C entry, fp32 [4, 4096, 32, 128] slice [0, 64)):")
    dy, cos, sin = make_inputs((4, 4096, 32, 128), 0, 64, "float32")
    thread_times = {t: timed(lambda t=t: impl_raw_kernel(0, 0, 64, t)(dy, cos, sin), repeats, before=evict_caches)
                    for t in (1, 2)}
    for t, sec in thread_times.items():
        emit(f"  {t} thread(s): {sec * 1e3:.2f} ms, {moved / sec / 1e9:.1f} GB/s")
    emit(f"  speed-up 2 threads / 1: {thread_times[1] / thread_times[2]:.2f}x")
    emit()


def report_call_overhead(quick, emit):
    """Per-call overhead on a tiny tensor against a built-in elementwise op; returns the CSV rows."""
    emit("per-call overhead on a tiny tensor (dy [1, 1, 1, 8], PyNative):")
    tiny, tcos, tsin = make_inputs((1, 1, 1, 8), 0, 8, "float32")
    op = ms_rotary.InplacePartialRotaryMulGrad(0, [0, 8])
    calls = 2000 if not quick else 300
    per_call = {
        "ms_rotary InplacePartialRotaryMulGrad": lambda: op(tiny, tcos, tsin),
        "MindSpore built-in add (tiny)": lambda: tiny + tiny,
        "MindSpore built-in add (tiny), 100 queued per sync": lambda: [tiny + tiny for _ in range(100)],
        "the registered ops.Custom AOT, called in PyNative": lambda: op.kernel.prim(tiny, tcos, tsin),
    }
    overhead = {}
    for name, fn in per_call.items():
        overhead[name] = timed(fn, calls // (100 if "queued" in name else 1)) * 1e6 / (100 if "queued" in name else 1)
        emit(f"  {name}: {overhead[name]:.1f} us")
    ours_per_call = overhead["ms_rotary InplacePartialRotaryMulGrad"]
    queued = overhead["MindSpore built-in add (tiny), 100 queued per sync"]
    emit(f"  ratio ms_rotary / built-in add: {ours_per_call / overhead['MindSpore built-in add (tiny)']:.2f}x, "
         f"/ queued built-in add: {ours_per_call / queued:.2f}x (target <= 2x)")
    emit()
    return [("per call, tiny tensor [1, 1, 1, 8]", name, us / 1e6, None) for name, us in overhead.items()]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, fewer sweep points")
    args = parser.parse_args()
    repeats = 5 if args.quick else 15
    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    results = os.path.join(output_dir(), "results")
    global SLICE_TOUCH
    SLICE_TOUCH = load_slice_touch()
    lines = []

    def emit(line=""):
        print(line, flush=True)
        lines.append(line)

    big = moved_bytes((4, 4096, 32, 128), 0, 64, "float32")
    copy_gbs = copy_bandwidth(big, repeats)
    emit(f"copy bandwidth (moving {big / 1e6:.0f} MB): numpy copy (1 thread) {copy_gbs['numpy copy']:.1f} GB/s, "
         f"memcpy on 2 threads {copy_gbs['2-thread memcpy']:.1f} GB/s")
    emit()
    csv_rows = report_large_cases(repeats, emit)
    report_d_scaling(repeats, emit)
    report_threads(repeats, big, emit)
    csv_rows += report_call_overhead(args.quick, emit)
    sweep(repeats, args.quick, max(copy_gbs.values()), emit)
    with open(os.path.join(results, "latest.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if not args.quick:
        append_rows(csv_rows)
    print(f"wrote {os.path.join(results, 'latest.md')} and {os.path.join(results, 'bandwidth.png')}"
          + ("" if args.quick else f"; appended this run to {runs_csv()}"))


def sweep(repeats, quick, best_copy, emit):
    """GB/s vs problem size per implementation, plotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seqs = [16, 128, 1024, 4096] if quick else [4, 16, 64, 256, 1024, 2048, 4096]
    series = {}
    for s in seqs:
        shape = (4, s, 32, 128)
        nbytes, times, _ = benchmark_case(shape, 0, 64, 0, "float32", max(3, repeats // 2), peers=True)
        for name, sec in times.items():
            series.setdefault(name, []).append((nbytes / 1e6, nbytes / sec / 1e9))
    plt.figure(figsize=(8, 5))
    for name, points in series.items():
        xs, ys = zip(*points)
        plt.plot(xs, ys, marker="o", label=name)
    plt.axhline(best_copy, color="grey", linestyle="--", label="copy bandwidth")
    plt.xscale("log")
    plt.yscale("log")
    plt.xlabel("bytes moved per call (MB)")
    plt.ylabel("effective bandwidth (GB/s)")
    plt.title("rotary backward, fp32 half mode, dy [4, S, 32, 128], slice [0, 64)")
    plt.legend(fontsize=8)
    plt.grid(True, which="both", alpha=0.3)
    plt.tight_layout()
    plt.savefig(os.path.join(output_dir(), "results", "bandwidth.png"), dpi=120)
    emit("sweep (GB/s by bytes moved): " + "; ".join(
        f"{name}: " + ", ".join(f"{mb:.1f}MB {gbs:.1f}" for mb, gbs in points) for name, points in series.items()))


if __name__ == "__main__":
    main()
