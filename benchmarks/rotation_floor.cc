// The arithmetic floor of one row from cache: 64 lanes rotated in the halves layout with nothing else (no
// cos row lookup, no prefetch, no layouts; cos/sin already fp32), against a loop that reads and rewrites the
// same bytes. If this floor is above 2x the loop, so is any kernel built from the same operations (issue 27).
// Build and run: g++ -O3 -march=native -ffp-contract=off -std=c++17 benchmarks/rotation_floor.cc && ./a.out
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

typedef float Vec __attribute__((vector_size(64)));  // 16 fp32 lanes, as the kernel's chunks on AVX-512
typedef uint32_t Bits __attribute__((vector_size(64)));
typedef uint16_t HalfBits __attribute__((vector_size(32)));

static inline Vec load(const float *p) {
  Vec v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
static inline void store(float *p, Vec v) { std::memcpy(p, &v, sizeof(v)); }
static inline Vec load(const uint16_t *p) {  // bf16 bits -> fp32
  HalfBits h;
  std::memcpy(&h, p, sizeof(h));
  return reinterpret_cast<Vec>(__builtin_convertvector(h, Bits) << 16);
}
static inline void store(uint16_t *p, Vec v) {  // fp32 -> bf16, nearest even, NaN kept quiet: as the kernel
  const Bits bits = reinterpret_cast<Bits>(v);
  const Bits rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const Bits out = (bits & 0x7fffffffu) > 0x7f800000u ? (bits >> 16) | 0x40u : rounded;
  const HalfBits h = __builtin_convertvector(out, HalfBits);
  std::memcpy(p, &h, sizeof(h));
}

constexpr int kRows = 2048, kHeadDim = 128, kHeads = 32, kLen = 64;

template <typename T>
__attribute__((noinline)) void rotate_rows(T *x, const float *cos, const float *sin) {
  for (int r = 0; r < kRows; ++r) {
    T *row = x + static_cast<int64_t>(r) * kHeadDim;
    const float *c = cos + (r / kHeads) * kLen, *s = sin + (r / kHeads) * kLen;
    for (int i = 0; i < kLen / 2; i += 16) {
      const Vec a = load(row + i), b = load(row + i + kLen / 2);
      const Vec ca = load(c + i), cb = load(c + kLen / 2 + i), sa = load(s + i), sb = load(s + kLen / 2 + i);
      store(row + i, a * ca - b * sa);
      store(row + i + kLen / 2, b * cb + a * sb);
    }
  }
}

template <typename T>
__attribute__((noinline)) void touch_rows(T *x, float zero) {
  for (int r = 0; r < kRows; ++r) {
    T *row = x + static_cast<int64_t>(r) * kHeadDim;
    for (int i = 0; i < kLen; i += 64 / static_cast<int>(sizeof(T))) {
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
  std::memset(x.data(), 0x3c, x.size() * sizeof(T));
  std::vector<float> cos(kRows / kHeads * kLen, 0.5f), sin(cos.size(), 0.25f);
  const double rotation = median_ns_per_row([&] { rotate_rows(x.data(), cos.data(), sin.data()); });
  const double touch = median_ns_per_row([&] { touch_rows(x.data(), zero); });
  std::printf("%s [%d,%d] [0,%d) half, from cache, 1 thread: rotation floor %.2f ns/row, same-bytes loop %.2f "
              "ns/row, floor/loop %.2f\n", name, kRows, kHeadDim, kLen, rotation, touch, rotation / touch);
}

int main(int argc, char **) {
  const float zero = static_cast<float>(argc - 1);
  run<float>("fp32", zero);
  run<uint16_t>("bf16", zero);
  return 0;
}
