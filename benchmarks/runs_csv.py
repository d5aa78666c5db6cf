"""Appends a benchmark run's results to runs.csv, one row per case and implementation, so runs compare over
time: git revision, date, machine, case, implementation, ms, GB/s. Runs write under benchmarks/out/ (untracked);
with MS_ROTARY_BENCH_RECORD=1 they update the committed benchmarks/runs.csv and benchmarks/results/."""
import csv
import datetime
import os
import platform
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD_ENV = "MS_ROTARY_BENCH_RECORD"


def output_dir():
    """benchmarks/ itself when recording (MS_ROTARY_BENCH_RECORD=1), else benchmarks/out/ (git ignores it)."""
    directory = HERE if os.environ.get(RECORD_ENV) == "1" else os.path.join(HERE, "out")
    os.makedirs(os.path.join(directory, "results"), exist_ok=True)
    return directory


def runs_csv():
    return os.path.join(output_dir(), "runs.csv")
COLUMNS = ["revision", "date", "machine", "case", "implementation", "ms", "GB/s"]


def revision():
    try:
        described = subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"], capture_output=True,
                                   text=True, check=True).stdout.strip()
        return described or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores"


def append_rows(rows):
    """rows: (case, implementation, seconds, bytes moved or None)."""
    path = runs_csv()
    new_file = not os.path.exists(path)
    stamp = (revision(), datetime.date.today().isoformat(), machine())
    with open(path, "a", newline="") as out:
        writer = csv.writer(out)
        if new_file:
            writer.writerow(COLUMNS)
        for case, implementation, seconds, nbytes in rows:
            gbs = f"{nbytes / seconds / 1e9:.2f}" if nbytes else ""
            writer.writerow([*stamp, case, implementation, f"{seconds * 1e3:.3f}", gbs])
