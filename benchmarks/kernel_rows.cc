// The CPU kernel alone, no MindSpore: run_rotary on a freshly allocated dy against slice_touch (the same bytes
// read and rewritten by the simplest loop), alternating the two so machine noise hits both alike.
// Build and run the standard cases with benchmarks/kernel_rows.sh.
//   kernel_rows B S N D start end mode dtype threads [repeats]    (dtype: float32 | float16 | bfloat16)
// dy starts 16 bytes past a cache line, as MindSpore's buffers do; cos/sin are [1, S, 1, end - start].
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rotary_kernel.h"

extern "C" int slice_touch(void *base, int64_t rows, int64_t row_bytes, int64_t offset, int64_t bytes, int threads,
                           unsigned char delta);

namespace {

double seconds_of(void (*fn)(void *), void *arg) {
  const auto start = std::chrono::steady_clock::now();
  fn(arg);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
    std::fprintf(stderr, "usage: %s B S N D start end mode dtype threads [repeats]\n", argv[0]);
    return 2;
  }
  const int64_t B = std::atoll(argv[1]), S = std::atoll(argv[2]), N = std::atoll(argv[3]), D = std::atoll(argv[4]);
  const int64_t start = std::atoll(argv[5]), end = std::atoll(argv[6]), mode = std::atoll(argv[7]);
  const ms_rotary::DType dtype = ms_rotary::dtype_from_name(argv[8]);
  const int threads = std::atoi(argv[9]), repeats = argc > 10 ? std::atoi(argv[10]) : 15;
  const int64_t item = dtype == ms_rotary::kFloat32 ? 4 : 2, len = end - start, rows = B * S * N;

  std::vector<unsigned char> dy_storage(rows * D * item + 128), table(2 * S * len * item);
  unsigned char *dy = dy_storage.data() + (64 - reinterpret_cast<uintptr_t>(dy_storage.data()) % 64) + 16;
  for (size_t i = 0; i < dy_storage.size() - 128; i += 2) dy[i + 1] = 0x3c;  // ~1.0 in every dtype's top byte
  for (size_t i = 0; i < table.size(); i += 2) table[i + 1] = 0x3b;           // ~0.7: cos and sin
  Case c{{dy, nullptr, table.data(), table.data() + S * len * item, {B, S, N, D}, {1, S, 1, len}, {1, S, 1, len},
          dtype, dtype, dtype, mode, start, end, true},
         threads, rows, D * item, start * item, len * item};

  std::vector<double> kernel, touch, ratio;
  run_kernel(&c);
  run_touch(&c);
  for (int r = 0; r < repeats; ++r) {
    kernel.push_back(seconds_of(run_kernel, &c));
    touch.push_back(seconds_of(run_touch, &c));
    ratio.push_back(kernel.back() / touch.back());
  }
  const double moved = (2.0 * rows * len + 2.0 * S * len) * item, k = median(kernel), t = median(touch);
  std::printf("[%lld,%lld,%lld,%lld] [%lld,%lld) mode %lld %s, %d thread(s): kernel %.3f ms %.1f GB/s, "
              "%.1f ns/row/thread | same-bytes loop %.3f ms %.1f GB/s | kernel/loop %.2f\n",
              (long long)B, (long long)S, (long long)N, (long long)D, (long long)start, (long long)end,
              (long long)mode, argv[8], threads, k * 1e3, moved / k / 1e9, k * 1e9 * threads / rows, t * 1e3,
              moved / t / 1e9, median(ratio));
  return 0;
}
