// One parametrised kernel for all four modes, forward and backward (conjugate), in place.
//
// Every mode rotates pairs of lanes (a, b) of the slice. The pairs are read in the layout of the
// input and written in the layout of the output; cos/sin lanes follow y (the forward's output):
//   mode            x lanes of pair k       y lanes of pair k       segments
//   0 half          (k, k+h)                (k, k+h)                1
//   1 interleave    (2k, 2k+1)              (2k, 2k+1)              1
//   2 quarter       (k, k+h) per segment    (k, k+h) per segment    2
//   3 interl.-half  (2k, 2k+1)              (k, k+h)                1
// forward : y[ya] = x[xa]*c[ya] - x[xb]*s[ya];   y[yb] = x[xb]*c[yb] + x[xa]*s[yb]
// backward: dx[xa] = dy[ya]*c[ya] + dy[yb]*s[yb]; dx[xb] = dy[yb]*c[yb] - dy[ya]*s[ya]
// A row's slice is first copied to an fp32 buffer, so in-place writes never feed later reads
// and bf16/fp16 are rounded once on store. Built with -ffp-contract=off so results match the
// numpy fallback bit for bit in fp32.
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

enum Layout { kHalves, kPairs };

template <Layout L>
inline int64_t lane_a(int64_t k, int64_t /*half*/) {
  return L == kHalves ? k : 2 * k;
}
template <Layout L>
inline int64_t lane_b(int64_t k, int64_t half) {
  return L == kHalves ? k + half : 2 * k + 1;
}

// Rotates one segment of `len` lanes from `in` to `out`; c/s are the segment's cos/sin lanes.
template <Layout XL, Layout YL, bool CONJ, typename T>
inline void rotate_segment(const float *in, T *out, const float *c, const float *s, int64_t len) {
  const int64_t half = len / 2;
  for (int64_t k = 0; k < half; ++k) {
    const int64_t ya = lane_a<YL>(k, half), yb = lane_b<YL>(k, half);
    const int64_t xa = lane_a<XL>(k, half), xb = lane_b<XL>(k, half);
    if (CONJ) {
      const float da = in[ya], db = in[yb];
      store(out + xa, da * c[ya] + db * s[yb]);
      store(out + xb, db * c[yb] - da * s[ya]);
    } else {
      const float xa_v = in[xa], xb_v = in[xb];
      store(out + ya, xa_v * c[ya] - xb_v * s[ya]);
      store(out + yb, xb_v * c[yb] + xa_v * s[yb]);
    }
  }
}

template <int MODE, bool CONJ, typename T>
inline void rotate_row(const float *in, T *out, const float *c, const float *s, int64_t len) {
  if (MODE == 0) {
    rotate_segment<kHalves, kHalves, CONJ>(in, out, c, s, len);
  } else if (MODE == 1) {
    rotate_segment<kPairs, kPairs, CONJ>(in, out, c, s, len);
  } else if (MODE == 2) {
    const int64_t seg = len / 2;
    rotate_segment<kHalves, kHalves, CONJ>(in, out, c, s, seg);
    rotate_segment<kHalves, kHalves, CONJ>(in + seg, out + seg, c + seg, s + seg, seg);
  } else {
    rotate_segment<kPairs, kHalves, CONJ>(in, out, c, s, len);
  }
}

// Returns a pointer to `len` fp32 lanes of `src`, converting into `buf` unless already fp32.
template <typename U>
inline const float *as_float(const U *src, float *buf, int64_t len) {
  for (int64_t i = 0; i < len; ++i) buf[i] = to_float(src[i]);
  return buf;
}
template <>
inline const float *as_float<float>(const float *src, float *, int64_t) {
  return src;
}

struct Geometry {
  int64_t S, N, D, start, end, len;
  int64_t cos_b_stride, cos_s_stride, cos_n_stride;  // 0 on broadcast axes, in rows
};

// Rows [row_begin, row_end) of dy; `out` is dy (in place) or a separate tensor that also gets the lanes
// outside the slice.
template <int MODE, bool CONJ, typename T, typename U>
void rotate_rows(const T *dy, T *out, const U *cos, const U *sin, const Geometry &g, int64_t row_begin,
                 int64_t row_end) {
  float in[kMaxHeadDim], cbuf[kMaxHeadDim], sbuf[kMaxHeadDim];
  const float *c = nullptr, *s = nullptr;
  int64_t cached_cos_row = -1;  // broadcast cos rows repeat: convert each once
  int64_t n = row_begin % g.N, srow = (row_begin / g.N) % g.S, b = row_begin / (g.N * g.S);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t cos_row = b * g.cos_b_stride + srow * g.cos_s_stride + n * g.cos_n_stride;
    if (cos_row != cached_cos_row) {
      c = as_float(cos + cos_row * g.len, cbuf, g.len);
      s = as_float(sin + cos_row * g.len, sbuf, g.len);
      cached_cos_row = cos_row;
    }
    const T *src = dy + row * g.D;
    T *dst = out + row * g.D;
    for (int64_t i = 0; i < g.len; ++i) in[i] = to_float(src[g.start + i]);
    if (dst != src) {
      std::memcpy(dst, src, g.start * sizeof(T));
      std::memcpy(dst + g.end, src + g.end, (g.D - g.end) * sizeof(T));
    }
    rotate_row<MODE, CONJ>(in, dst + g.start, c, s, g.len);
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
