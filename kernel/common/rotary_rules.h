// The operator's shape and slice rules (docs/operator.md, "Rules") and status codes, shared by the CPU kernel
// (kernel/cpu) and the Ascend tiling (kernel/ascend/op_host); ms_rotary/library.py maps the codes to messages.
// Plain C++ with no dependency, header only: the Ascend build copies it beside its sources.
#ifndef MS_ROTARY_KERNEL_COMMON_ROTARY_RULES_H_
#define MS_ROTARY_KERNEL_COMMON_ROTARY_RULES_H_

#include <cstdint>

namespace ms_rotary {

enum Status : int {
  kOk = 0,
  kBadParamCount = 1,
  kBadRank = 2,
  kBadDTypeCode = 3,
  kCosSinMismatch = 4,
  kBadBroadcast = 5,
  kBadSlice = 6,
  kBadSliceLength = 7,
  kBadMode = 8,
  kHeadDimTooLarge = 9,
  kBadCosLength = 10,
  kMissingAttr = 11,
  kShapeTooLarge = 12,
  kNoUbRoom = 13,     // Ascend tiling: one row's slice does not fit in the unified buffer
  kBadCoreCount = 14, // Ascend tiling: no vector core
  kBadPositions = 15, // a position outside the cos/sin cache, or positions that do not fit dy's B and S
  kBadHeadNorm = 16,  // a head norm's weight, epsilon or forward input missing or invalid
};

// What each status means, for errors (ms_rotary/library.py reads them through ms_rotary_status_message).
inline const char *status_message(int status) {
  switch (status) {
    case kOk: return "ok";
    case kBadParamCount: return "bad parameter count or null pointer";
    case kBadRank: return "a tensor is not 4-D, has a negative dimension, or the output shape differs from dy's";
    case kBadDTypeCode: return "unsupported dtype";
    case kCosSinMismatch: return "cos and sin differ in shape or dtype";
    case kBadBroadcast: return "cos/sin do not broadcast to dy";
    case kBadSlice: return "partial_slice out of range";
    case kBadSliceLength: return "slice length not divisible as the mode needs";
    case kBadMode: return "rotary_mode out of range";
    case kHeadDimTooLarge: return "head dim D above 1024";
    case kBadCosLength: return "cos/sin last dim differs from the slice length";
    case kMissingAttr: return "rotary_mode/partial_slice attribute missing";
    case kShapeTooLarge: return "a tensor's element or byte count overflows int64";
    case kNoUbRoom: return "one row's slice does not fit in the Ascend unified buffer";
    case kBadCoreCount: return "no Ascend vector core";
    case kBadPositions:
      return "a position outside the cos/sin cache, or positions (M-RoPE: or lane channels) that do not fit the "
             "tensors";
    case kBadHeadNorm: return "a head norm's weight dtype, epsilon or forward input is missing or invalid";
    default: return nullptr;
  }
}

constexpr int64_t kMaxHeadDim = 1024;

// Lane layouts of a slice (docs/operator.md): which lanes form each rotated pair.
enum Layout : int32_t { kHalves = 0, kPairs = 1, kQuarters = 2 };

// Each mode's (x layout, y layout): the one table every kernel, direction and dtype reads (ms_rotary/modes.py
// states it for Python; tests/test_backend.py holds the two equal).
struct ModeLayouts {
  Layout x, y;
};
constexpr ModeLayouts kModeLayouts[4] = {
    {kHalves, kHalves},      // 0 half
    {kPairs, kPairs},        // 1 interleave
    {kQuarters, kQuarters},  // 2 quarter
    {kPairs, kHalves},       // 3 interleave-half
};

// dtypes by id: the CPU kernel's, the Ascend tiling key's and the host runner's (for Python:
// ms_rotary/targets/ascend.py, DTYPE_IDS; tests/test_backend.py holds the two equal).
enum DType : int { kBadDType = -1, kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
constexpr int64_t dtype_bytes(int64_t dtype) { return dtype == kFloat32 ? 4 : 2; }

// Row strides of cos/sin, in rows of `cos[3]` lanes, for dy row (b, s, n): 0 on a broadcast axis.
struct CosStrides {
  int64_t b, s, n;
};
constexpr CosStrides cos_row_strides(const int64_t *cos) {
  return {cos[0] == 1 ? 0 : cos[1] * cos[2], cos[1] == 1 ? 0 : cos[2], cos[2] == 1 ? 0 : 1};
}

// partial_slice=None travels to the kernels as [0, -1]: rotate [0, cos.shape[-1]).
constexpr int64_t kSliceFromCosEnd = -1;

inline int64_t slice_end(int64_t start, int64_t end, const int64_t *cos_shape) {
  return start == 0 && end == kSliceFromCosEnd ? cos_shape[3] : end;
}

// The Ascend kernel's dispatch key (tiling key) of a call.
constexpr int64_t tiling_key(int64_t mode, int64_t conjugate, int64_t dy_dtype_id, int64_t cos_dtype_id) {
  return ((mode * 2 + conjugate) * 3 + dy_dtype_id) * 3 + cos_dtype_id;
}

// Ascend 950 (arch35): the register path's tiling keys follow the 72 keys above.
constexpr int64_t kRegisterPathKeys = 72;

// Ascend 950: pairs per segment of a row, the unit the register path streams: a half of the slice (a quarter
// for mode 2, whose rows hold two segments of a and b groups).
constexpr int64_t register_segment_pairs(int64_t mode, int64_t len) { return mode == 2 ? len / 4 : len / 2; }

// Ascend 950: whether the register path takes a slice (of a call whose cos/sin lanes come from one row). A
// segment of 16 or 32 pairs fills whole registers with several rows, a multiple of 64 with whole registers per
// row; both keep every register load 32-byte aligned in every dtype. Other slices take the memory-based path,
// which the 950 also runs.
constexpr bool fits_register_path(int64_t mode, int64_t len) {
  const int64_t pairs = register_segment_pairs(mode, len);
  return pairs == 16 || pairs == 32 || (pairs > 0 && pairs % 64 == 0);
}

// Ascend 950: bytes past the data of each unified-buffer buffer of the register path: register loads read
// whole 256-byte registers, two of them for the last pairs of an interleaved row.
constexpr int64_t kRegisterSlackBytes = 512;

// Ascend 950: elements the register path keeps per cos (and per sin) row in the unified buffer: the row, or
// for segments of 16 or 32 pairs, each of its groups widened to a 64-lane register (128 lanes for the
// interleaved pairs of mode 1) so the row can be repeated across one register.
constexpr int64_t register_cos_slot(int64_t mode, int64_t len) {
  const int64_t widened = mode == 2 ? 256 : 128;
  return len > widened ? len : widened;
}

// Ascend: every field of the tiling the kernel reads, stated once as (field of ms_rotary_ascend::RotaryTiling,
// field of the op's TilingData). The TilingData definition, the op_host copy into it and the host runner's
// copy are generated from this list, so a field cannot be missed in one of them.
#define MS_ROTARY_TILING_FIELDS(X)                                                            \
  X(rows, rows) X(seq, seq) X(heads, heads) X(head_dim, headDim) X(start, start) X(len, len) \
  X(cos_b_stride, cosBStride) X(cos_s_stride, cosSStride) X(cos_n_stride, cosNStride)       \
  X(used_cores, usedCores)                                                                   \
  X(rows_per_loop, rowsPerLoop) X(cos_rows_per_loop, cosRowsPerLoop) X(pitch, pitch)         \
  X(cache_rows, cacheRows) X(channels, channels) X(channel_stride, channelStride)             \
  X(rows_q, rowsQ) X(k_seq, kSeq) X(k_heads, kHeads)

// Ascend: the rows [first, first + count) of `rows` that vector core `core` of `cores` takes: an even share,
// the first rows % cores cores one more. The q+k ops split q's rows and k's rows so, each on its own.
struct CoreShare {
  int64_t first, count;
};
constexpr CoreShare core_share(int64_t rows, int64_t cores, int64_t core) {
  return {core * (rows / cores) + (core < rows % cores ? core : rows % cores), rows / cores + (core < rows % cores)};
}

// Ascend: the most blocks one strided DataCopyPad moves (DataCopyExtParams::blockCount): rows per block of
// the tiling, cos rows per copy of the kernel.
constexpr int64_t kMaxCopyBlocks = 4095;

// Ascend kernel: whether a slice of `len` lanes swaps its pair mates as whole groups with 32-byte aligned
// offset Muls (halves or quarters of the y layout, 8 fp32 lanes a group at least) instead of a Gather. The
// kernel's work buffers and the tiling's UB plan both follow it.
constexpr bool swaps_groups(int64_t mode, int64_t len) {
  return mode != 1 && (mode == 2 ? len / 4 : len / 2) % 8 == 0;
}

inline bool is_empty_work(const int64_t *dy, const int64_t *cos, int64_t start, int64_t end) {
  if (start == end) return true;
  for (int i = 0; i < 4; ++i) {
    if (dy[i] == 0 || cos[i] == 0) return true;
  }
  return false;
}

// Element count of a 4-D shape times element_bytes fits in int64 (and no dimension is negative).
inline bool fits_int64(const int64_t *shape, int64_t element_bytes) {
  int64_t total = element_bytes;
  for (int i = 0; i < 4; ++i) {
    if (shape[i] < 0 || __builtin_mul_overflow(total, shape[i], &total)) return false;
  }
  return true;
}

// Every shape and slice rule, in the order of docs/operator.md: empty work wins over the rules that only
// matter when there is something to rotate (as CANN's tiling does); ranks, cos == sin and the slice range
// always apply. dtypes are the caller's to check.
inline Status check_shapes(const int64_t *dy, const int64_t *cos, const int64_t *sin, int64_t dy_bytes,
                           int64_t cos_bytes, int64_t mode, int64_t start, int64_t end) {
  for (int i = 0; i < 4; ++i) {
    if (dy[i] < 0 || cos[i] < 0 || sin[i] < 0) return kBadRank;
    if (cos[i] != sin[i]) return kCosSinMismatch;
  }
  if (!fits_int64(dy, dy_bytes) || !fits_int64(cos, cos_bytes)) return kShapeTooLarge;
  if (mode < 0 || mode > 3) return kBadMode;
  if (start < 0 || start > end || end > dy[3]) return kBadSlice;
  if (is_empty_work(dy, cos, start, end)) return kOk;
  if (dy[3] > kMaxHeadDim) return kHeadDimTooLarge;
  if ((end - start) % (mode == 2 ? 4 : 2) != 0) return kBadSliceLength;
  for (int i = 0; i < 3; ++i) {
    if (cos[i] != 1 && cos[i] != dy[i]) return kBadBroadcast;
  }
  if (cos[3] != end - start) return kBadCosLength;
  return kOk;
}

// A call that gathers cos/sin rows by position (RotaryEmbedding): cos and sin are a cache [1, P, 1, L], and
// each token of dy reads the cache row at its position. Positions are int64 [channels, batch, seq], batch 1
// or dy's B; dy's axes batch_axis and seq_axis hold B and S (BSND 0, 1; SBND 1, 0; BNSD 0, 2). More than one
// channel (quarter mode: token and block position; M-RoPE: time, height, width, ...): each cos/sin lane reads the
// row of its own channel's position.
// Position channels a token at most: M-RoPE's axes (HunYuan-VL: four; constraints.MAX_POSITION_AXES).
constexpr int64_t kMaxPositionChannels = 4;

struct PositionsShape {
  int64_t channels = 1, batch = 1, batch_axis = 0, seq_axis = 1, seq = 0;
};

// The shape rules of a call that gathers by position: the op's rules for one cos/sin row broadcast over dy,
// then the cache's and the positions'. The values (each in [0, P)) are checked where they are read.
inline Status check_positions_shape(const int64_t *dy, const int64_t *cache, const int64_t *sin, int64_t dy_bytes,
                                    int64_t cos_bytes, int64_t mode, int64_t start, int64_t end,
                                    const PositionsShape &pos) {
  const int64_t one_row[4] = {1, 1, 1, cache[3]};
  const Status status = check_shapes(dy, one_row, one_row, dy_bytes, cos_bytes, mode, start, end);
  if (status != kOk) return status;
  for (int i = 0; i < 4; ++i) {
    if (cache[i] != sin[i]) return kCosSinMismatch;
  }
  if (cache[0] != 1 || cache[2] != 1 || cache[1] < 1 || !fits_int64(cache, 8)) return kBadPositions;
  const bool axes_ok = pos.batch_axis >= 0 && pos.batch_axis < 3 && pos.seq_axis >= 0 && pos.seq_axis < 3 &&
                       pos.batch_axis != pos.seq_axis;
  if (!axes_ok || (pos.batch != 1 && pos.batch != dy[pos.batch_axis]) || pos.seq != dy[pos.seq_axis]) {
    return kBadPositions;
  }
  return pos.channels < 1 || pos.channels > kMaxPositionChannels ? kBadPositions : kOk;
}

// The index of the position a refusal names when one of `count` lies outside the cache [0, rows): the
// smallest if negative, else the largest (as ms_rotary/constraints.py names it); -1 when all lie inside.
inline int64_t position_outside(const int64_t *values, int64_t count, int64_t rows) {
  int64_t low = 0, high = 0;
  for (int64_t i = 1; i < count; ++i) {
    if (values[i] < values[low]) low = i;
    if (values[i] > values[high]) high = i;
  }
  if (count == 0) return -1;
  return values[low] < 0 ? low : values[high] >= rows ? high : -1;
}

// Where dy row (i0, i1, i2) finds its token in one channel of the positions, per dy axis: 1 on the sequence
// axis, seq on the batch axis (0 for positions shared by the batch), 0 on the heads' axis.
inline CosStrides positions_strides(const PositionsShape &pos) {
  int64_t strides[3] = {0, 0, 0};
  strides[pos.seq_axis] = 1;
  strides[pos.batch_axis] = pos.batch > 1 ? pos.seq : 0;
  return {strides[0], strides[1], strides[2]};
}

}  // namespace ms_rotary

#endif  // MS_ROTARY_KERNEL_COMMON_ROTARY_RULES_H_
