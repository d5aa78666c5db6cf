#include "rotary_tiling.h"

namespace ms_rotary_ascend {
namespace {

int64_t align_up(int64_t value, int64_t to) { return (value + to - 1) / to * to; }

}  // namespace

int64_t tiling_key(int64_t mode, bool conjugate, int64_t dy_dtype_id, int64_t cos_dtype_id) {
  return ((mode * 2 + (conjugate ? 1 : 0)) * 3 + dy_dtype_id) * 3 + cos_dtype_id;
}

int64_t ub_bytes_per_row(const RotaryShape &shape) {
  const int64_t len = shape.end - shape.start;
  // the slice in and out, its cos and sin rows (each padded to 32 bytes, as the strided copy lays them)
  return 2 * align_up(len * shape.dy_dtype_bytes, kBlockBytes) + 2 * align_up(len * shape.cos_dtype_bytes, kBlockBytes);
}

int64_t ub_fixed_bytes(const RotaryShape &shape) {
  const int64_t half = (shape.end - shape.start) / 2;
  const int64_t span = align_up(2 * align_up(half, 8), 8);  // [a | pad | b] in fp32 or uint32 lanes
  return (5 + 3) * span * 4;  // 5 fp32 work rows, 3 offset tables
}

TilingStatus compute_rotary_tiling(const RotaryShape &shape, int64_t core_num, int64_t ub_bytes,
                                   RotaryTiling *tiling) {
  if (tiling == nullptr) return kTilingBadShape;
  if (core_num <= 0) return kTilingBadCores;
  for (int i = 0; i < 4; ++i) {
    if (shape.dy[i] < 0 || shape.cos[i] < 0) return kTilingBadShape;
  }
  for (int i = 0; i < 3; ++i) {
    if (shape.cos[i] != 1 && shape.cos[i] != shape.dy[i] && shape.cos[i] != 0) return kTilingBadShape;
  }
  if (shape.rotary_mode < 0 || shape.rotary_mode > 3) return kTilingBadMode;
  const int64_t head_dim = shape.dy[3];
  if (head_dim > kMaxHeadDim) return kTilingBadShape;
  if (shape.start < 0 || shape.start > shape.end || shape.end > head_dim) return kTilingBadSlice;
  const int64_t len = shape.end - shape.start;
  if (len % (shape.rotary_mode == 2 ? 4 : 2) != 0) return kTilingBadSlice;
  if (len > 0 && shape.cos[3] != len) return kTilingBadShape;

  RotaryTiling t{};
  t.rows = shape.dy[0] * shape.dy[1] * shape.dy[2];
  if (len == 0 || shape.cos[0] * shape.cos[1] * shape.cos[2] == 0) t.rows = 0;  // empty work
  t.seq = shape.dy[1];
  t.heads = shape.dy[2];
  t.head_dim = head_dim;
  t.start = shape.start;
  t.len = len;
  t.cos_n_stride = shape.cos[2] == 1 ? 0 : 1;
  t.cos_s_stride = shape.cos[1] == 1 ? 0 : shape.cos[2];
  t.cos_b_stride = shape.cos[0] == 1 ? 0 : shape.cos[1] * shape.cos[2];
  t.tiling_key = tiling_key(shape.rotary_mode, shape.conjugate, shape.dy_dtype_id, shape.cos_dtype_id);
  if (t.rows == 0) {
    t.used_cores = 0;
    *tiling = t;
    return kTilingOk;
  }
  t.used_cores = t.rows < core_num ? t.rows : core_num;  // more cores than rows: one row each
  t.rows_per_core = t.rows / t.used_cores;
  t.big_cores = t.rows % t.used_cores;
  const int64_t fixed = ub_fixed_bytes(shape);
  const int64_t per_row = ub_bytes_per_row(shape);
  if (ub_bytes - fixed < per_row) return kTilingNoRoom;
  int64_t fit = (ub_bytes - fixed) / per_row;
  if (fit > kMaxBlockCount) fit = kMaxBlockCount;
  const int64_t most = t.rows_per_core + (t.big_cores > 0 ? 1 : 0);
  t.rows_per_loop = fit < most ? fit : most;
  *tiling = t;
  return kTilingOk;
}

}  // namespace ms_rotary_ascend
