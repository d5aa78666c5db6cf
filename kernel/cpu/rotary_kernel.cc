// One parametrised kernel for all four modes, forward and backward (conjugate), in place.
//
// Every mode rotates pairs of lanes (a, b) of the slice; modes differ only in where a pair's lanes sit
// in x and in y (cos/sin follow y). With h = len/2 and q = len/4:
//   mode            x layout                  y layout
//   0 half          halves   (k, k+h)         halves
//   1 interleave    pairs    (2k, 2k+1)       pairs
//   2 quarter       quarters (halves of each half of the slice)
//   3 interl.-half  pairs                     halves
// forward : y[ya] = x[xa]*c[ya] - x[xb]*s[ya];   y[yb] = x[xb]*c[yb] + x[xa]*s[yb]
// backward: dx[xa] = dy[ya]*c[ya] + dy[yb]*s[yb]; dx[xb] = dy[yb]*c[yb] - dy[ya]*s[ya]
// Each row's slice is split into fp32 a/b lane arrays, rotated with one contiguous loop, and merged
// into the output layout: in-place writes never feed later reads, bf16/fp16 round once on store, and
// the arithmetic has no alternating +/- pattern that GCC would fuse into FMA (vfmaddsub ignores
// -ffp-contract=off), so fp32 results match the numpy fallback bit for bit.
#include "rotary_kernel.h"


#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace ms_rotary {
namespace {

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN with its sign
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

// Storage types: float, _Float16 (IEEE half, GCC's native type), uint16_t holding bf16 bits.
struct BF16 {
  uint16_t bits;
};

inline float to_float(float v) { return v; }
inline float to_float(_Float16 v) { return static_cast<float>(v); }
inline float to_float(BF16 v) { return bf16_to_float(v.bits); }
inline void store(float *dst, float v) { *dst = v; }
inline void store(_Float16 *dst, float v) { *dst = static_cast<_Float16>(v); }
inline void store(BF16 *dst, float v) { dst->bits = float_to_bf16(v); }

enum Layout { kHalves, kPairs, kQuarters };

// src's `len` lanes -> the a and b lanes of its len/2 pairs, as fp32.
template <Layout L, typename T>
inline void split(const T *src, float *a, float *b, int64_t len) {
  const int64_t half = len / 2;
  if (L == kHalves) {
    for (int64_t k = 0; k < half; ++k) a[k] = to_float(src[k]);
    for (int64_t k = 0; k < half; ++k) b[k] = to_float(src[k + half]);
  } else if (L == kPairs) {
    for (int64_t k = 0; k < half; ++k) {
      a[k] = to_float(src[2 * k]);
      b[k] = to_float(src[2 * k + 1]);
    }
  } else {
    split<kHalves>(src, a, b, half);
    split<kHalves>(src + half, a + half / 2, b + half / 2, half);
  }
}

// The inverse of split: a/b lanes -> dst in layout L, rounded once to T.
template <Layout L, typename T>
inline void merge(const float *a, const float *b, T *dst, int64_t len) {
  const int64_t half = len / 2;
  if (L == kHalves) {
    for (int64_t k = 0; k < half; ++k) store(dst + k, a[k]);
    for (int64_t k = 0; k < half; ++k) store(dst + k + half, b[k]);
  } else if (L == kPairs) {
    for (int64_t k = 0; k < half; ++k) {
      store(dst + 2 * k, a[k]);
      store(dst + 2 * k + 1, b[k]);
    }
  } else {
    merge<kHalves>(a, b, dst, half);
    merge<kHalves>(a + half / 2, b + half / 2, dst + half, half);
  }
}

template <int MODE>
struct ModeLayout {
  static constexpr Layout x = MODE == 0 ? kHalves : MODE == 2 ? kQuarters : kPairs;
  static constexpr Layout y = MODE == 1 ? kPairs : MODE == 2 ? kQuarters : kHalves;
};

// Cos and sin of one row, split into the a/b lanes of y's layout.
struct CosSinLanes {
  float ca[kMaxHeadDim / 2], cb[kMaxHeadDim / 2], sa[kMaxHeadDim / 2], sb[kMaxHeadDim / 2];
};

template <bool CONJ>
inline void rotate_pairs(const float *ia, const float *ib, const CosSinLanes &cs, float *oa, float *ob,
                         int64_t half) {
  for (int64_t k = 0; k < half; ++k) {
    if (CONJ) {
      oa[k] = ia[k] * cs.ca[k] + ib[k] * cs.sb[k];
      ob[k] = ib[k] * cs.cb[k] - ia[k] * cs.sa[k];
    } else {
      oa[k] = ia[k] * cs.ca[k] - ib[k] * cs.sa[k];
      ob[k] = ib[k] * cs.cb[k] + ia[k] * cs.sb[k];
    }
  }
}

struct Geometry {
  int64_t S, N, D, start, end, len;
  int64_t cos_b_stride, cos_s_stride, cos_n_stride;  // 0 on broadcast axes, in rows
};

// Slices of rows far apart in memory (D >> slice) defeat the hardware prefetcher: each row is a new
// stream, often a new page. Requesting the slice ~1 KiB of slices ahead (2..16 rows) hides that latency.
inline int64_t prefetch_rows(int64_t slice_bytes) {
  return std::min<int64_t>(16, std::max<int64_t>(2, 1024 / std::max<int64_t>(slice_bytes, 1)));
}

inline void prefetch_slice(const void *p, int64_t bytes) {
  const char *c = static_cast<const char *>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 1, 3);
  __builtin_prefetch(c + bytes - 1, 1, 3);
}

// Rows [row_begin, row_end) of dy; `out` is dy (in place) or a separate tensor that also gets the lanes
// outside the slice.
template <int MODE, bool CONJ, typename T, typename U>
void rotate_rows(const T *dy, T *out, const U *cos, const U *sin, const Geometry &g, int64_t row_begin,
                 int64_t row_end) {
  constexpr Layout in_layout = CONJ ? ModeLayout<MODE>::y : ModeLayout<MODE>::x;
  constexpr Layout out_layout = CONJ ? ModeLayout<MODE>::x : ModeLayout<MODE>::y;
  constexpr int64_t kHalf = kMaxHeadDim / 2;
  float ia[kHalf], ib[kHalf], oa[kHalf], ob[kHalf];
  CosSinLanes cs;
  const int64_t half = g.len / 2;
  int64_t cached_cos_row = -1;  // broadcast cos rows repeat: split each once
  const int64_t ahead = prefetch_rows(g.len * static_cast<int64_t>(sizeof(T)));
  int64_t n = row_begin % g.N, srow = (row_begin / g.N) % g.S, b = row_begin / (g.N * g.S);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t cos_row = b * g.cos_b_stride + srow * g.cos_s_stride + n * g.cos_n_stride;
    if (cos_row != cached_cos_row) {
      split<ModeLayout<MODE>::y>(cos + cos_row * g.len, cs.ca, cs.cb, g.len);
      split<ModeLayout<MODE>::y>(sin + cos_row * g.len, cs.sa, cs.sb, g.len);
      cached_cos_row = cos_row;
    }
    const T *src = dy + row * g.D;
    T *dst = out + row * g.D;
    if (row + ahead < row_end) prefetch_slice(src + ahead * g.D + g.start, g.len * sizeof(T));
    split<in_layout>(src + g.start, ia, ib, g.len);
    if (dst != src) {
      std::memcpy(dst, src, g.start * sizeof(T));
      std::memcpy(dst + g.end, src + g.end, (g.D - g.end) * sizeof(T));
    }
    rotate_pairs<CONJ>(ia, ib, cs, oa, ob, half);
    merge<out_layout>(oa, ob, dst + g.start, g.len);
    if (++n == g.N) {
      n = 0;
      if (++srow == g.S) {
        srow = 0;
        ++b;
      }
    }
  }
}

using RowFn = void (*)(const void *, void *, const void *, const void *, const Geometry &, int64_t, int64_t);

template <int MODE, bool CONJ, typename T, typename U>
void rotate_rows_erased(const void *dy, void *out, const void *cos, const void *sin, const Geometry &g, int64_t b,
                        int64_t e) {
  rotate_rows<MODE, CONJ>(static_cast<const T *>(dy), static_cast<T *>(out), static_cast<const U *>(cos),
                          static_cast<const U *>(sin), g, b, e);
}

template <int MODE, bool CONJ, typename T>
RowFn pick_cos_type(DType cos_dtype) {
  switch (cos_dtype) {
    case kFloat32: return rotate_rows_erased<MODE, CONJ, T, float>;
    case kFloat16: return rotate_rows_erased<MODE, CONJ, T, _Float16>;
    default: return rotate_rows_erased<MODE, CONJ, T, BF16>;
  }
}

template <int MODE, bool CONJ>
RowFn pick_dy_type(DType dy_dtype, DType cos_dtype) {
  switch (dy_dtype) {
    case kFloat32: return pick_cos_type<MODE, CONJ, float>(cos_dtype);
    case kFloat16: return pick_cos_type<MODE, CONJ, _Float16>(cos_dtype);
    default: return pick_cos_type<MODE, CONJ, BF16>(cos_dtype);
  }
}

template <bool CONJ>
RowFn pick_mode(int64_t mode, DType dy_dtype, DType cos_dtype) {
  switch (mode) {
    case 0: return pick_dy_type<0, CONJ>(dy_dtype, cos_dtype);
    case 1: return pick_dy_type<1, CONJ>(dy_dtype, cos_dtype);
    case 2: return pick_dy_type<2, CONJ>(dy_dtype, cos_dtype);
    default: return pick_dy_type<3, CONJ>(dy_dtype, cos_dtype);
  }
}

// Below this many rotated lanes a second thread costs more to start than it saves.
constexpr int64_t kParallelMinLanes = 1 << 16;

int pick_threads(int requested, int64_t rows, int64_t lanes) {
  if (requested > 0) return static_cast<int>(std::min<int64_t>(requested, rows));
  if (lanes < kParallelMinLanes) return 1;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::min<int64_t>(hw, rows));
}

int64_t element_size(DType t) { return t == kFloat32 ? 4 : 2; }

bool is_empty(const RotaryProblem &p) {
  if (p.start == p.end) return true;
  for (int i = 0; i < 4; ++i) {
    if (p.dy_shape[i] == 0 || p.cos_shape[i] == 0 || p.sin_shape[i] == 0) return true;
  }
  return false;
}

}  // namespace

DType dtype_from_name(const char *name) {
  if (name == nullptr) return kBadDType;
  if (std::strcmp(name, "float32") == 0) return kFloat32;
  if (std::strcmp(name, "float16") == 0) return kFloat16;
  if (std::strcmp(name, "bfloat16") == 0) return kBFloat16;
  return kBadDType;
}

Status check_rotary(const RotaryProblem &p) {
  if (p.dy_dtype == kBadDType || p.cos_dtype == kBadDType || p.sin_dtype == kBadDType) return kBadDTypeCode;
  if (p.cos_dtype != p.sin_dtype) return kCosSinMismatch;
  for (int i = 0; i < 4; ++i) {
    if (p.cos_shape[i] != p.sin_shape[i]) return kCosSinMismatch;
    if (p.dy_shape[i] < 0 || p.cos_shape[i] < 0) return kBadRank;
  }
  if (p.rotary_mode < 0 || p.rotary_mode > 3) return kBadMode;
  const int64_t D = p.dy_shape[3];
  if (D > kMaxHeadDim) return kHeadDimTooLarge;
  if (p.start < 0 || p.start > p.end || p.end > D) return kBadSlice;
  const int64_t len = p.end - p.start;
  if (len % (p.rotary_mode == 2 ? 4 : 2) != 0) return kBadSliceLength;
  for (int i = 0; i < 4; ++i) {
    if (p.cos_shape[i] == 0) return kOk;  // empty work: a zero-sized cos/sin makes the call a no-op
  }
  for (int i = 0; i < 3; ++i) {
    if (p.cos_shape[i] != 1 && p.cos_shape[i] != p.dy_shape[i]) return kBadBroadcast;
  }
  if (len > 0 && p.cos_shape[3] != len) return kBadCosLength;
  return kOk;
}

Status run_rotary(const RotaryProblem &p, int num_threads) {
  const Status status = check_rotary(p);
  if (status != kOk) return status;
  if (is_empty(p)) {
    if (p.out != nullptr && p.out != p.dy) {
      int64_t bytes = element_size(p.dy_dtype);
      for (int i = 0; i < 4; ++i) bytes *= p.dy_shape[i];
      std::memcpy(p.out, p.dy, bytes);
    }
    return kOk;
  }
  void *out = p.out != nullptr ? p.out : p.dy;
  const int64_t B = p.dy_shape[0], S = p.dy_shape[1], N = p.dy_shape[2];
  Geometry g{S, N, p.dy_shape[3], p.start, p.end, p.end - p.start, 0, 0, 0};
  g.cos_n_stride = p.cos_shape[2] == 1 ? 0 : 1;
  g.cos_s_stride = p.cos_shape[1] == 1 ? 0 : p.cos_shape[2];
  g.cos_b_stride = p.cos_shape[0] == 1 ? 0 : p.cos_shape[1] * p.cos_shape[2];
  const RowFn fn = p.conjugate ? pick_mode<true>(p.rotary_mode, p.dy_dtype, p.cos_dtype)
                               : pick_mode<false>(p.rotary_mode, p.dy_dtype, p.cos_dtype);
  const int64_t rows = B * S * N;
  const int threads = pick_threads(num_threads, rows, rows * g.len);
  if (threads <= 1) {
    fn(p.dy, out, p.cos, p.sin, g, 0, rows);
    return kOk;
  }
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  const int64_t per = (rows + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    const int64_t b = std::min(rows, t * per), e = std::min(rows, b + per);
    if (b < e) workers.emplace_back(fn, p.dy, out, p.cos, p.sin, std::cref(g), b, e);
  }
  fn(p.dy, out, p.cos, p.sin, g, 0, std::min(rows, per));
  for (auto &w : workers) w.join();
  return kOk;
}

}  // namespace ms_rotary
