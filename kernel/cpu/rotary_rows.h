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
// Each row's slice is rotated kChunk pairs at a time (16 with AVX-512) in SIMD registers: load the pairs'
// a and b lanes as fp32 vectors (deinterleaving pairs layouts), rotate, store them back in the output
// layout, rounding bf16/fp16 once; a tail of fewer than kChunk pairs goes one pair at a time. a and b
// stay separate vectors, so there is no alternating +/- pattern for GCC to fuse into FMA (vfmaddsub
// ignores -ffp-contract=off): results match the numpy fallback bit for bit.
//
// This header holds the row loops (templates); rotate_rows.cc, norm_rows.cc, norm_whole_rows.cc and
// norm_grad_rows.cc each instantiate one family of them for every mode and dtype pair, so the build compiles
// them in parallel; rotary_kernel.cc checks a call, picks its instance and splits its rows over threads.
#ifndef MS_ROTARY_KERNEL_CPU_ROTARY_ROWS_H_
#define MS_ROTARY_KERNEL_CPU_ROTARY_ROWS_H_

#include "rotary_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__SSE__)
#include <xmmintrin.h>
#endif
#include <type_traits>
#include <utility>

namespace ms_rotary {
namespace row_loops {

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

// A double rounded once to the storage type (the cos/sin gradients' sums). bf16 goes through a float rounded
// to odd: with 16 more bits than bf16, its nearest-even rounding to bf16 is then that of the double itself.
inline void store_rounded(float *dst, double v) { *dst = static_cast<float>(v); }
inline void store_rounded(_Float16 *dst, double v) { *dst = static_cast<_Float16>(v); }
inline void store_rounded(BF16 *dst, double v) {
  float f = static_cast<float>(v);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);  // toward zero
  if (static_cast<double>(f) != v && !std::isnan(v)) {  // inexact: make the last bit sticky (odd)
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    bits |= 1u;
    std::memcpy(&f, &bits, sizeof(bits));
  }
  dst->bits = float_to_bf16(f);
}

// kChunk fp32 lanes as a GCC vector sized to one register of the build's SIMD (zmm, ymm, else 128-bit),
// so a chunk of pairs is converted, shuffled and rotated in registers with no per-lane loop to vectorize.
#if defined(__AVX512F__)
constexpr int kChunk = 16;
#elif defined(__AVX__)
constexpr int kChunk = 8;
#else
constexpr int kChunk = 4;
#endif
typedef float Vec __attribute__((vector_size(4 * kChunk)));
typedef uint32_t Bits __attribute__((vector_size(4 * kChunk)));
typedef int32_t Index __attribute__((vector_size(4 * kChunk)));
typedef uint16_t HalfBits __attribute__((vector_size(2 * kChunk)));
typedef _Float16 HalfVec __attribute__((vector_size(2 * kChunk)));

template <typename V>
inline V load_bytes(const void *p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline Vec load_vec(const float *p) { return load_bytes<Vec>(p); }
// GCC converts _Float16 vectors one lane at a time; AVX-512F/F16C convert a register at once, rounding alike.
inline Vec load_vec(const _Float16 *p) {
#if defined(__AVX512F__)
  return reinterpret_cast<Vec>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))));
#elif defined(__F16C__)  // with AVX: kChunk is 8
  Vec v;
  for (int k = 0; k < kChunk; k += 8) {
    const __m256 lanes = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p + k)));
    std::memcpy(reinterpret_cast<float *>(&v) + k, &lanes, sizeof(lanes));
  }
  return v;
#else
  return __builtin_convertvector(load_bytes<HalfVec>(p), Vec);
#endif
}
inline Vec load_vec(const BF16 *p) {
#if defined(__AVX512BW__)  // one widening load (GCC splits the generic form below into 256-bit halves)
  return reinterpret_cast<Vec>(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))), 16));
#else
  return reinterpret_cast<Vec>(__builtin_convertvector(load_bytes<HalfBits>(p), Bits) << 16);
#endif
}

inline void store_vec(float *p, Vec v) { std::memcpy(p, &v, sizeof(v)); }
inline void store_vec(_Float16 *p, Vec v) {
#if defined(__AVX512F__)
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(p),
                      _mm512_cvtps_ph(reinterpret_cast<__m512>(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
  for (int k = 0; k < kChunk; k += 8) {
    const __m256 lanes = load_bytes<__m256>(reinterpret_cast<const float *>(&v) + k);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p + k),
                     _mm256_cvtps_ph(lanes, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#else
  const HalfVec h = __builtin_convertvector(v, HalfVec);
  std::memcpy(p, &h, sizeof(h));
#endif
}
inline HalfBits to_bf16_bits(Vec v) {  // float_to_bf16, lane-wise
  const Bits bits = reinterpret_cast<Bits>(v);
  const Bits rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const Bits out = (bits & 0x7fffffffu) > 0x7f800000u ? (bits >> 16) | 0x40u : rounded;
  return __builtin_convertvector(out, HalfBits);
}
inline void store_vec(BF16 *p, Vec v) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  // The hardware conversion rounds to nearest even and quiets NaN exactly as float_to_bf16 does, but treats a
  // subnormal input as zero; such lanes are rare, and a chunk holding one is converted lane-wise instead.
  const __m512 lanes = reinterpret_cast<__m512>(v);
  const __mmask16 subnormal = _mm512_fpclass_ps_mask(lanes, 0x20);  // 0x20: denormal
  if (__builtin_expect(subnormal == 0, 1)) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(lanes)));
    return;
  }
#endif
  const HalfBits h = to_bf16_bits(v);
  std::memcpy(p, &h, sizeof(h));
}

template <int MODE>
struct ModeLayout {
  static constexpr Layout x = kModeLayouts[MODE].x;
  static constexpr Layout y = kModeLayouts[MODE].y;
};

// A layout is `count` equal blocks of the slice; pair i of a block (length m) sits at lanes (i, i + m/2)
// in a halves block and (2i, 2i + 1) in a pairs block. Quarters is two halves blocks. Pairs are numbered
// j = block * m/2 + i in every layout, so the x and y layouts of one mode agree on j.
template <Layout L>
struct Blocks {
  static constexpr int count = L == kQuarters ? 2 : 1;
  static constexpr bool pairs = L == kPairs;
  static int64_t lane_a(int64_t i) { return pairs ? 2 * i : i; }
  static int64_t lane_b(int64_t i, int64_t m) { return pairs ? 2 * i + 1 : i + m / 2; }
};

// Shuffle masks over two chunks (lanes 0..2*kChunk-1): deinterleave to a/b, and interleave back.
template <size_t... k>
constexpr Index lanes_from(int first, int step, std::index_sequence<k...>) {
  return Index{static_cast<int32_t>(first + step * k)...};
}
template <size_t... k>
constexpr Index interleaved(int first, std::index_sequence<k...>) {
  return Index{static_cast<int32_t>(first + k / 2 + (k % 2) * kChunk)...};
}
constexpr auto kLanes = std::make_index_sequence<kChunk>();
constexpr Index kEven = lanes_from(0, 2, kLanes), kOdd = lanes_from(1, 2, kLanes);
constexpr Index kFirstHalf = interleaved(0, kLanes), kSecondHalf = interleaved(kChunk / 2, kLanes);

// Pairs [i, i + kChunk) of a block <-> their a and b lanes.
template <Layout L, typename T>
inline void load_chunk(const T *block, int64_t i, int64_t m, Vec &a, Vec &b) {
  if (Blocks<L>::pairs) {
    const Vec lo = load_vec(block + 2 * i), hi = load_vec(block + 2 * i + kChunk);
    a = __builtin_shuffle(lo, hi, kEven);
    b = __builtin_shuffle(lo, hi, kOdd);
  } else {
    a = load_vec(block + i);
    b = load_vec(block + i + m / 2);
  }
}

#if defined(__AVX512F__)
// Streaming (non-temporal) stores of what store_vec writes, 16 bytes at a time (MindSpore's large buffers start
// 16 bytes past a page, so 64-byte streams could not be aligned): the lines go to memory without being read
// into the cache first. The caller fences (_mm_sfence) before its results are read.
inline void stream_vec(float *p, Vec v) {
  const __m512 lanes = reinterpret_cast<__m512>(v);
  _mm_stream_ps(p, _mm512_castps512_ps128(lanes));
  _mm_stream_ps(p + 4, _mm512_extractf32x4_ps(lanes, 1));
  _mm_stream_ps(p + 8, _mm512_extractf32x4_ps(lanes, 2));
  _mm_stream_ps(p + 12, _mm512_extractf32x4_ps(lanes, 3));
}
template <typename T>  // 16-bit storage: store_vec's 32 bytes (its rounding and subnormal handling)
inline void stream_vec(T *p, Vec v) {
  alignas(32) T converted[kChunk];
  store_vec(converted, v);
  const __m256i bits = _mm256_load_si256(reinterpret_cast<const __m256i *>(converted));
  _mm_stream_si128(reinterpret_cast<__m128i *>(p), _mm256_castsi256_si128(bits));
  _mm_stream_si128(reinterpret_cast<__m128i *>(p) + 1, _mm256_extracti128_si256(bits, 1));
}
#endif

template <bool STREAM, typename T>
inline void put_vec(T *p, Vec v) {
  if constexpr (STREAM) {
    stream_vec(p, v);
  } else {
    store_vec(p, v);
  }
}

#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
// A chunk's two bf16 vectors by one conversion (vcvtne2ps2bf16: store_vec's rounding, one instruction for
// both) into `packed`, lo's lanes first; false where a lane is subnormal (store_vec then converts them).
inline bool to_bf16_pair(Vec lo, Vec hi, __m512i &packed) {
  const __m512 l = reinterpret_cast<__m512>(lo), h = reinterpret_cast<__m512>(hi);
  if ((_mm512_fpclass_ps_mask(l, 0x20) | _mm512_fpclass_ps_mask(h, 0x20)) != 0) return false;
  packed = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(h, l));
  return true;
}
#endif

template <Layout L, bool STREAM = false, typename T>
inline void store_chunk(Vec a, Vec b, T *block, int64_t i, int64_t m) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  if constexpr (std::is_same_v<T, BF16> && !STREAM) {
    __m512i packed;
    if (Blocks<L>::pairs) {
      if (to_bf16_pair(__builtin_shuffle(a, b, kFirstHalf), __builtin_shuffle(a, b, kSecondHalf), packed)) {
        _mm512_storeu_si512(block + 2 * i, packed);  // the two halves' lanes follow each other
        return;
      }
    } else if (to_bf16_pair(a, b, packed)) {
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(block + i), _mm512_castsi512_si256(packed));
      _mm256_storeu_si256(reinterpret_cast<__m256i *>(block + i + m / 2), _mm512_extracti64x4_epi64(packed, 1));
      return;
    }
  }
#endif
  if (Blocks<L>::pairs) {
    put_vec<STREAM>(block + 2 * i, __builtin_shuffle(a, b, kFirstHalf));
    put_vec<STREAM>(block + 2 * i + kChunk, __builtin_shuffle(a, b, kSecondHalf));
  } else {
    put_vec<STREAM>(block + i, a);
    put_vec<STREAM>(block + i + m / 2, b);
  }
}

// V is Vec (a chunk) or float (one pair of a tail).
template <bool CONJ, typename V>
inline void rotate(V ia, V ib, V ca, V cb, V sa, V sb, V &oa, V &ob) {
  if (CONJ) {
    oa = ia * ca + ib * sb;
    ob = ib * cb - ia * sa;
  } else {
    oa = ia * ca - ib * sa;
    ob = ib * cb + ia * sb;
  }
}

// Cos and sin of one row, as the a/b lanes of y's pairs, in pair order.
struct CosSinLanes {
  float ca[kMaxHeadDim / 2], cb[kMaxHeadDim / 2], sa[kMaxHeadDim / 2], sb[kMaxHeadDim / 2];
};

// Pairs [i, i + kChunk) of an input block (pair numbers from j on) rotated into ra/rb.
template <bool CONJ, Layout IN, typename T>
inline void rotate_chunk(const T *block, int64_t i, int64_t m, const CosSinLanes &cs, int64_t j, Vec &ra, Vec &rb) {
  Vec ia, ib;
  load_chunk<IN>(block, i, m, ia, ib);
  rotate<CONJ>(ia, ib, load_vec(cs.ca + j), load_vec(cs.cb + j), load_vec(cs.sa + j), load_vec(cs.sb + j), ra, rb);
}

template <Layout L, typename U>
void split_cos_sin(const U *cos, const U *sin, int64_t len, CosSinLanes &cs) {
  const int64_t m = len / Blocks<L>::count;
  for (int blk = 0; blk < Blocks<L>::count; ++blk) {
    for (int64_t i = 0, j = blk * m / 2; i < m / 2; ++i, ++j) {
      cs.ca[j] = to_float(cos[blk * m + Blocks<L>::lane_a(i)]);
      cs.cb[j] = to_float(cos[blk * m + Blocks<L>::lane_b(i, m)]);
      cs.sa[j] = to_float(sin[blk * m + Blocks<L>::lane_a(i)]);
      cs.sb[j] = to_float(sin[blk * m + Blocks<L>::lane_b(i, m)]);
    }
  }
}

// One row's slice from src to dst (which may be src): chunks of kChunk pairs, then single pairs.
// Mode 3 moves lanes between layouts, so in place every pair is rotated (into oa/ob) before any is
// stored; otherwise each chunk is stored as soon as it is rotated.
template <bool CONJ, Layout IN, Layout OUT, typename S, typename T>
inline void rotate_slice(const S *src, T *dst, const CosSinLanes &cs, int64_t len) {
  const bool store_after = IN != OUT && static_cast<const void *>(src) == static_cast<const void *>(dst);
  const int64_t m = len / Blocks<IN>::count, per_block = m / 2, full = per_block - per_block % kChunk;
  float oa[kMaxHeadDim / 2], ob[kMaxHeadDim / 2];
  for (int blk = 0; blk < Blocks<IN>::count; ++blk) {
    const S *in = src + blk * m;
    T *out = dst + blk * m;
    const int64_t j0 = blk * per_block;
    int64_t i = 0;
    for (; i < full; i += kChunk) {
      const int64_t j = j0 + i;
      Vec ra, rb;
      rotate_chunk<CONJ, IN>(in, i, m, cs, j, ra, rb);
      if (store_after) {
        store_vec(oa + j, ra);
        store_vec(ob + j, rb);
      } else {
        store_chunk<OUT>(ra, rb, out, i, m);
      }
    }
    for (; i < per_block; ++i) {
      const int64_t j = j0 + i;
      rotate<CONJ>(to_float(in[Blocks<IN>::lane_a(i)]), to_float(in[Blocks<IN>::lane_b(i, m)]), cs.ca[j],
                   cs.cb[j], cs.sa[j], cs.sb[j], oa[j], ob[j]);
      if (!store_after) {
        store(out + Blocks<OUT>::lane_a(i), oa[j]);
        store(out + Blocks<OUT>::lane_b(i, m), ob[j]);
      }
    }
  }
  if (!store_after) return;
  const int64_t half = len / 2, full_row = half - half % kChunk;  // IN != OUT: single blocks
  int64_t j = 0;
  for (; j < full_row; j += kChunk) store_chunk<OUT>(load_vec(oa + j), load_vec(ob + j), dst, j, len);
  for (; j < half; ++j) {
    store(dst + Blocks<OUT>::lane_a(j), oa[j]);
    store(dst + Blocks<OUT>::lane_b(j, len), ob[j]);
  }
}

// The common rotary width (DeepSeek's qk_rope_head_dim, GLM's half of 128, NeoX at rotary_pct 0.5) with its
// length known at compile time: the chunk loop unrolls and an in-place mode 3 row keeps its rotated chunks in
// registers rather than oa/ob. Same operations in the same order as rotate_slice, so the same bits.
constexpr int kFixedLen = 64;

template <bool CONJ, Layout IN, Layout OUT, typename T>
inline void rotate_fixed_slice(const T *src, T *dst, const CosSinLanes &cs) {
  constexpr int m = kFixedLen / Blocks<IN>::count, per_block = m / 2, chunks = kFixedLen / 2 / kChunk;
  static_assert(per_block % kChunk == 0, "whole chunks in every block");
  const bool store_after = IN != OUT && src == dst;
  Vec ra[chunks], rb[chunks];
#pragma GCC unroll 8
  for (int k = 0; k < chunks; ++k) {
    const int j = k * kChunk, blk = j / per_block, i = j % per_block;
    rotate_chunk<CONJ, IN>(src + blk * m, i, m, cs, j, ra[k], rb[k]);
    if (!store_after) store_chunk<OUT>(ra[k], rb[k], dst + blk * m, i, m);
  }
  if (!store_after) return;
#pragma GCC unroll 8
  for (int k = 0; k < chunks; ++k) {
    const int j = k * kChunk, blk = j / per_block, i = j % per_block;
    store_chunk<OUT>(ra[k], rb[k], dst + blk * m, i, m);
  }
}

// A 128-lane slice in the halves layout both ways (mode 0: the whole head of Llama, Qwen, Mistral), its length
// known at compile time: read into registers and written back in address order, one half then the other (bf16
// 64 bytes a store). Chunk by chunk (rotate_slice) the two halves, 128 lanes apart, were read and written
// alternately; in address order the whole-head bf16 rotation went from 1.10-1.21x the same-bytes loop to
// 1.02-1.09x on one thread, fp16 from 1.14-1.71x to 1.11-1.16x (the mechanism inferred from timing alone;
// NOTES.md, issue 38). 64 lanes keep the fixed path's chunks: in address order they were no faster. Same
// operations on each pair as rotate_slice, so the same bits.
constexpr int kInOrderLen = 128;

template <typename T>  // n vectors to dst in address order
inline void store_in_order(T *dst, const Vec *v, int n) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  if constexpr (std::is_same_v<T, BF16>) {
    for (int k = 0; k < n; k += 2) {
      __m512i packed;
      if (to_bf16_pair(v[k], v[k + 1], packed)) {
        _mm512_storeu_si512(dst + k * kChunk, packed);
      } else {
        store_vec(dst + k * kChunk, v[k]);
        store_vec(dst + (k + 1) * kChunk, v[k + 1]);
      }
    }
    return;
  }
#endif
  for (int k = 0; k < n; ++k) store_vec(dst + k * kChunk, v[k]);
}

template <bool CONJ, typename T>
inline void rotate_halves_in_order(const T *src, T *dst, const CosSinLanes &cs) {
  constexpr int half = kInOrderLen / 2, n = half / kChunk;
  static_assert(n % 2 == 0, "whole pairs of chunks in each half");
  Vec a[n], b[n], ra[n], rb[n];
#pragma GCC unroll 16
  for (int k = 0; k < n; ++k) a[k] = load_vec(src + k * kChunk);
#pragma GCC unroll 16
  for (int k = 0; k < n; ++k) b[k] = load_vec(src + half + k * kChunk);
#pragma GCC unroll 16
  for (int k = 0; k < n; ++k) {
    const int j = k * kChunk;
    rotate<CONJ>(a[k], b[k], load_vec(cs.ca + j), load_vec(cs.cb + j), load_vec(cs.sa + j), load_vec(cs.sb + j), ra[k],
                 rb[k]);
  }
  store_in_order(dst, ra, n);
  store_in_order(dst + half, rb, n);
}

struct Geometry {
  int64_t S, N, D, start, end, len;
  int64_t cos_b_stride, cos_s_stride, cos_n_stride;  // 0 on broadcast axes, in rows
  // Gathering by position: dy row (i0, i1, i2) is token i0 * positions_strides[0] + ... of the positions.
  const int64_t *positions = nullptr;
  int64_t positions_strides[3] = {0, 0, 0};
  const int64_t *lane_channels = nullptr;  // several positions a token (M-RoPE, quarter): each cos lane's channel
  int64_t channel_stride = 0;

  int64_t token(int64_t b, int64_t s, int64_t n) const {
    return b * positions_strides[0] + s * positions_strides[1] + n * positions_strides[2];
  }
  int64_t cos_row(int64_t b, int64_t s, int64_t n) const {
    return positions != nullptr ? positions[token(b, s, n)]
                                : b * cos_b_stride + s * cos_s_stride + n * cos_n_stride;
  }
  // Several positions a token: its cos/sin, each lane from the cache row its channel's position picks.
  template <typename U>
  void gather_lanes(const U *cos, const U *sin, int64_t token_index, U *cos_lanes, U *sin_lanes) const {
    for (int64_t l = 0; l < len; ++l) {
      const int64_t row = positions[token_index + lane_channels[l] * channel_stride];
      cos_lanes[l] = cos[row * len + l];
      sin_lanes[l] = sin[row * len + l];
    }
  }
};

// How the rows are walked: in order, each thread a contiguous range, the row's address computed from
// geometry held in registers (a local copy: the slices are stored through memcpy, which may alias anything in
// memory, so geometry read from memory would be reloaded after every row's stores and each next row's
// address would wait behind them: rows stop overlapping in memory; NOTES.md, issue 38).
// What is prefetched and why: slices far apart (a slice under half its row, or under 4 cache lines) defeat the
// hardware prefetcher, each row a new stream, often a new page. Each such slice is requested twice: into L2
// ~4 KiB of slices ahead (4..64 rows), then into L1 nearer, which completes from L2, so the rotation's work
// overlaps the memory time (an L1 request alone, ~1 KiB ahead, left 16-bit rows at 1.3-1.5x the same-bytes
// loop: NOTES.md, issue 38). How near is the one figure that differed between the machines measured: a quarter
// of the L2 distance on the Intel Xeon (512 B ahead was slower there), two rows on AMD (measured on Zen 4), where,
// as inferred, a farther L1 request holds an L1 fill buffer while L2's is still out: DeepSeek-like bf16 rows at 2
// threads went from 1.12-1.19x the loop to 1.03-1.08x (NOTES.md, issue 38). Only the slice's lines are read
// (whole rows cost up to 2x: NOTES.md, issue 27). Dense slices (at least half their row and 4 lines) stream well
// on their own, and a software prefetch there only costs issue slots.
struct PrefetchRows {
  int64_t into_l2 = 0, into_l1 = 0;  // rows ahead; 0: none
};

inline bool near_l1_prefetch() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
#else
  return false;
#endif
}

inline PrefetchRows prefetch_rows(int64_t slice_bytes, int64_t row_bytes) {
  if (slice_bytes >= 256 && 2 * slice_bytes >= row_bytes) return {};
  const int64_t into_l2 = std::min<int64_t>(64, std::max<int64_t>(4, 4096 / std::max<int64_t>(slice_bytes, 1)));
  return {into_l2, near_l1_prefetch() ? 2 : into_l2 / 4};
}

// LOCALITY: 3 into L1, 2 into L2 (prefetcht0, prefetcht1). always_inline here and below: GCC 12 takes a function
// that only prefetches for one without side effects and drops calls to it that are not yet inlined.
template <int LOCALITY>
__attribute__((always_inline)) inline void prefetch_slice(const void *p, int64_t bytes) {
  const char *c = static_cast<const char *>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, LOCALITY);
  __builtin_prefetch(c + bytes - 1, 0, LOCALITY);
}

// Both requests for the slice at `slice`, `row` of rows ending at row_end; `stride`: elements a row.
template <typename T>
__attribute__((always_inline)) inline void prefetch_ahead(const T *slice, int64_t row, int64_t row_end,
                                                         int64_t stride, int64_t bytes, PrefetchRows ahead) {
  if (ahead.into_l2 == 0) return;
  if (row + ahead.into_l2 < row_end) prefetch_slice<2>(slice + ahead.into_l2 * stride, bytes);
  if (row + ahead.into_l1 < row_end) prefetch_slice<3>(slice + ahead.into_l1 * stride, bytes);
}

// The split cos/sin lanes of a row's token, kept while consecutive rows read the same cos row (broadcast cos
// rows repeat: each is split once; with lane channels, each token's lanes are gathered once).
template <int MODE, typename U>
struct CosRowCache {
  CosSinLanes cs;
  int64_t cached = -1;
  U cos_lanes[kMaxHeadDim], sin_lanes[kMaxHeadDim];

  // The cos row (or, with lane channels, the token) that row (b, s, n) reads.
  static int64_t key(const Geometry &g, int64_t b, int64_t s, int64_t n) {
    return g.lane_channels != nullptr ? g.token(b, s, n) : g.cos_row(b, s, n);
  }

  const CosSinLanes &for_key(const Geometry &g, const U *cos, const U *sin, int64_t key) {
    if (key != cached) {
      if (g.lane_channels != nullptr) {
        g.gather_lanes(cos, sin, key, cos_lanes, sin_lanes);
        split_cos_sin<ModeLayout<MODE>::y>(cos_lanes, sin_lanes, g.len, cs);
      } else {
        split_cos_sin<ModeLayout<MODE>::y>(cos + key * g.len, sin + key * g.len, g.len, cs);
      }
      cached = key;
    }
    return cs;
  }

  const CosSinLanes &at(const Geometry &g, const U *cos, const U *sin, int64_t row) {
    return for_key(g, cos, sin, key(g, (row / (g.N * g.S)), (row / g.N) % g.S, row % g.N));
  }
};

// Where a row of [B, S, N] sits (batch, token, head), stepped along with the row loop rather than divided out
// again for each row.
struct RowIndex {
  int64_t b, s, n;
  RowIndex(const Geometry &g, int64_t row) : b(row / (g.N * g.S)), s((row / g.N) % g.S), n(row % g.N) {}
  void advance(const Geometry &g, int64_t heads) {  // by `heads` rows, at most to the token's last head
    if ((n += heads) == g.N) {
      n = 0;
      if (++s == g.S) {
        s = 0;
        ++b;
      }
    }
  }
};

// Rows [row_begin, row_end) of dy; `out` is dy (in place) or a separate tensor that also gets the lanes
// outside the slice. flatten: the chunk helpers must inline into the row loop to stay in registers.
template <int MODE, bool CONJ, typename T, typename U>
__attribute__((flatten)) void rotate_rows(const T *dy, T *out, const U *cos, const U *sin, const Geometry &geometry,
                                          int64_t row_begin, int64_t row_end) {
  constexpr Layout in_layout = CONJ ? ModeLayout<MODE>::y : ModeLayout<MODE>::x;
  constexpr Layout out_layout = CONJ ? ModeLayout<MODE>::x : ModeLayout<MODE>::y;
  constexpr bool halves_both_ways = in_layout == kHalves && out_layout == kHalves;
  const Geometry g = geometry;  // in registers, whatever the stores below (see prefetch_rows)
  CosRowCache<MODE, U> cos_rows;
  const int64_t slice_bytes = g.len * static_cast<int64_t>(sizeof(T));
  const PrefetchRows ahead = prefetch_rows(slice_bytes, g.D * static_cast<int64_t>(sizeof(T)));
  RowIndex at(g, row_begin);
  // Heads of one token that read the same cos row run as one inner loop, with no lookup between them.
  const bool in_place = static_cast<const void *>(dy) == static_cast<const void *>(out);
  const bool heads_share_cos = g.lane_channels == nullptr &&
                               (g.positions != nullptr ? g.positions_strides[2] == 0 : g.cos_n_stride == 0);
  for (int64_t row = row_begin; row < row_end;) {
    const CosSinLanes &cs = cos_rows.for_key(g, cos, sin, CosRowCache<MODE, U>::key(g, at.b, at.s, at.n));
    const int64_t run = heads_share_cos ? std::min(g.N - at.n, row_end - row) : 1;
    const int64_t run_end = row + run;
    if (in_place && g.len == kFixedLen) {  // the common case, with nothing decided a row
      for (; row < run_end; ++row) {
        T *slice = out + row * g.D + g.start;
        prefetch_ahead(slice, row, row_end, g.D, slice_bytes, ahead);
        rotate_fixed_slice<CONJ, in_layout, out_layout>(slice, slice, cs);
      }
    }
    if (halves_both_ways && in_place && g.len == kInOrderLen) {
      for (; row < run_end; ++row) {
        T *slice = out + row * g.D + g.start;
        prefetch_ahead(slice, row, row_end, g.D, slice_bytes, ahead);
        rotate_halves_in_order<CONJ>(slice, slice, cs);
      }
    }
    for (; row < run_end; ++row) {
      const T *src = dy + row * g.D + g.start;
      T *dst = out + row * g.D + g.start;
      prefetch_ahead(src, row, row_end, g.D, slice_bytes, ahead);
      if (src != dst) {
        std::memcpy(dst - g.start, src - g.start, g.start * sizeof(T));
        std::memcpy(dst + g.len, src + g.len, (g.D - g.end) * sizeof(T));
      }
      if (g.len == kFixedLen) {
        rotate_fixed_slice<CONJ, in_layout, out_layout>(src, dst, cs);
      } else if (halves_both_ways && g.len == kInOrderLen) {
        rotate_halves_in_order<CONJ>(src, dst, cs);
      } else {
        rotate_slice<CONJ, in_layout, out_layout>(src, dst, cs, g.len);
      }
    }
    at.advance(g, run);
  }
}

// MindSpore's graph-mode runtime threads flush denormals to zero (MXCSR FTZ/DAZ) and PyNative's do not:
// each kernel thread runs with the default environment (round to nearest, denormals kept, exceptions
// masked) and restores the caller's, so the same inputs give the same bits in every mode.
class DefaultFpEnvironment {
 public:
#if defined(__SSE__)
  DefaultFpEnvironment() : saved_(_mm_getcsr()) { _mm_setcsr(kDefaultCsr); }
  ~DefaultFpEnvironment() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kDefaultCsr = 0x1f80;
  unsigned saved_;
#elif defined(__aarch64__)
  DefaultFpEnvironment() : saved_(__builtin_aarch64_get_fpcr64()) { __builtin_aarch64_set_fpcr64(0); }
  ~DefaultFpEnvironment() { __builtin_aarch64_set_fpcr64(saved_); }

 private:
  unsigned long long saved_;
#endif
};

using RowFn = void (*)(const void *, void *, const void *, const void *, const Geometry &, int64_t, int64_t);

template <int MODE, bool CONJ, typename T, typename U>
void rotate_rows_erased(const void *dy, void *out, const void *cos, const void *sin, const Geometry &g, int64_t b,
                        int64_t e) {
  DefaultFpEnvironment fp_environment;
  rotate_rows<MODE, CONJ>(static_cast<const T *>(dy), static_cast<T *>(out), static_cast<const U *>(cos),
                          static_cast<const U *>(sin), g, b, e);
}

// The one switch from a call's runtime mode and dtypes to a compiled instance: Pick::get<MODE, T, U>() gives
// the instance for mode MODE, dy storage T and cos/sin storage U.
template <typename Pick, int MODE, typename T>
typename Pick::Fn pick_cos_type(DType cos_dtype) {
  switch (cos_dtype) {
    case kFloat32: return Pick::template get<MODE, T, float>();
    case kFloat16: return Pick::template get<MODE, T, _Float16>();
    default: return Pick::template get<MODE, T, BF16>();
  }
}

template <typename Pick, int MODE>
typename Pick::Fn pick_dy_type(DType dy_dtype, DType cos_dtype) {
  switch (dy_dtype) {
    case kFloat32: return pick_cos_type<Pick, MODE, float>(cos_dtype);
    case kFloat16: return pick_cos_type<Pick, MODE, _Float16>(cos_dtype);
    default: return pick_cos_type<Pick, MODE, BF16>(cos_dtype);
  }
}

template <typename Pick>
typename Pick::Fn pick_instance(int64_t mode, DType dy_dtype, DType cos_dtype) {
  switch (mode) {
    case 0: return pick_dy_type<Pick, 0>(dy_dtype, cos_dtype);
    case 1: return pick_dy_type<Pick, 1>(dy_dtype, cos_dtype);
    case 2: return pick_dy_type<Pick, 2>(dy_dtype, cos_dtype);
    default: return pick_dy_type<Pick, 3>(dy_dtype, cos_dtype);
  }
}

template <bool CONJ>
struct PickRotateRows {
  using Fn = RowFn;
  template <int MODE, typename T, typename U>
  static Fn get() { return rotate_rows_erased<MODE, CONJ, T, U>; }
};

// --- a head norm before the rotation (rotary_kernel.h, HeadNorm) -------------------------------------------
// Sums over a row's lanes in one fixed order whatever the build's SIMD width (numpy_kernel.sum_of_products
// states the same): 16 running sums over 16-lane chunks, folded in halves 16 -> 8 -> 4 -> 2 -> 1, then the
// tail lanes one by one. So the numpy kernel and every build agree bit for bit.
constexpr int kNormSums = 16;

#if defined(__AVX512F__) && defined(__AVX512DQ__)
// The 16 running sums of one 512-bit register folded in halves (lane k += lane k + 8, + 4, + 2, + 1) without a
// trip through memory (the scalar loop below spills them to the stack between halvings: ~20% of a 128-lane
// row's norm and rotation, NOTES.md, issue 37).
static_assert(kNormSums == 16 && kChunk == kNormSums, "one 512-bit register of sums");
inline float fold_sums(Vec sums) {
  const __m512 acc = reinterpret_cast<__m512>(sums);
  const __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}
#endif

inline float sum_of_products(const float *a, const float *b, int64_t n) {
  const int64_t full = n - n % kNormSums;
  float total;
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  Vec acc = {};
  for (int64_t i = 0; i < full; i += kNormSums) acc = acc + load_vec(a + i) * load_vec(b + i);
  total = fold_sums(acc);
#else
  float acc[kNormSums] = {};
  for (int64_t i = 0; i < full; i += kNormSums) {
    for (int k = 0; k < kNormSums; ++k) acc[k] += a[i + k] * b[i + k];
  }
  for (int width = kNormSums / 2; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) acc[k] += acc[k + width];
  }
  total = acc[0];
#endif
  for (int64_t i = full; i < n; ++i) total += a[i] * b[i];
  return total;
}

// 1 / sqrt(mean of the squares + eps), from the sum of a row's n squares.
inline float inverse_rms_of_sum(float sum_of_squares, int64_t n, float eps) {
  return 1.0f / std::sqrt(sum_of_squares / static_cast<float>(n) + eps);
}

inline float inverse_rms(const float *v, int64_t n, float eps) {
  return inverse_rms_of_sum(sum_of_products(v, v, n), n, eps);
}

// Forward: each row read once into fp32, normalised (n = x * r * gain), its slice rotated from n, the row
// written once (in place too: the row is read whole before it is written).
template <int MODE, typename T, typename U>
__attribute__((flatten)) void norm_rotate_rows(const T *x, T *out, const U *cos, const U *sin,
                                               const Geometry &geometry, const float *gain, float eps,
                                               int64_t row_begin, int64_t row_end) {
  const Geometry g = geometry;
  CosRowCache<MODE, U> cos_rows;
  float v[kMaxHeadDim];
  for (int64_t row = row_begin; row < row_end; ++row) {
    const CosSinLanes &cs = cos_rows.at(g, cos, sin, row);
    const T *xr = x + row * g.D;
    T *o = out + row * g.D;
    for (int64_t i = 0; i < g.D; ++i) v[i] = to_float(xr[i]);
    const float r = inverse_rms(v, g.D, eps);
    for (int64_t i = 0; i < g.D; ++i) v[i] = v[i] * r * gain[i];
    for (int64_t i = 0; i < g.start; ++i) store(o + i, v[i]);
    for (int64_t i = g.end; i < g.D; ++i) store(o + i, v[i]);
    rotate_slice<false, ModeLayout<MODE>::x, ModeLayout<MODE>::y>(v + g.start, o + g.start, cs, g.len);
  }
}

// The forward for a whole-row rotation of a common head width D (norm_whole_rows.cc: 64, 128 or 256 lanes),
// the row held in registers: norm_rotate_rows computes the same values in the same order (so the same bits) but
// moves each row through a stack buffer twice, and each row's sum -> root -> divide chain holds back the rest of
// that row, which fills the out-of-order window. Here the next row is loaded and summed before this row is
// scaled and rotated, so that chain overlaps this row's work (half the time a row from cache: NOTES.md, issue 37).

// Pair chunk k of a row held as D / kChunk vectors: its a and b lanes in layout L (indices fold to constants).
template <Layout L, int D>
inline void row_chunk(const Vec *v, int k, Vec &a, Vec &b) {
  constexpr int m = D / Blocks<L>::count, per_block = m / 2;
  const int j = k * kChunk, base = j / per_block * m, i = j % per_block;
  if (Blocks<L>::pairs) {
    a = __builtin_shuffle(v[(base + 2 * i) / kChunk], v[(base + 2 * i) / kChunk + 1], kEven);
    b = __builtin_shuffle(v[(base + 2 * i) / kChunk], v[(base + 2 * i) / kChunk + 1], kOdd);
  } else {
    a = v[(base + i) / kChunk];
    b = v[(base + i + m / 2) / kChunk];
  }
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
constexpr int64_t kStreamBytes = int64_t{8} << 20;

// A row's lanes into registers as fp32, and sum_of_products(row, row) (kChunk == kNormSums: one running sum a lane).
template <int D, typename T>
inline float load_row_and_sum_squares(const T *row, Vec *v) {
  Vec acc = {};
#pragma GCC unroll 16
  for (int k = 0; k < D / kChunk; ++k) {
    v[k] = load_vec(row + k * kChunk);
    acc = acc + v[k] * v[k];
  }
  return fold_sums(acc);
}

template <int MODE, int D, typename T, typename U>
__attribute__((flatten)) void norm_rotate_whole_rows(const T *x, T *out, const U *cos, const U *sin,
                                                     const Geometry &geometry, const float *gain, float eps,
                                                     int64_t row_begin, int64_t row_end) {
  constexpr int kVecs = D / kChunk;
  constexpr Layout IN = ModeLayout<MODE>::x, OUT = ModeLayout<MODE>::y;
  constexpr int m = D / Blocks<OUT>::count, per_block = m / 2;
  if (row_begin >= row_end) return;
  const Geometry g = geometry;
  CosRowCache<MODE, U> cos_rows;
  RowIndex at(g, row_begin);
  // Out of place, a thread's results of kStreamBytes or more leave the cache before anything reads them again:
  // streamed, they are not first read into it (the fp32 prefill in 0.75x the time: NOTES.md, issue 37).
  const bool stream = static_cast<const void *>(x) != static_cast<const void *>(out) &&
                      (row_end - row_begin) * D * static_cast<int64_t>(sizeof(T)) >= kStreamBytes &&
                      reinterpret_cast<uintptr_t>(out) % 16 == 0;
  Vec v[kVecs], next[kVecs] = {};
  float sum = load_row_and_sum_squares<D>(x + row_begin * D, v);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const CosSinLanes &cs = cos_rows.for_key(g, cos, sin, CosRowCache<MODE, U>::key(g, at.b, at.s, at.n));
    at.advance(g, 1);
    const float r = inverse_rms_of_sum(sum, D, eps);
    // The whole row is in registers: in place, its stores below cannot change what is read here or next.
    if (row + 1 < row_end) sum = load_row_and_sum_squares<D>(x + (row + 1) * D, next);
    T *o = out + row * D;
#pragma GCC unroll 16
    for (int k = 0; k < kVecs; ++k) v[k] = v[k] * r * load_vec(gain + k * kChunk);
#pragma GCC unroll 8
    for (int k = 0; k < kVecs / 2; ++k) {
      const int j = k * kChunk, i = j % per_block;
      Vec ia, ib, ra, rb;
      row_chunk<IN, D>(v, k, ia, ib);
      rotate<false>(ia, ib, load_vec(cs.ca + j), load_vec(cs.cb + j), load_vec(cs.sa + j), load_vec(cs.sb + j), ra, rb);
      if (stream) {
        store_chunk<OUT, true>(ra, rb, o + j / per_block * m, i, m);
      } else {
        store_chunk<OUT>(ra, rb, o + j / per_block * m, i, m);
      }
    }
#pragma GCC unroll 16
    for (int k = 0; k < kVecs; ++k) v[k] = next[k];
  }
  if (stream) _mm_sfence();
}
#endif

// Backward: d = R^T dy (the gradient at n), then through the norm with xhat = x * r, gd = d * gain:
// dx = r * (gd - xhat * sum(gd * xhat) / D); the gain's gradient sum(d * xhat) over the rows, added into
// weight_grad in double (a block of rows at a time: the caller sums the blocks in order).
template <int MODE, typename T, typename U>
__attribute__((flatten)) void norm_grad_rows(const T *dy, const T *x, T *dx, const U *cos, const U *sin,
                                             const Geometry &geometry, const float *gain, float eps,
                                             double *weight_grad, int64_t row_begin, int64_t row_end) {
  const Geometry g = geometry;
  CosRowCache<MODE, U> cos_rows;
  float d[kMaxHeadDim], xhat[kMaxHeadDim], gd[kMaxHeadDim];
  for (int64_t row = row_begin; row < row_end; ++row) {
    const CosSinLanes &cs = cos_rows.at(g, cos, sin, row);
    const T *dyr = dy + row * g.D, *xr = x + row * g.D;
    for (int64_t i = 0; i < g.start; ++i) d[i] = to_float(dyr[i]);
    for (int64_t i = g.end; i < g.D; ++i) d[i] = to_float(dyr[i]);
    rotate_slice<true, ModeLayout<MODE>::y, ModeLayout<MODE>::x>(dyr + g.start, d + g.start, cs, g.len);
    for (int64_t i = 0; i < g.D; ++i) xhat[i] = to_float(xr[i]);
    const float r = inverse_rms(xhat, g.D, eps);
    for (int64_t i = 0; i < g.D; ++i) {
      xhat[i] = xhat[i] * r;
      gd[i] = d[i] * gain[i];
    }
    if (weight_grad != nullptr) {
      for (int64_t i = 0; i < g.D; ++i) weight_grad[i] += static_cast<double>(d[i]) * static_cast<double>(xhat[i]);
    }
    if (dx == nullptr) continue;
    const float c = sum_of_products(gd, xhat, g.D) / static_cast<float>(g.D);
    T *dxr = dx + row * g.D;
    for (int64_t i = 0; i < g.D; ++i) store(dxr + i, r * (gd[i] - xhat[i] * c));
  }
}

using NormFn = void (*)(const void *, void *, const void *, const void *, const Geometry &, const float *, float,
                        int64_t, int64_t);
using NormGradFn = void (*)(const void *, const void *, void *, const void *, const void *, const Geometry &,
                            const float *, float, double *, int64_t, int64_t);

template <int MODE, typename T, typename U>
void norm_rotate_rows_erased(const void *x, void *out, const void *cos, const void *sin, const Geometry &g,
                             const float *gain, float eps, int64_t b, int64_t e) {
  DefaultFpEnvironment fp_environment;
  norm_rotate_rows<MODE>(static_cast<const T *>(x), static_cast<T *>(out), static_cast<const U *>(cos),
                         static_cast<const U *>(sin), g, gain, eps, b, e);
}

template <int MODE, typename T, typename U>
void norm_grad_rows_erased(const void *dy, const void *x, void *dx, const void *cos, const void *sin,
                           const Geometry &g, const float *gain, float eps, double *weight_grad, int64_t b,
                           int64_t e) {
  DefaultFpEnvironment fp_environment;
  norm_grad_rows<MODE>(static_cast<const T *>(dy), static_cast<const T *>(x), static_cast<T *>(dx),
                       static_cast<const U *>(cos), static_cast<const U *>(sin), g, gain, eps, weight_grad, b, e);
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
template <int MODE, int D, typename T, typename U>
void norm_rotate_whole_rows_erased(const void *x, void *out, const void *cos, const void *sin, const Geometry &g,
                                   const float *gain, float eps, int64_t b, int64_t e) {
  DefaultFpEnvironment fp_environment;
  norm_rotate_whole_rows<MODE, D>(static_cast<const T *>(x), static_cast<T *>(out), static_cast<const U *>(cos),
                                  static_cast<const U *>(sin), g, gain, eps, b, e);
}

template <int D>
struct PickNormWholeRows {
  using Fn = NormFn;
  template <int MODE, typename T, typename U>
  static Fn get() { return norm_rotate_whole_rows_erased<MODE, D, T, U>; }
};
#endif

struct PickNormRows {
  using Fn = NormFn;
  template <int MODE, typename T, typename U>
  static Fn get() { return norm_rotate_rows_erased<MODE, T, U>; }
};

struct PickNormGradRows {
  using Fn = NormGradFn;
  template <int MODE, typename T, typename U>
  static Fn get() { return norm_grad_rows_erased<MODE, T, U>; }
};

// Each family's instance for a call (rotate_rows.cc, norm_rows.cc, norm_whole_rows.cc, norm_grad_rows.cc).
RowFn rotate_rows_for(bool conjugate, int64_t mode, DType dy_dtype, DType cos_dtype);
// norm_rotate_whole_rows' instance where the build has one for a whole-row rotation of that width (else null:
// norm_whole_rows.cc), else norm_rotate_rows' (norm_rows.cc).
NormFn norm_rows_for(int64_t mode, DType dy_dtype, DType cos_dtype, int64_t D, int64_t start, int64_t end);
NormFn norm_whole_rows_for(int64_t mode, DType dy_dtype, DType cos_dtype, int64_t D);
NormGradFn norm_grad_rows_for(int64_t mode, DType dy_dtype, DType cos_dtype);

}  // namespace row_loops
}  // namespace ms_rotary

#endif  // MS_ROTARY_KERNEL_CPU_ROTARY_ROWS_H_
