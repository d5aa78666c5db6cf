// Tiling of MsRotaryPartialRotaryMul(Grad) for Ascend vector cores: plain C++ with no CANN dependency, so
// it is unit-tested on the host (tests/test_ascend_host.py). op_host/ms_rotary_partial_rotary_mul.cpp copies
// the result into the op's TilingData.
#ifndef MS_ROTARY_ASCEND_ROTARY_TILING_H_
#define MS_ROTARY_ASCEND_ROTARY_TILING_H_

#include <cstdint>

#include "rotary_rules.h"  // kernel/common: the op's rules, status codes and tiling key

namespace ms_rotary_ascend {

struct RotaryShape {
  int64_t dy[4];   // B, S, N, D
  int64_t cos[4];  // b, s, n, L (sin identical)
  int64_t dy_dtype_id;   // ms_rotary::DType
  int64_t cos_dtype_id;
  int64_t rotary_mode;   // 0 half, 1 interleave, 2 quarter, 3 interleave-half
  int64_t start, end;
  bool conjugate;        // the backward
  bool arch35;           // an Ascend 950: the register-based kernel where the slice fits it
  bool gathers;          // cos/sin rows by position: cos is a cache [1, P, 1, L] (rotary_rules.h)
  ms_rotary::PositionsShape positions;  // with `gathers`
  int64_t k_heads;       // with `gathers`: k rotated in the same launch, dy's shape (q's) with this many heads
                         // on its heads axis (the one neither positions axis names); 0: no k
};

struct RotaryTiling {
  int64_t rows;           // B*S*N rows (q's, then k's), split across cores
  int64_t seq, heads;     // dy's (q's) second and third dimensions: to find a row's cos row
  int64_t rows_q;         // the rows of dy (q); those after them are k's
  int64_t k_seq, k_heads; // k's second and third dimensions (0 without k)
  int64_t head_dim;       // D: the stride between rows of dy
  int64_t start, len;     // the slice
  int64_t cos_b_stride, cos_s_stride, cos_n_stride;  // in cos rows, 0 on broadcast axes; gathering: in tokens
                                                      // of the positions (ms_rotary::positions_strides)
  int64_t used_cores;
  int64_t rows_per_loop;  // rows per block: moved by one strided copy, rotated by one instruction per step
  int64_t cos_rows_per_loop;  // most distinct cos rows one block reads (fewer when cos broadcasts over rows)
  int64_t pitch;          // elements between rows of a block in the unified buffer: len rounded up to 16
                          // (the register path: len, its rows back to back)
  int64_t cache_rows;     // gathering: P, the rows positions pick from; 0: cos broadcast over dy
  int64_t channels;       // position channels (gathering M-RoPE 3-4, quarter mode 2; else 1): each lane's cos/sin
                          // comes from its channel's row (the lane_masks input says which)
  int64_t channel_stride; // positions between channels: batch * S
  int64_t tiling_key;     // mode, direction, dy dtype, cos dtype; the register path's from kRegisterPathKeys
};

// Whether the tiling chose the 950's register-based kernel (op_kernel/rotary_kernel_arch35.h).
inline bool uses_register_path(const RotaryTiling &t) { return t.tiling_key >= ms_rotary::kRegisterPathKeys; }

// Distinct cos rows a block of `rows` consecutive dy rows can read, for the broadcast pattern in `t`.
int64_t cos_rows_for_block(const RotaryTiling &t, int64_t rows);
// Unified-buffer bytes the kernel (op_kernel/rotary_kernel.h) allocates for blocks of `rows` rows.
int64_t ub_bytes_for_block(const RotaryShape &shape, const RotaryTiling &t, int64_t rows);

// Checks the op's rules (kernel/common/rotary_rules.h), then fills `tiling` for `core_num` vector cores and
// `ub_bytes` of unified buffer per core.
ms_rotary::Status compute_rotary_tiling(const RotaryShape &shape, int64_t core_num, int64_t ub_bytes,
                                   RotaryTiling *tiling);

}  // namespace ms_rotary_ascend

#endif  // MS_ROTARY_ASCEND_ROTARY_TILING_H_
