// Partial rotary embedding on the CPU: a call's checks, the choice of its row loop (rotary_rows.h) and the
// split of its rows over threads; the cos/sin gradients.
#include "rotary_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "rotary_rows.h"

namespace ms_rotary {
namespace {

using namespace row_loops;  // the row loops (rotary_rows.h) and their types

// Each thread gets at least this many rotated lanes: below it a second thread costs more to start than it
// saves (benchmarks/NOTES.md, "Threading threshold"). So a call starts the threads its work pays for, not one
// per core: on a many-core server MindSpore's own threads share those cores, and a thread per core per call
// would cost more to start than a small call's work.
constexpr int64_t kParallelMinLanes = 1 << 20;


int pick_threads(int requested, int64_t rows, int64_t lanes) {
  if (requested > 0) return static_cast<int>(std::min<int64_t>({requested, rows, kMaxThreads}));
  // hardware_concurrency() reads the CPU count from the system each time (~5 us here): a decode step's
  // small call, which one thread serves anyway, does not ask
  if (rows < 2 || lanes < 2 * kParallelMinLanes) return 1;
  const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({hw, rows, lanes / kParallelMinLanes})));
}

// Runs work(begin, end) over [0, count) in `threads` contiguous parts, the first on the calling thread.
// A thread that cannot be started (thread or address-space limits) leaves its part to the calling
// thread: fewer threads, same result, nothing thrown across the C boundary.
template <typename Work>
void parallel_for(int threads, int64_t count, const Work &work) {
  const int64_t per = (count + threads - 1) / std::max(threads, 1);
  std::vector<std::thread> workers;
  std::vector<std::pair<int64_t, int64_t>> unstarted;
  try {
    workers.reserve(threads > 1 ? threads - 1 : 0);
  } catch (const std::exception &) {
  }
  for (int t = 1; t < threads; ++t) {
    const int64_t b = std::min(count, t * per), e = std::min(count, b + per);
    if (b >= e) continue;
    try {
      workers.emplace_back(work, b, e);
    } catch (const std::exception &) {  // std::system_error, std::bad_alloc
      unstarted.emplace_back(b, e);
    }
  }
  work(0, std::min(count, per));
  for (const auto &range : unstarted) work(range.first, range.second);
  for (auto &w : workers) w.join();
}


// The weight gradient's rows are summed a block at a time into their own partial sums, added in block order:
// the result does not depend on the thread count.
constexpr int64_t kNormGradBlockRows = 256;

float weight_at(const HeadNorm &norm, int64_t i) {
  switch (norm.weight_dtype) {
    case kFloat32: return static_cast<const float *>(norm.weight)[i];
    case kFloat16: return to_float(static_cast<const _Float16 *>(norm.weight)[i]);
    default: return to_float(static_cast<const BF16 *>(norm.weight)[i]);
  }
}

Status run_head_norm(const RotaryProblem &p, const Geometry &g, int64_t rows, int num_threads) {
  const HeadNorm &norm = p.norm;
  std::vector<float> gain;
  std::vector<double> sums;
  const int64_t blocks = (rows + kNormGradBlockRows - 1) / kNormGradBlockRows;
  try {
    gain.resize(g.D);
    if (p.conjugate && norm.weight_grad != nullptr) sums.assign(blocks * g.D, 0.0);
  } catch (const std::exception &) {
    return kShapeTooLarge;
  }
  for (int64_t i = 0; i < g.D; ++i) gain[i] = norm.offset + weight_at(norm, i);  // Gemma: 1.0 + w.float()
  if (!p.conjugate) {
    void *out = p.out != nullptr ? p.out : p.dy;
    const NormFn fn = norm_rows_for(p.rotary_mode, p.dy_dtype, p.cos_dtype, g.D, g.start, g.end);
    const int threads = pick_threads(num_threads, rows, rows * g.D);
    parallel_for(threads, rows, [&](int64_t b, int64_t e) { fn(p.dy, out, p.cos, p.sin, g, gain.data(), norm.eps, b, e); });
    return kOk;
  }
  const NormGradFn fn = norm_grad_rows_for(p.rotary_mode, p.dy_dtype, p.cos_dtype);
  const int threads = pick_threads(num_threads, blocks, rows * g.D);
  parallel_for(threads, blocks, [&](int64_t b, int64_t e) {
    for (int64_t block = b; block < e; ++block) {
      fn(p.dy, norm.x, p.out, p.cos, p.sin, g, gain.data(), norm.eps,
         sums.empty() ? nullptr : sums.data() + block * g.D, block * kNormGradBlockRows,
         std::min(rows, (block + 1) * kNormGradBlockRows));
    }
  });
  if (norm.weight_grad != nullptr) {
    for (int64_t i = 0; i < g.D; ++i) {
      double total = 0.0;
      for (int64_t block = 0; block < blocks; ++block) total += sums[block * g.D + i];
      norm.weight_grad[i] = static_cast<float>(total);
    }
  }
  return kOk;
}

bool is_empty(const RotaryProblem &p) { return is_empty_work(p.dy_shape, p.cos_shape, p.start, p.end); }

// The rules of a call that gathers cos/sin rows by position: the shapes' (rotary_rules.h), the lanes' channels,
// every position in [0, P).
Status check_positions(const RotaryProblem &p) {
  const Positions &pos = p.positions;
  const Status status = check_positions_shape(p.dy_shape, p.cos_shape, p.sin_shape, dtype_bytes(p.dy_dtype),
                                              dtype_bytes(p.cos_dtype), p.rotary_mode, p.start, p.end, pos);
  if (status != kOk) return status;
  if (pos.channels > 1 && pos.lane_channels == nullptr) return kBadPositions;
  const int64_t len = p.end - p.start;
  for (int64_t l = 0; pos.channels > 1 && l < len; ++l) {
    if (pos.lane_channels[l] < 0 || pos.lane_channels[l] >= pos.channels) return kBadPositions;
  }
  const int64_t count = pos.channels * pos.batch * pos.seq;
  return position_outside(pos.values, count, p.cos_shape[1]) < 0 ? kOk : kBadPositions;
}

int64_t element_count(const int64_t *shape) { return shape[0] * shape[1] * shape[2] * shape[3]; }

// --- gradients for cos and sin ---------------------------------------------------------------------------
// Forward: y[ya] = x[xa]*c[ya] - x[xb]*s[ya], y[yb] = x[xb]*c[yb] + x[xa]*s[yb]. With g = dL/dy:
//   dc[ya] = g[ya]*x[xa], dc[yb] = g[yb]*x[xb], ds[ya] = -g[ya]*x[xb], ds[yb] = g[yb]*x[xa],
// and the backward's gradients are the same sums with (g, x) -> (dy, dL/dx). Each cos row is summed by one
// thread over its dy rows in row order (in double), so the result does not depend on the thread count.
template <Layout L>
void pair_lanes(int64_t len, int32_t *a, int32_t *b) {
  const int64_t m = len / Blocks<L>::count;
  for (int blk = 0, j = 0; blk < Blocks<L>::count; ++blk) {
    for (int64_t i = 0; i < m / 2; ++i, ++j) {
      a[j] = static_cast<int32_t>(blk * m + Blocks<L>::lane_a(i));
      b[j] = static_cast<int32_t>(blk * m + Blocks<L>::lane_b(i, m));
    }
  }
}

template <int MODE, typename T, typename U>
void cos_sin_grad_rows(const T *y_side, const T *x_side, U *dcos, U *dsin, const Geometry &g, const int64_t *dy_shape,
                       const int64_t *cos_shape, int64_t cos_begin, int64_t cos_end) {
  DefaultFpEnvironment fp_environment;
  int32_t xa[kMaxHeadDim / 2], xb[kMaxHeadDim / 2], ya[kMaxHeadDim / 2], yb[kMaxHeadDim / 2];
  pair_lanes<ModeLayout<MODE>::x>(g.len, xa, xb);
  pair_lanes<ModeLayout<MODE>::y>(g.len, ya, yb);
  const int64_t pairs = g.len / 2;
  double acc_c[kMaxHeadDim], acc_s[kMaxHeadDim];
  for (int64_t c = cos_begin; c < cos_end; ++c) {
    const int64_t cn = c % cos_shape[2], cs = (c / cos_shape[2]) % cos_shape[1], cb = c / (cos_shape[2] * cos_shape[1]);
    const bool all_b = cos_shape[0] == 1, all_s = cos_shape[1] == 1, all_n = cos_shape[2] == 1;
    std::fill(acc_c, acc_c + g.len, 0.0);
    std::fill(acc_s, acc_s + g.len, 0.0);
    for (int64_t b = all_b ? 0 : cb; b < (all_b ? dy_shape[0] : cb + 1); ++b) {
      for (int64_t s = all_s ? 0 : cs; s < (all_s ? dy_shape[1] : cs + 1); ++s) {
        for (int64_t n = all_n ? 0 : cn; n < (all_n ? dy_shape[2] : cn + 1); ++n) {
          const int64_t offset = ((b * dy_shape[1] + s) * dy_shape[2] + n) * g.D + g.start;
          const T *yr = y_side + offset;
          const T *xr = x_side + offset;
          for (int64_t j = 0; j < pairs; ++j) {
            const double gya = to_float(yr[ya[j]]), gyb = to_float(yr[yb[j]]);
            const double vxa = to_float(xr[xa[j]]), vxb = to_float(xr[xb[j]]);
            acc_c[ya[j]] += gya * vxa;
            acc_c[yb[j]] += gyb * vxb;
            acc_s[ya[j]] -= gya * vxb;
            acc_s[yb[j]] += gyb * vxa;
          }
        }
      }
    }
    for (int64_t l = 0; l < g.len; ++l) {
      store_rounded(dcos + c * g.len + l, acc_c[l]);
      store_rounded(dsin + c * g.len + l, acc_s[l]);
    }
  }
}

using CosSinGradFn = void (*)(const void *, const void *, void *, void *, const Geometry &, const int64_t *,
                              const int64_t *, int64_t, int64_t);

template <int MODE, typename T, typename U>
void cos_sin_grad_erased(const void *y_side, const void *x_side, void *dcos, void *dsin, const Geometry &g,
                         const int64_t *dy_shape, const int64_t *cos_shape, int64_t b, int64_t e) {
  cos_sin_grad_rows<MODE>(static_cast<const T *>(y_side), static_cast<const T *>(x_side), static_cast<U *>(dcos),
                          static_cast<U *>(dsin), g, dy_shape, cos_shape, b, e);
}

struct PickCosSinGrad {
  using Fn = CosSinGradFn;
  template <int MODE, typename T, typename U>
  static Fn get() { return cos_sin_grad_erased<MODE, T, U>; }
};

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
  const HeadNorm &norm = p.norm;
  if (norm.weight != nullptr && (norm.weight_dtype == kBadDType || !std::isfinite(norm.eps) || norm.eps < 0.0f ||
                                 !std::isfinite(norm.offset) || (p.conjugate && norm.x == nullptr))) {
    return kBadHeadNorm;
  }
  if (p.positions.values != nullptr) return check_positions(p);
  return check_shapes(p.dy_shape, p.cos_shape, p.sin_shape, dtype_bytes(p.dy_dtype), dtype_bytes(p.cos_dtype),
                      p.rotary_mode, p.start, p.end);
}

Status run_rotary(const RotaryProblem &p, int num_threads) {
  const Status status = check_rotary(p);
  if (status != kOk) return status;
  if (is_empty(p) && p.norm.weight == nullptr) {
    if (p.out != nullptr && p.out != p.dy) {
      std::memcpy(p.out, p.dy, element_count(p.dy_shape) * dtype_bytes(p.dy_dtype));
    }
    return kOk;
  }
  void *out = p.out != nullptr ? p.out : p.dy;
  const int64_t B = p.dy_shape[0], S = p.dy_shape[1], N = p.dy_shape[2];
  Geometry g{S, N, p.dy_shape[3], p.start, p.end, p.end - p.start, 0, 0, 0};
  const CosStrides strides = cos_row_strides(p.cos_shape);
  g.cos_b_stride = strides.b, g.cos_s_stride = strides.s, g.cos_n_stride = strides.n;
  const Positions &pos = p.positions;
  if (pos.values != nullptr) {
    const CosStrides strides = positions_strides(pos);
    g.positions = pos.values;
    g.positions_strides[0] = strides.b, g.positions_strides[1] = strides.s, g.positions_strides[2] = strides.n;
    g.lane_channels = pos.channels > 1 ? pos.lane_channels : nullptr;
    g.channel_stride = pos.batch * pos.seq;
  }
  const int64_t rows = B * S * N;
  if (p.norm.weight != nullptr) return run_head_norm(p, g, rows, num_threads);
  const RowFn fn = rotate_rows_for(p.conjugate, p.rotary_mode, p.dy_dtype, p.cos_dtype);
  const int threads = pick_threads(num_threads, rows, rows * g.len);
  parallel_for(threads, rows, [&](int64_t b, int64_t e) { fn(p.dy, out, p.cos, p.sin, g, b, e); });
  return kOk;
}

Status run_cos_sin_grad(const RotaryProblem &p, const void *y_side, const void *x_side, void *dcos, void *dsin,
                        int num_threads) {
  const Status status = check_rotary(p);
  if (status != kOk) return status;
  const int64_t cos_count = element_count(p.cos_shape);
  if (is_empty(p)) {  // nothing rotated: both gradients are zero
    std::memset(dcos, 0, cos_count * dtype_bytes(p.cos_dtype));
    std::memset(dsin, 0, cos_count * dtype_bytes(p.cos_dtype));
    return kOk;
  }
  const Geometry g{p.dy_shape[1], p.dy_shape[2], p.dy_shape[3], p.start, p.end, p.end - p.start, 0, 0, 0};
  const int64_t cos_rows = cos_count / g.len;
  const int64_t lanes = p.dy_shape[0] * p.dy_shape[1] * p.dy_shape[2] * g.len;
  const int threads = pick_threads(num_threads, cos_rows, lanes);
  const CosSinGradFn fn = pick_instance<PickCosSinGrad>(p.rotary_mode, p.dy_dtype, p.cos_dtype);
  parallel_for(threads, cos_rows, [&](int64_t b, int64_t e) {
    fn(y_side, x_side, dcos, dsin, g, p.dy_shape, p.cos_shape, b, e);
  });
  return kOk;
}

}  // namespace ms_rotary
