// The arithmetic floor of one row from cache: 64 lanes rotated in the halves layout with nothing else (no
// cos row lookup, no prefetch, no layouts; cos/sin already fp32), against a loop that reads and rewrites the
// same bytes. If this floor is above 2x the loop, so is any kernel built from the same operations (issue 27).
// Build and run (kernel_rows.sh does):
//   g++ -O3 -march=native -std=c++17 -pthread -ffp-contract=off -I kernel/cpu benchmarks/rotation_floor.cc
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rotary_rows.h"  // the kernel's own chunks, conversions and rotation: only the row work is left out

using ms_rotary::row_loops::BF16;
using ms_rotary::row_loops::kChunk;
using ms_rotary::row_loops::load_vec;
using ms_rotary::row_loops::store_vec;
using ms_rotary::row_loops::Vec;

constexpr int kRows = 2048, kHeadDim = 128, kHeads = 32, kLen = 64;

template <typename T>
__attribute__((noinline)) void rotate_rows(T *x, const float *cos, const float *sin) {
  for (int r = 0; r < kRows; ++r) {
    T *row = x + static_cast<int64_t>(r) * kHeadDim;
    const float *c = cos + (r / kHeads) * kLen, *s = sin + (r / kHeads) * kLen;
    for (int i = 0; i < kLen / 2; i += kChunk) {
      const Vec a = load_vec(row + i), b = load_vec(row + i + kLen / 2);
      const Vec ca = load_vec(c + i), cb = load_vec(c + kLen / 2 + i);
      const Vec sa = load_vec(s + i), sb = load_vec(s + kLen / 2 + i);
      Vec ya, yb;
      ms_rotary::row_loops::rotate<false>(a, b, ca, cb, sa, sb, ya, yb);
      store_vec(row + i, ya);
      store_vec(row + i + kLen / 2, yb);
    }
  }
}

template <typename T>
__attribute__((noinline)) void touch_rows(T *x, float zero) {
  for (int r = 0; r < kRows; ++r) {
    T *row = x + static_cast<int64_t>(r) * kHeadDim;
    for (int i = 0; i < kLen; i += static_cast<int>(sizeof(Vec) / sizeof(T))) {
      Vec v;
      std::memcpy(&v, row + i, sizeof(v));
      v += zero * v;  // 0 at run time: the bytes stay, the compiler must still load and store them
      std::memcpy(row + i, &v, sizeof(v));
    }
  }
}

template <typename F>
double median_ns_per_row(F f) {
  std::vector<double> times;
  for (int k = 0; k < 2001; ++k) {
    const auto begin = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - begin).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2] / kRows;
}

template <typename T>
void run(const char *name, float zero) {
  std::vector<T> x(static_cast<size_t>(kRows) * kHeadDim);
  for (T &lane : x) ms_rotary::row_loops::store(&lane, 1.0f);  // a rotation (0.6^2 + 0.8^2 = 1) keeps it near 1
  std::vector<float> cos(kRows / kHeads * kLen, 0.6f), sin(cos.size(), 0.8f);
  const double rotation = median_ns_per_row([&] { rotate_rows(x.data(), cos.data(), sin.data()); });
  const double touch = median_ns_per_row([&] { touch_rows(x.data(), zero); });
  std::printf("%s [%d,%d] [0,%d) half, from cache, 1 thread: rotation floor %.2f ns/row, same-bytes loop %.2f "
              "ns/row, floor/loop %.2f\n", name, kRows, kHeadDim, kLen, rotation, touch, rotation / touch);
}

int main(int argc, char **) {
  const float zero = static_cast<float>(argc - 1);
  run<float>("fp32", zero);
  run<BF16>("bf16", zero);
  return 0;
}
