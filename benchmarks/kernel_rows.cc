// The CPU kernel alone, no MindSpore: run_rotary on a freshly allocated dy against slice_touch (the same bytes
// read and rewritten by the simplest loop), alternating the two so machine noise hits both alike. When dy is
// larger than 8 MiB every timed call starts from caches full of other dirty data (as benchmarks/run.py does).
// Build and run the standard cases with benchmarks/kernel_rows.sh.
//   kernel_rows B S N D start end mode dtype threads [repeats] [pages] [norm] [aligned]
//   dtype: float32 | float16 | bfloat16; pages: 4k (default, what MindSpore's buffers get here) or 2m
//   (dy in transparent 2 MiB pages: rules out TLB misses as the cost of rows far apart); norm: the forward
//   with the head norm before the rotation (q/k RMSNorm, weight 1), which reads and writes whole rows, so the
//   loop does too (built with -DKERNEL_ROWS_HEAD_NORM, for kernels that have the norm).
// dy starts 16 bytes past a 4 KiB page, as MindSpore's large buffers do here (data_ptr() % 4096 == 16); the
// offset matters to prefetch experiments; `aligned` puts dy on the page itself, to measure what the offset costs.
// cos/sin are [1, S, 1, end - start].
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/mman.h>

#include "rotary_kernel.h"

extern "C" int slice_touch(void *base, int64_t rows, int64_t row_bytes, int64_t offset, int64_t bytes, int threads,
                           unsigned char delta);

namespace {

double seconds_of(void (*fn)(void *), void *arg) {
  const auto start = std::chrono::steady_clock::now();
  fn(arg);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `bytes` of zeroed memory aligned to 2 MiB, in 2 MiB pages if `huge` and the kernel grants them
// (transparent huge pages in "madvise" mode, as here). Never freed: the process ends after one case.
unsigned char *map_bytes(size_t bytes, bool huge) {
  const size_t page = size_t{2} << 20, size = (bytes + 2 * page - 1) / page * page;
  void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) std::abort();
  unsigned char *base = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(m) + page - 1) & ~(page - 1));
  madvise(base, size - page, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return base;
}

long anon_huge_kib() {  // AnonHugePages of this process, to show whether 2 MiB pages were granted
  FILE *f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "AnonHugePages: %ld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib;
}

// `count` elements of `dtype` equal to `value` (bf16: its top 16 bits, so a little under it).
void fill(unsigned char *p, size_t count, ms_rotary::DType dtype, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const _Float16 half = static_cast<_Float16>(value);
  const uint16_t bf16 = static_cast<uint16_t>(bits >> 16);
  for (size_t i = 0; i < count; ++i) {
    if (dtype == ms_rotary::kFloat32) std::memcpy(p + 4 * i, &value, 4);
    if (dtype == ms_rotary::kFloat16) std::memcpy(p + 2 * i, &half, 2);
    if (dtype == ms_rotary::kBFloat16) std::memcpy(p + 2 * i, &bf16, 2);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Case {
  ms_rotary::RotaryProblem problem;
  int threads;
  int64_t rows, row_bytes, offset, bytes;
};

void run_kernel(void *arg) {
  const Case &c = *static_cast<Case *>(arg);
  if (ms_rotary::run_rotary(c.problem, c.threads) != ms_rotary::kOk) std::abort();
}

void run_touch(void *arg) {
  const Case &c = *static_cast<Case *>(arg);
  if (slice_touch(c.problem.dy, c.rows, c.row_bytes, c.offset, c.bytes, c.threads, 0) != 0) std::abort();
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 10) {
    std::fprintf(stderr, "usage: %s B S N D start end mode dtype threads [repeats] [4k|2m] [norm] [aligned]\n",
                 argv[0]);
    return 2;
  }
  const int64_t B = std::atoll(argv[1]), S = std::atoll(argv[2]), N = std::atoll(argv[3]), D = std::atoll(argv[4]);
  const int64_t start = std::atoll(argv[5]), end = std::atoll(argv[6]), mode = std::atoll(argv[7]);
  const ms_rotary::DType dtype = ms_rotary::dtype_from_name(argv[8]);
  const int threads = std::atoi(argv[9]);
  int repeats = 15;
  bool huge = false, norm = false, aligned = false;
  for (int i = 10; i < argc; ++i) {
    if (std::strcmp(argv[i], "2m") == 0 || std::strcmp(argv[i], "4k") == 0) {
      huge = argv[i][0] == '2';
    } else if (std::strcmp(argv[i], "norm") == 0) {
      norm = true;
    } else if (std::strcmp(argv[i], "aligned") == 0) {
      aligned = true;
    } else {
      repeats = std::atoi(argv[i]);
    }
  }
  const int64_t item = dtype == ms_rotary::kFloat32 ? 4 : 2, len = end - start, rows = B * S * N;

  const size_t dy_bytes = rows * D * item;
  std::vector<unsigned char> table(2 * S * len * item);
  const size_t offset = aligned ? 0 : 16;
  unsigned char *dy = map_bytes(dy_bytes + offset, huge) + offset;
  // dy about 1, cos 0.6 and sin 0.8: each in-place call is then a rotation that keeps the values near 1 over any
  // number of repeats (a table under that, as before, shrank them by ~2^-8 a call: subnormal after ~15 calls,
  // which puts the bf16 stores on their slow path, then zero).
  fill(dy, dy_bytes / item, dtype, 1.0f);
  fill(table.data(), S * len, dtype, 0.6f);
  fill(table.data() + S * len * item, S * len, dtype, 0.8f);
  Case c{{dy, nullptr, table.data(), table.data() + S * len * item, {B, S, N, D}, {1, S, 1, len}, {1, S, 1, len},
          dtype, dtype, dtype, mode, start, end, true},
         threads, rows, D * item, start * item, len * item};
  const std::vector<float> unit_weight(D, 1.0f);
  if (norm) {
#ifdef KERNEL_ROWS_HEAD_NORM
    c.problem.conjugate = false;
    c.problem.norm.weight = unit_weight.data();
    c.problem.norm.eps = 1e-6f;
    c.offset = 0;  // whole rows read and written
    c.bytes = D * item;
#else
    std::fprintf(stderr, "this kernel has no head norm\n");
    return 2;
#endif
  }

  std::vector<unsigned char> other(dy_bytes > (size_t{8} << 20) ? size_t{96} << 20 : 0);
  const auto evict_caches = [&other] {
    for (auto &byte : other) ++byte;
  };
  std::vector<double> kernel, touch, ratio;
  run_kernel(&c);
  run_touch(&c);
  for (int r = 0; r < repeats; ++r) {
    evict_caches();
    kernel.push_back(seconds_of(run_kernel, &c));
    evict_caches();
    touch.push_back(seconds_of(run_touch, &c));
    ratio.push_back(kernel.back() / touch.back());
  }
  const double moved = 2.0 * rows * c.bytes + 2.0 * S * len * item, k = median(kernel), t = median(touch);
  std::printf("[%lld,%lld,%lld,%lld] [%lld,%lld) mode %lld %s%s%s, %d thread(s): kernel %.3f ms %.1f GB/s, "
              "%.1f ns/row/thread | same-bytes loop %.3f ms %.1f GB/s | kernel/loop %.2f",
              (long long)B, (long long)S, (long long)N, (long long)D, (long long)start, (long long)end,
              (long long)mode, argv[8], norm ? " with the head norm" : "", aligned ? ", dy page-aligned" : "", threads,
              k * 1e3, moved / k / 1e9, k * 1e9 * threads / rows, t * 1e3, moved / t / 1e9, median(ratio));
  if (huge) std::printf(" | in 2 MiB pages: %ld MiB (dy %zu MiB)", anon_huge_kib() / 1024, dy_bytes >> 20);
  std::printf("\n");
  return 0;
}
