#include "rotary_tiling.h"

namespace ms_rotary_ascend {
namespace {

int64_t align_up(int64_t value, int64_t to) { return (value + to - 1) / to * to; }

}  // namespace

int64_t cos_rows_for_block(const RotaryTiling &t, int64_t rows) {
  if (t.cos_n_stride != 0) return rows;  // one cos row per dy row
  // Rows share a cos row within a run of `group` consecutive rows; a block starting anywhere touches at
  // most (rows - 1) / group + 2 runs. q's and k's rows (their own head counts) each.
  int64_t most = 0;
  const int64_t dims[2][3] = {{t.seq, t.heads, t.rows_q}, {t.k_seq, t.k_heads, t.rows - t.rows_q}};
  for (const auto &d : dims) {
    if (d[2] == 0) continue;
    const int64_t group = t.cos_s_stride != 0 ? d[1] : t.cos_b_stride != 0 ? d[0] * d[1] : d[2];
    const int64_t runs = (rows - 1) / group + 2;
    most = runs > most ? runs : most;
  }
  return most < rows ? most : rows;
}

int64_t ub_bytes_for_block(const RotaryShape &shape, const RotaryTiling &t, int64_t rows) {
  const int64_t dy_bytes = ms_rotary::dtype_bytes(shape.dy_dtype_id);
  const int64_t cos_bytes = ms_rotary::dtype_bytes(shape.cos_dtype_id);
  const int64_t cos_rows = cos_rows_for_block(t, rows);
  if (uses_register_path(t)) {  // everything else lives in registers
    const int64_t cos_slot = ms_rotary::register_cos_slot(shape.rotary_mode, t.len);
    return 2 * 2 * (rows * t.len * dy_bytes + ms_rotary::kRegisterSlackBytes)          // dy in and out
           + 2 * (2 * cos_rows * cos_slot * cos_bytes + ms_rotary::kRegisterSlackBytes);  // cos and sin
  }
  const bool swaps = ms_rotary::swaps_groups(shape.rotary_mode, shape.end - shape.start);
  // two work rows; the partner table unless groups swap; the same table (interleave-half); 16-bit dy in
  // fp32 unless groups swap (then it is converted into the second work row)
  const int64_t f32_rows = 2 + (swaps ? 0 : 1) + (shape.rotary_mode == 3 ? 1 : 0) + (dy_bytes == 4 || swaps ? 0 : 1);
  const int64_t f32_cos_rows = cos_bytes == 4 ? 1 : 2;
  const int64_t lane_masks = t.channels > 1 ? t.channels * t.pitch * cos_bytes : 0;
  return 2 * 2 * rows * t.pitch * dy_bytes                     // dy in and out, two buffers each
         + 2 * 2 * t.channels * cos_rows * t.pitch * cos_bytes  // cos and sin in, each channel's, two buffers
         + lane_masks                                          // which lanes each channel gives
         + f32_rows * rows * t.pitch * 4                       // fp32 work rows and gather tables
         + f32_cos_rows * cos_rows * t.pitch * 4               // fp32 cos (16-bit inputs) and signed sin
         + 6 * t.pitch * 4;                                    // the sign row, scratch for the tables
}

ms_rotary::Status compute_rotary_tiling(const RotaryShape &shape, int64_t core_num, int64_t ub_bytes,
                                        RotaryTiling *tiling) {
  if (tiling == nullptr) return ms_rotary::kBadParamCount;
  if (core_num <= 0) return ms_rotary::kBadCoreCount;
  const int64_t dy_bytes = ms_rotary::dtype_bytes(shape.dy_dtype_id);
  const int64_t cos_bytes = ms_rotary::dtype_bytes(shape.cos_dtype_id);
  const ms_rotary::Status status =
      shape.gathers ? ms_rotary::check_positions_shape(shape.dy, shape.cos, shape.cos, dy_bytes, cos_bytes,
                                                       shape.rotary_mode, shape.start, shape.end, shape.positions)
                    : ms_rotary::check_shapes(shape.dy, shape.cos, shape.cos, dy_bytes, cos_bytes, shape.rotary_mode,
                                              shape.start, shape.end);
  if (status != ms_rotary::kOk) return status;
  int64_t k_dy[4] = {0, 0, 0, 0};  // k's shape: q's with k's heads
  if (shape.k_heads != 0) {
    const int64_t heads_axis = 3 - shape.positions.batch_axis - shape.positions.seq_axis;
    if (!shape.gathers || shape.k_heads < 0) return ms_rotary::kBadPositions;
    for (int i = 0; i < 4; ++i) k_dy[i] = i == heads_axis ? shape.k_heads : shape.dy[i];
    const ms_rotary::Status k_status = ms_rotary::check_positions_shape(
        k_dy, shape.cos, shape.cos, dy_bytes, cos_bytes, shape.rotary_mode, shape.start, shape.end, shape.positions);
    if (k_status != ms_rotary::kOk) return k_status;
  }
  const int64_t head_dim = shape.dy[3];
  const int64_t len = shape.end - shape.start;

  RotaryTiling t{};
  const auto work_rows = [&](const int64_t *dy) {  // a tensor's rows, 0 for empty work (and for no k: all 0)
    return ms_rotary::is_empty_work(dy, shape.cos, shape.start, shape.end) ? 0 : dy[0] * dy[1] * dy[2];
  };
  t.rows_q = work_rows(shape.dy);
  t.rows = t.rows_q + work_rows(k_dy);
  t.seq = shape.dy[1];
  t.heads = shape.dy[2];
  t.k_seq = k_dy[1];
  t.k_heads = k_dy[2];
  t.head_dim = head_dim;
  t.start = shape.start;
  t.len = len;
  const ms_rotary::CosStrides strides =
      shape.gathers ? ms_rotary::positions_strides(shape.positions) : ms_rotary::cos_row_strides(shape.cos);
  t.cache_rows = shape.gathers ? shape.cos[1] : 0;
  t.channels = shape.gathers ? shape.positions.channels : 1;
  t.channel_stride = shape.gathers ? shape.positions.batch * shape.positions.seq : 0;
  t.cos_b_stride = strides.b, t.cos_s_stride = strides.s, t.cos_n_stride = strides.n;
  // several channels combine their rows' lanes first (op_kernel/rotary_kernel.h): the memory kernel's job
  const bool register_path = shape.arch35 && ms_rotary::fits_register_path(shape.rotary_mode, len) &&
                             t.channels == 1;
  t.tiling_key = (register_path ? ms_rotary::kRegisterPathKeys : 0) +
                 ms_rotary::tiling_key(shape.rotary_mode, shape.conjugate ? 1 : 0, shape.dy_dtype_id,
                                       shape.cos_dtype_id);
  if (t.rows == 0) {
    t.used_cores = 0;
    *tiling = t;
    return ms_rotary::kOk;
  }
  t.used_cores = t.rows < core_num ? t.rows : core_num;  // more cores than rows: one row each
  t.pitch = register_path ? len : align_up(len, 16);  // rows 32-byte aligned in every dtype, and in fp32
  // the most rows a core takes of one tensor: core 0's share (ms_rotary::core_share) of q's rows or of k's
  const int64_t most_q = ms_rotary::core_share(t.rows_q, t.used_cores, 0).count;
  const int64_t most_k = ms_rotary::core_share(t.rows - t.rows_q, t.used_cores, 0).count;
  const int64_t most = most_q > most_k ? most_q : most_k;
  int64_t rows = most < ms_rotary::kMaxCopyBlocks ? most : ms_rotary::kMaxCopyBlocks;
  if (ub_bytes_for_block(shape, t, 1) > ub_bytes) return ms_rotary::kNoUbRoom;
  int64_t fits = 1;  // bytes grow with rows: bisect for the largest block that fits
  while (fits < rows) {
    const int64_t mid = (fits + rows + 1) / 2;
    if (ub_bytes_for_block(shape, t, mid) <= ub_bytes) fits = mid; else rows = mid - 1;
  }
  t.rows_per_loop = fits;
  t.cos_rows_per_loop = cos_rows_for_block(t, fits);
  *tiling = t;
  return ms_rotary::kOk;
}

}  // namespace ms_rotary_ascend
