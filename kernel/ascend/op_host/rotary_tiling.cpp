#include "rotary_tiling.h"

namespace ms_rotary_ascend {
namespace {

int64_t align_up(int64_t value, int64_t to) { return (value + to - 1) / to * to; }

}  // namespace

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

ms_rotary::Status compute_rotary_tiling(const RotaryShape &shape, int64_t core_num, int64_t ub_bytes,
                                        RotaryTiling *tiling) {
  if (tiling == nullptr) return ms_rotary::kBadParamCount;
  if (core_num <= 0) return ms_rotary::kBadCoreCount;
  const ms_rotary::Status status = ms_rotary::check_shapes(shape.dy, shape.cos, shape.cos, shape.dy_dtype_bytes,
                                                           shape.cos_dtype_bytes, shape.rotary_mode, shape.start,
                                                           shape.end);
  if (status != ms_rotary::kOk) return status;
  const int64_t head_dim = shape.dy[3];
  const int64_t len = shape.end - shape.start;

  RotaryTiling t{};
  t.rows = shape.dy[0] * shape.dy[1] * shape.dy[2];
  if (ms_rotary::is_empty_work(shape.dy, shape.cos, shape.start, shape.end)) t.rows = 0;
  t.seq = shape.dy[1];
  t.heads = shape.dy[2];
  t.head_dim = head_dim;
  t.start = shape.start;
  t.len = len;
  t.cos_n_stride = shape.cos[2] == 1 ? 0 : 1;
  t.cos_s_stride = shape.cos[1] == 1 ? 0 : shape.cos[2];
  t.cos_b_stride = shape.cos[0] == 1 ? 0 : shape.cos[1] * shape.cos[2];
  t.tiling_key = ms_rotary::tiling_key(shape.rotary_mode, shape.conjugate ? 1 : 0, shape.dy_dtype_id,
                                       shape.cos_dtype_id);
  if (t.rows == 0) {
    t.used_cores = 0;
    *tiling = t;
    return ms_rotary::kOk;
  }
  t.used_cores = t.rows < core_num ? t.rows : core_num;  // more cores than rows: one row each
  t.rows_per_core = t.rows / t.used_cores;
  t.big_cores = t.rows % t.used_cores;
  const int64_t fixed = ub_fixed_bytes(shape);
  const int64_t per_row = ub_bytes_per_row(shape);
  if (ub_bytes - fixed < per_row) return ms_rotary::kNoUbRoom;
  int64_t fit = (ub_bytes - fixed) / per_row;
  if (fit > kMaxBlockCount) fit = kMaxBlockCount;
  const int64_t most = t.rows_per_core + (t.big_cores > 0 ? 1 : 0);
  t.rows_per_loop = fit < most ? fit : most;
  *tiling = t;
  return ms_rotary::kOk;
}

}  // namespace ms_rotary_ascend
