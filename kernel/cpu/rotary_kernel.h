// Partial rotary embedding, forward and backward, in place on a slice of the last axis.
// Plain C++ with no MindSpore dependency, so host tests and benchmarks can call it directly.
#ifndef MS_ROTARY_KERNEL_CPU_ROTARY_KERNEL_H_
#define MS_ROTARY_KERNEL_CPU_ROTARY_KERNEL_H_

#include <cstdint>

#include "../common/rotary_rules.h"  // Status, DType, kMaxHeadDim, the mode table, check_shapes

namespace ms_rotary {

// How a call that gathers cos/sin rows by position finds the row of each dy row (rotary_rules.h,
// PositionsShape): values int64 [channels, batch, seq]; with more than one channel, cos/sin lane l comes from
// the row of position channel lane_channels[l].
struct Positions : PositionsShape {
  const int64_t *values = nullptr;  // null: no gather, cos/sin broadcast to dy
  const int64_t *lane_channels = nullptr;  // [end - start] when channels > 1
};

// Optional: each whole row (head) RMS-normalised before its slice is rotated, as Qwen3's and Gemma-3's
// q_norm/k_norm do: n = x * r * (offset + weight), r = 1 / sqrt(mean(x^2) + eps), in fp32, rounded once on
// store with the rotation. With `conjugate` the call is that forward's backward: dy is the gradient of its
// output, `x` the forward's input; `out` receives dx (null: not wanted) and `weight_grad` the weight's
// gradient, fp32 [D] (null: not wanted).
struct HeadNorm {
  const void *weight = nullptr;  // [D] in weight_dtype; null: no norm
  DType weight_dtype = kFloat32;
  float eps = 0.0f;
  float offset = 0.0f;           // 1 for Gemma's (1 + weight)
  const void *x = nullptr;
  float *weight_grad = nullptr;
};

struct RotaryProblem {
  void *dy;                // [B, S, N, D], rotated in place on [start, end) unless `out` is set
  void *out;               // null: in place; else [B, S, N, D] receiving dy with the slice rotated
  const void *cos;         // [cb, cs, cn, end - start], each of cb/cs/cn is 1 or dy's
  const void *sin;         // same shape and dtype as cos
  int64_t dy_shape[4];
  int64_t cos_shape[4];
  int64_t sin_shape[4];
  DType dy_dtype;
  DType cos_dtype;
  DType sin_dtype;
  int64_t rotary_mode;     // 0 half, 1 interleave, 2 quarter, 3 interleave-half
  int64_t start;
  int64_t end;
  bool conjugate;          // false: forward y = x*cos + rot(x)*sin; true: its transpose (the grad)
  // Optional: cos/sin rows gathered by position from a cache [1, P, 1, end - start] (see Positions).
  Positions positions;
  HeadNorm norm;           // optional (see HeadNorm)
};

// The most threads one call uses (a requested count above it is capped; $MS_ROTARY_NUM_THREADS above it is
// ignored).
constexpr int64_t kMaxThreads = 1024;

// Checks every constraint; kOk means run_rotary may be called. Empty work (start == end or a zero-sized
// axis) wins over the rules that only matter when there is work: slice divisibility, D <= 1024, broadcast
// and cos/sin length (as CANN's tiling does); rank, dtypes, cos == sin and the slice range always apply.
Status check_rotary(const RotaryProblem &p);

// Checks, then rotates. Empty work returns kOk; in place it touches no memory, out of place it copies dy.
// num_threads 0: automatic (or $MS_ROTARY_NUM_THREADS). Results do not depend on the calling thread's
// floating-point environment (denormals are kept even where the caller flushes them).
Status run_rotary(const RotaryProblem &p, int num_threads);

// Gradients of the rotation for cos and sin, summed over cos's broadcast axes (B, S or N of size 1):
// y_side is in y's lane layout and x_side in x's. For the forward y = R(x), y_side = dL/dy and x_side = x;
// for the backward dx = R^T(dy), y_side = dy and x_side = dL/dx. `p.dy`/`p.out` are unused; `p.dy_shape`
// is the shape of both sides, `p.cos_shape` of dcos and dsin (written in p.cos_dtype, summed in double).
Status run_cos_sin_grad(const RotaryProblem &p, const void *y_side, const void *x_side, void *dcos, void *dsin,
                        int num_threads);

DType dtype_from_name(const char *name);

}  // namespace ms_rotary

#endif  // MS_ROTARY_KERNEL_CPU_ROTARY_KERNEL_H_
