// What both Ascend kernels (rotary_kernel.h for the 910B, rotary_kernel_arch35.h for the 950) read from the
// tiling, and how a row of dy finds its cos row.
#ifndef MS_ROTARY_ASCEND_ROTARY_ROWS_H_
#define MS_ROTARY_ASCEND_ROTARY_ROWS_H_

#include "kernel_operator.h"
#include "rotary_rules.h"  // kernel/common: the mode table, dtype ids, the tiling key

namespace ms_rotary_ascend {

using AscendC::GlobalTensor;

// The tiling as the kernels read it. The kernel build generates the TilingData struct from the op_host
// header, and its name and namespace are the generator's choice, so the kernels copy the fields they need
// by name into a struct of their own (ReadTiling) and never name the generated type.
struct Tiling {
#define MS_ROTARY_KERNEL_FIELD(tiling_field, data_field) int64_t data_field;
  MS_ROTARY_TILING_FIELDS(MS_ROTARY_KERNEL_FIELD)
#undef MS_ROTARY_KERNEL_FIELD
};

template <typename GeneratedTiling>
__aicore__ inline Tiling ReadTiling(const GeneratedTiling &generated) {
  Tiling t;
#define MS_ROTARY_READ_FIELD(tiling_field, data_field) t.data_field = generated.data_field;
  MS_ROTARY_TILING_FIELDS(MS_ROTARY_READ_FIELD)
#undef MS_ROTARY_READ_FIELD
  return t;
}

__aicore__ inline int64_t AlignUp(int64_t value, int64_t to) { return (value + to - 1) / to * to; }

// The cos row that row `row` of dy (a B*S*N row index) reads: by cos's strides over dy, or when gathering
// (cacheRows > 0) the cache row at its token's position, the strides then locating the token in `positions`.
// A kernel cannot raise: a position outside the cache (refused by the host where it sees the positions) is
// clamped into it, so the kernel never reads past the cache.
__aicore__ inline int64_t CosRow(const Tiling &t, const GlobalTensor<int64_t> &positions, int64_t row) {
  const int64_t n = row % t.heads, s = (row / t.heads) % t.seq;
  const int64_t b = row / (t.heads * t.seq);
  const int64_t index = b * t.cosBStride + s * t.cosSStride + n * t.cosNStride;
  if (t.cacheRows == 0) return index;
  const int64_t position = positions.GetValue(static_cast<uint64_t>(index));
  return position < 0 ? 0 : position < t.cacheRows ? position : t.cacheRows - 1;
}

// Rows come in groups of this many consecutive rows reading one cos row (1: each row its own; gathering: one
// token's rows).
__aicore__ inline int64_t CosGroupRows(const Tiling &t) {
  return t.cosNStride != 0 ? 1 : t.cosSStride != 0 ? t.heads : t.cosBStride != 0 ? t.seq * t.heads : t.rows;
}

// How many rows from `row` on read the same cos row.
__aicore__ inline int64_t SharedRows(const Tiling &t, int64_t row) {
  const int64_t group = CosGroupRows(t);
  return group - row % group;
}

// Rows of the block [row0, row0 + rows) from its row r on that share r's cos row.
__aicore__ inline int64_t RunRows(const Tiling &t, int64_t row0, int64_t r, int64_t rows) {
  const int64_t shared = SharedRows(t, row0 + r);
  return shared < rows - r ? shared : rows - r;
}

// The cos rows a block of `rows` rows from row0 reads, as runs of consecutive cos rows (one copy each, at
// most kMaxCopyBlocks rows), into slots numbered in block order: rows sharing a cos row share its slot.
class CosRuns {
 public:
  __aicore__ inline CosRuns(const Tiling &t, const GlobalTensor<int64_t> &positions, int64_t row0, int64_t rows)
      : t_(t), positions_(positions), row0_(row0), rows_(rows) {}

  // The next run: `count` cos rows from `cosRow`, into slots from `slot`; false after the last.
  __aicore__ inline bool Next(int64_t &slot, int64_t &cosRow, int64_t &count) {
    if (r_ >= rows_) return false;
    slot = slots_, cosRow = CosRow(t_, positions_, row0_ + r_), count = 0;
    do {  // one CosRow a slot
      r_ += RunRows(t_, row0_, r_, rows_);
      ++count, ++slots_;
    } while (r_ < rows_ && count < ms_rotary::kMaxCopyBlocks &&
             CosRow(t_, positions_, row0_ + r_) == cosRow + count);
    return true;
  }

  __aicore__ inline int64_t Slots() const { return slots_; }

 private:
  const Tiling &t_;
  const GlobalTensor<int64_t> &positions_;
  int64_t row0_, rows_, r_ = 0, slots_ = 0;
};

// What both kernels do with their stages (each kernel declares it a friend): this core's rows in blocks of
// rowsPerLoop, each copied in, computed and copied out, the kernels' queues letting successive blocks overlap.
// The q+k ops split q's rows over the cores, then k's (ms_rotary::core_share): each core moves to k's tensor and
// dimensions after its share of q, as two launches would split them but in one.
struct Blocks {
  // positions (int64) and laneMasks (int16): the inputs of the ops that gather by position, else null; k: the
  // second tensor of the q+k ops, else null.
  template <typename Kernel>
  __aicore__ static inline void Run(GM_ADDR dy, GM_ADDR k, GM_ADDR cos, GM_ADDR sin, GM_ADDR positions,
                                    GM_ADDR laneMasks, const Tiling &t) {
    const int64_t core = AscendC::GetBlockIdx();
    if (t.rows == 0 || core >= t.usedCores) return;  // empty work, or an idle core
    Tiling segment = t;  // q's (dy's) rows
    segment.rows = t.rowsQ;
    Kernel kernel;
    kernel.Init(dy, cos, sin, positions, laneMasks, segment);
    RunShare(kernel, ms_rotary::core_share(t.rowsQ, t.usedCores, core));
    if (t.rows > t.rowsQ) {  // k's rows
      segment.rows = t.rows - t.rowsQ, segment.seq = t.kSeq, segment.heads = t.kHeads;
      kernel.SetTensor(k, segment);
      RunShare(kernel, ms_rotary::core_share(segment.rows, t.usedCores, core));
    }
  }

 private:
  template <typename Kernel>
  __aicore__ static inline void RunShare(Kernel &kernel, const ms_rotary::CoreShare &share) {
    const int64_t end = share.first + share.count, step = kernel.tiling_.rowsPerLoop;
    for (int64_t row0 = share.first; row0 < end; row0 += step) {
      const int64_t rows = end - row0 < step ? end - row0 : step;
      const int64_t slots = kernel.CopyIn(row0, rows);
      kernel.Compute(row0, rows, slots);
      kernel.CopyOut(row0, rows);
    }
  }
};

}  // namespace ms_rotary_ascend

#endif  // MS_ROTARY_ASCEND_ROTARY_ROWS_H_
