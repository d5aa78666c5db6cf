#!/bin/bash
# The CPU kernel alone against the same-bytes loop (kernel_rows.cc): per-row cost from cache and its arithmetic
# floor (rotation_floor.cc), the large shapes of benchmarks/run.py from memory at 1, 2, 4, ... up to every
# CPU's threads (kernel_ab.py), and the D pair in 2 MiB pages. Needs python3, g++ and cc only.
# Usage: bash benchmarks/kernel_rows.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
binary=$(python3 -m benchmarks.kernel_ab --build "$out")
run() { "$binary" "$@"; }
echo "from cache (dy 1 MB or less, 1 thread): per-row compute"
for dtype in float32 float16 bfloat16; do
  for mode in 0 1 2; do run 1 64 32 128 0 64 $mode $dtype 1 2000; done
  run 1 64 16 192 128 192 3 $dtype 1 2000
done
echo "the arithmetic floor of those rows (rotation_floor.cc: the rotation alone, nothing else)"
g++ -O3 -march=native -std=c++17 -pthread -ffp-contract=off -I kernel/cpu benchmarks/rotation_floor.cc \
  -o "$out/rotation_floor"
"$out/rotation_floor"
threads="1"
for t in 2 4 8 16 32 64 128 256; do [ "$t" -le "$(nproc)" ] && threads="$threads,$t"; done
echo "from memory: the large cases at $threads threads"
python3 -m benchmarks.kernel_ab --rounds 1 --threads "$threads"
echo "D=64 vs D=1024 again, dy in 2 MiB pages (no TLB misses: what is left is DRAM locality)"
run 1 8192 32 64 0 64 0 float32 2 15 2m
run 1 8192 32 1024 0 64 0 float32 2 15 2m
rm -r "$out"
