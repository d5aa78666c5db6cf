// Ascend C kernel of partial rotary, forward and backward, all modes and dtypes, on vector cores.
// Each core takes a contiguous range of the B*S*N rows, in blocks of rowsPerLoop rows. Per block:
//   copy-in (MTE2): the block's slices of dy with one strided copy; the distinct cos/sin rows it reads,
//     one copy per run of consecutive rows (rows sharing a cos row, e.g. heads under [1, S, 1, L], load it once;
//     gathering by position with several channels: each channel's rows, whose lanes the compute combines);
//   compute (vector), one instruction per step over the whole block, in fp32, with pitch-strided rows:
//     forward   y = same(x) * cos + partner(x) * (sign * sin)     lanes in the y layout
//     backward  x = same(dy * cos) + partner(dy * sign * sin)      lanes in the x layout
//     partner(v) gathers each lane's pair mate, same(v) only reorders (interleave-half alone: the x and y
//     layouts differ), sign is -1 on the a lanes and +1 on the b lanes of the y layout (see LaneGroup);
//     a cos row shared by several rows is applied by one repeat-form Mul whose cos stride is 0;
//   copy-out (MTE3): one strided copy that writes only the slice.
// Queues hold two buffers: copy-in of one block, compute of the previous and copy-out of the one before
// overlap. Gather tables are built once per launch with vector instructions (no per-lane scalar writes).
#ifndef MS_ROTARY_ASCEND_ROTARY_KERNEL_H_
#define MS_ROTARY_ASCEND_ROTARY_KERNEL_H_

#include "rotary_rows.h"  // the tiling as read, a row's cos row; kernel/common's rules

namespace ms_rotary_ascend {
using namespace AscendC;

using ms_rotary::kHalves;
using ms_rotary::kPairs;
using ms_rotary::kQuarters;
constexpr int64_t kFloatsPerRepeat = 64;  // 256 bytes of fp32: one vector repeat
constexpr int64_t kMaxRepeats = 255;

// Lanes of a layout come in groups of g: even groups hold the pairs' a elements, odd groups their b
// elements, and a lane's pair mate is g lanes away. halves: g = len/2; pairs: g = 1; quarters: g = len/4.
__aicore__ inline int64_t LaneGroup(int32_t layout, int64_t len) {
  return layout == kHalves ? len / 2 : layout == kPairs ? 1 : len / 4;
}

template <int32_t MODE, bool CONJ, typename TDy, typename TCos>
class PartialRotaryKernel {
 public:
  static constexpr int32_t kXLayout = ms_rotary::kModeLayouts[MODE].x;
  static constexpr int32_t kYLayout = ms_rotary::kModeLayouts[MODE].y;
  static constexpr bool kReorders = kXLayout != kYLayout;  // interleave-half: `same` is a gather too
  static constexpr bool kDyFloat = sizeof(TDy) == sizeof(float), kCosFloat = sizeof(TCos) == sizeof(float);

  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR cos, GM_ADDR sin, GM_ADDR positions, GM_ADDR laneMasks,
                              const Tiling &t) {
    tiling_ = t;
    len_ = t.len;
    pitch_ = t.pitch;
    swap_ = ms_rotary::swaps_groups(MODE, len_);
    dyGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TDy *>(dy));
    cosGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TCos *>(cos));
    sinGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TCos *>(sin));
    positionsGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t *>(positions));
    const int64_t block = t.rowsPerLoop * pitch_, cosBlock = t.cosRowsPerLoop * pitch_;
    sinAt_ = t.channels * cosBlock;
    pipe_.InitBuffer(inQueue_, 2, block * sizeof(TDy));
    pipe_.InitBuffer(outQueue_, 2, block * sizeof(TDy));
    pipe_.InitBuffer(cosQueue_, 2, 2 * sinAt_ * sizeof(TCos));  // cos rows, then sin rows: each channel's
    if (t.channels > 1) LoadLaneMasks(laneMasks);
    pipe_.InitBuffer(work1Buf_, block * sizeof(float));
    pipe_.InitBuffer(work2Buf_, block * sizeof(float));
    if (!swap_) pipe_.InitBuffer(partnerBuf_, block * sizeof(uint32_t));
    if constexpr (kReorders) pipe_.InitBuffer(sameBuf_, block * sizeof(uint32_t));
    if (!kDyFloat && !swap_) pipe_.InitBuffer(dyFloatBuf_, block * sizeof(float));  // else in work2
    if constexpr (!kCosFloat) pipe_.InitBuffer(cosFloatBuf_, cosBlock * sizeof(float));
    pipe_.InitBuffer(sinFloatBuf_, cosBlock * sizeof(float));
    pipe_.InitBuffer(signBuf_, pitch_ * sizeof(float));
    pipe_.InitBuffer(scratchBuf_, 5 * pitch_ * sizeof(float));
    BuildTables();
  }

 private:
  friend struct ms_rotary_ascend::Blocks;  // runs CopyIn, Compute, CopyOut per block

  // The q+k ops: from here on the rows are k's (its tensor, its seq and heads in `t`).
  __aicore__ inline void SetTensor(GM_ADDR dy, const Tiling &t) {
    tiling_ = t;
    dyGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TDy *>(dy));
  }

  // ---- gather tables and the sign row, one row each, replicated over the block ----

  // dst = 1 on the odd groups of g lanes (the b lanes), 0 on the even ones, for lane indices idx.
  __aicore__ inline void GroupParity(const LocalTensor<float> &dst, const LocalTensor<float> &idx,
                                     const LocalTensor<float> &tmp, const LocalTensor<int32_t> &whole, int64_t g) {
    const int32_t n = static_cast<int32_t>(pitch_);
    Adds(dst, idx, 0.5f, n);  // (i + 0.5) / g stays clear of integers, so floor is exact after rounding
    PipeBarrier<PIPE_V>();
    Muls(dst, dst, 1.0f / static_cast<float>(g), n);
    PipeBarrier<PIPE_V>();
    Cast(whole, dst, RoundMode::CAST_FLOOR, n);
    PipeBarrier<PIPE_V>();
    Cast(dst, whole, RoundMode::CAST_NONE, n);  // j = the group of lane i
    PipeBarrier<PIPE_V>();
    Muls(tmp, dst, 0.5f, n);
    PipeBarrier<PIPE_V>();
    Cast(whole, tmp, RoundMode::CAST_FLOOR, n);
    PipeBarrier<PIPE_V>();
    Cast(tmp, whole, RoundMode::CAST_NONE, n);
    PipeBarrier<PIPE_V>();
    Muls(tmp, tmp, -2.0f, n);
    PipeBarrier<PIPE_V>();
    Add(dst, dst, tmp, n);  // j - 2 * floor(j / 2)
    PipeBarrier<PIPE_V>();
  }

  // Lane indices `src` (fp32, clamped into the row) -> byte offsets of `unit`-byte elements in `table`, row
  // 0, then rows 1.. of the block by adding row * pitch * unit bytes, doubling the rows done each step.
  __aicore__ inline void StoreTable(const LocalTensor<uint32_t> &table, const LocalTensor<float> &src,
                                    int64_t unit = sizeof(float)) {
    const int32_t n = static_cast<int32_t>(pitch_);
    Mins(src, src, static_cast<float>(pitch_ - 1), n);  // pad lanes past the slice stay inside the row
    PipeBarrier<PIPE_V>();
    Muls(src, src, static_cast<float>(unit), n);
    PipeBarrier<PIPE_V>();
    const LocalTensor<int32_t> bytes = table.template ReinterpretCast<int32_t>();
    Cast(bytes, src, RoundMode::CAST_RINT, n);
    PipeBarrier<PIPE_V>();
    for (int64_t have = 1; have < tiling_.rowsPerLoop;) {
      const int64_t more = tiling_.rowsPerLoop - have < have ? tiling_.rowsPerLoop - have : have;
      Adds(bytes[have * pitch_], bytes, static_cast<int32_t>(have * pitch_ * unit),
           static_cast<int32_t>(more * pitch_));
      PipeBarrier<PIPE_V>();
      have += more;
    }
  }

  __aicore__ inline void BuildTables() {
    const int32_t n = static_cast<int32_t>(pitch_);
    const LocalTensor<float> scratch = scratchBuf_.Get<float>();
    const LocalTensor<float> idx = scratch, parity = scratch[pitch_], a = scratch[2 * pitch_];
    const LocalTensor<float> b = scratch[3 * pitch_];
    const LocalTensor<int32_t> whole = scratch[4 * pitch_].template ReinterpretCast<int32_t>();
    sign_ = signBuf_.Get<float>();
    if (!swap_) partner_ = partnerBuf_.Get<uint32_t>();
    CreateVecIndex(idx, 0.0f, n);
    PipeBarrier<PIPE_V>();
    GroupParity(parity, idx, a, whole, LaneGroup(kYLayout, len_));
    Muls(sign_, parity, 2.0f, n);  // -1 on a lanes, +1 on b lanes of the y layout
    PipeBarrier<PIPE_V>();
    Adds(sign_, sign_, -1.0f, n);
    if constexpr (!kReorders) {  // partner(i) = i + g on a lanes, i - g on b lanes
      const float g = static_cast<float>(LaneGroup(kXLayout, len_));
      Muls(a, parity, -2.0f * g, n);
      PipeBarrier<PIPE_V>();
      Adds(a, a, g, n);
      PipeBarrier<PIPE_V>();
      Add(b, idx, a, n);
      PipeBarrier<PIPE_V>();
      if (!swap_) StoreTable(partner_, b);
    } else {
      same_ = sameBuf_.Get<uint32_t>();
      const int64_t sameUnit = !kDyFloat && swap_ ? sizeof(TDy) : sizeof(float);  // see gather16 in Compute
      const float h = static_cast<float>(len_ / 2);
      if constexpr (!CONJ) {  // lane i of y (halves) from x (pairs): i < h: a_i at 2i, else b_{i-h} at 2(i-h)+1
        Adds(parity, idx, 1.0f - h, n);  // 1 from lane h on (reuses parity: the sign row is done)
        PipeBarrier<PIPE_V>();
        Maxs(parity, parity, 0.0f, n);
        PipeBarrier<PIPE_V>();
        Mins(parity, parity, 1.0f, n);
        PipeBarrier<PIPE_V>();
        Muls(a, idx, 2.0f, n);
        Muls(b, parity, 1.0f - 2.0f * h, n);
        PipeBarrier<PIPE_V>();
        Add(a, a, b, n);  // same(i) = 2i - (2h - 1) * [i >= h]
        PipeBarrier<PIPE_V>();
        Muls(b, parity, -2.0f, n);
        PipeBarrier<PIPE_V>();
        Add(b, b, a, n);
        PipeBarrier<PIPE_V>();
        Adds(b, b, 1.0f, n);  // partner(i) = same(i) + 1 - 2 * [i >= h]
        PipeBarrier<PIPE_V>();
      } else {  // lane i of x (pairs) from y (halves): pair k = i / 2 at k (a) and k + h (b)
        GroupParity(parity, idx, a, whole, 1);  // i mod 2
        Sub(a, idx, parity, n);
        PipeBarrier<PIPE_V>();
        Muls(a, a, 0.5f, n);  // k
        Muls(b, parity, h, n);
        PipeBarrier<PIPE_V>();
        Add(b, a, b, n);  // same(i) = k + h * (i mod 2); partner(i) = k + h - h * (i mod 2)
        Muls(parity, parity, -h, n);
        PipeBarrier<PIPE_V>();
        Add(a, a, parity, n);
        PipeBarrier<PIPE_V>();
        Adds(a, a, h, n);
        PipeBarrier<PIPE_V>();
        StoreTable(same_, b, sameUnit);
        if (!swap_) StoreTable(partner_, a);
        return;
      }
      StoreTable(same_, a, sameUnit);
      if (!swap_) StoreTable(partner_, b);
    }
  }

  // Several position channels: which lanes each channel's row gives, as one row of bits per channel (all ones
  // on its lanes, zeros elsewhere), copied in once and kept for the launch.
  __aicore__ inline void LoadLaneMasks(GM_ADDR laneMasks) {
    GlobalTensor<uint16_t> masksGm;
    masksGm.SetGlobalBuffer(reinterpret_cast<__gm__ uint16_t *>(laneMasks));
    pipe_.InitBuffer(maskQueue_, 1, tiling_.channels * pitch_ * sizeof(TCos));
    LocalTensor<uint16_t> masks = maskQueue_.template AllocTensor<uint16_t>();
    const DataCopyExtParams copy{static_cast<uint16_t>(tiling_.channels), static_cast<uint32_t>(len_ * sizeof(TCos)),
                                 0, RowGapBlocks<TCos>(), 0};
    DataCopyPad(masks, masksGm, copy, DataCopyPadExtParams<uint16_t>{});
    maskQueue_.EnQue(masks);
    laneMasks_ = maskQueue_.template DeQue<uint16_t>();  // waits for the copy
  }

  // ---- per block ----

  // 32-byte blocks between rows of a strided copy: rows of len_ elements laid pitch_ elements apart in UB.
  template <typename T>
  __aicore__ inline uint32_t RowGapBlocks() const {
    return static_cast<uint32_t>((pitch_ * sizeof(T) - AlignUp(len_ * sizeof(T), 32)) / 32);
  }

  // One copy each for cos and sin: `count` consecutive cos rows from `cosRow` into slots from `slot`.
  __aicore__ inline void CopyCosRows(const LocalTensor<TCos> &rows, int64_t slot, int64_t cosRow, int64_t count) {
    const DataCopyExtParams copy{static_cast<uint16_t>(count), static_cast<uint32_t>(len_ * sizeof(TCos)), 0,
                                 RowGapBlocks<TCos>(), 0};
    DataCopyPad(rows[slot * pitch_], cosGm_[cosRow * len_], copy, DataCopyPadExtParams<TCos>{});
    DataCopyPad(rows[sinAt_ + slot * pitch_], sinGm_[cosRow * len_], copy,
                DataCopyPadExtParams<TCos>{});
  }

  // Returns how many cos rows (slots) the block reads.
  __aicore__ inline int64_t CopyIn(int64_t row0, int64_t rows) {
    LocalTensor<TDy> slices = inQueue_.template AllocTensor<TDy>();
    const DataCopyExtParams strided{static_cast<uint16_t>(rows), static_cast<uint32_t>(len_ * sizeof(TDy)),
                                    static_cast<uint32_t>((tiling_.headDim - len_) * sizeof(TDy)),
                                    RowGapBlocks<TDy>(), 0};
    DataCopyPad(slices, dyGm_[row0 * tiling_.headDim + tiling_.start], strided, DataCopyPadExtParams<TDy>{});
    inQueue_.EnQue(slices);

    LocalTensor<TCos> cosRows = cosQueue_.template AllocTensor<TCos>();
    int64_t slots = 0;
    for (int64_t c = 0; c < tiling_.channels; ++c) {  // channel c's rows into the slots of its region
      const GlobalTensor<int64_t> channelPositions = positionsGm_[c * tiling_.channelStride];
      CosRuns runs(tiling_, channelPositions, row0, rows);
      for (int64_t slot, cosRow, count; runs.Next(slot, cosRow, count);) {
        CopyCosRows(cosRows, c * tiling_.cosRowsPerLoop + slot, cosRow, count);
      }
      slots = runs.Slots();
    }
    cosQueue_.EnQue(cosRows);
    return slots;
  }

  // dst rows [first, first + count), lanes [dstLane, dstLane + width) = the same rows of src, lanes from
  // srcLane, times lanes from factorLane of `factor`: one row for all (perRow false: a repeat stride of 0)
  // or the matching row of a block-shaped factor. Repeat-form Muls: a repeat per row and 64 lanes.
  __aicore__ inline void MulLanes(const LocalTensor<float> &dst, int64_t dstLane, const LocalTensor<float> &src,
                                  int64_t srcLane, const LocalTensor<float> &factor, int64_t factorLane, int64_t width,
                                  int64_t first, int64_t count, bool perRow) {
    const uint8_t stride = static_cast<uint8_t>(pitch_ * sizeof(float) / 32);
    const BinaryRepeatParams repeat{1, 1, 1, stride, stride, perRow ? stride : static_cast<uint8_t>(0)};
    for (int64_t lane = 0; lane < width; lane += kFloatsPerRepeat) {
      const uint64_t mask = width - lane < kFloatsPerRepeat ? width - lane : kFloatsPerRepeat;
      for (int64_t done = 0; done < count; done += kMaxRepeats) {
        const int64_t repeats = count - done < kMaxRepeats ? count - done : kMaxRepeats;
        const int64_t at = (first + done) * pitch_ + lane;
        Mul(dst[at + dstLane], src[at + srcLane], factor[(perRow ? at : lane) + factorLane], mask,
            static_cast<uint8_t>(repeats), repeat);
      }
    }
  }

  // dst = src times the block's cos (or signed sin) rows, over lanes [dstLane, dstLane + width) of dst and
  // from srcLane / slotLane of the others: one instruction for the block when every row has its own slot
  // (`perRow`), else one per run of rows sharing a slot (RunRows), its slot applied with stride 0.
  __aicore__ inline void MulRows(const LocalTensor<float> &dst, int64_t dstLane, const LocalTensor<float> &src,
                                 int64_t srcLane, const LocalTensor<float> &slots, int64_t slotLane, int64_t width,
                                 int64_t row0, int64_t rows, bool perRow) {
    if (perRow) {
      if (width == len_) {
        Mul(dst, src, slots, static_cast<int32_t>(rows * pitch_));
      } else {
        MulLanes(dst, dstLane, src, srcLane, slots, slotLane, width, 0, rows, true);
      }
      return;
    }
    int64_t slot = 0;
    for (int64_t r = 0; r < rows; ++slot) {
      const int64_t run = RunRows(tiling_, row0, r, rows);
      MulLanes(dst, dstLane, src, srcLane, slots[slot * pitch_], slotLane, width, r, run, false);
      r += run;
    }
  }

  __aicore__ inline void MulRows(const LocalTensor<float> &dst, const LocalTensor<float> &src,
                                 const LocalTensor<float> &slots, int64_t row0, int64_t rows, bool perRow) {
    MulRows(dst, 0, src, 0, slots, 0, len_, row0, rows, perRow);
  }

  // partner(src) * factor into dst when the y layout's groups are 8-lane aligned: groups 2k and 2k + 1 trade
  // places with offset Muls, no gather. The factor's lanes follow dst (forward) or src (backward).
  __aicore__ inline void MulSwapped(const LocalTensor<float> &dst, const LocalTensor<float> &src,
                                    const LocalTensor<float> &slots, int64_t row0, int64_t rows, bool perRow) {
    const int64_t g = LaneGroup(kYLayout, len_);
    for (int64_t group = 0; group < len_ / g; ++group) {
      const int64_t mate = group ^ 1;
      MulRows(dst, group * g, src, mate * g, slots, (CONJ ? mate : group) * g, g, row0, rows, perRow);
    }
  }

  template <typename T>
  __aicore__ inline LocalTensor<float> AsFloat(const LocalTensor<T> &src, TBuf<TPosition::VECCALC> &buf,
                                               int64_t count) {
    if constexpr (sizeof(T) == sizeof(float)) {
      return src.template ReinterpretCast<float>();
    } else {
      const LocalTensor<float> dst = buf.template Get<float>();
      Cast(dst, src, RoundMode::CAST_NONE, static_cast<uint32_t>(count));
      return dst;
    }
  }

  // What the steps of one block share: its rows, their elements (n, count) and whether 16-bit interleave-half
  // data is permuted in 16 bits (gather16).
  struct Block {
    int64_t row0, rows;
    bool perRow;
    int64_t n;
    uint32_t count;
    bool gather16;
  };

  // Several position channels: each channel's rows keep the lanes it gives (AND its mask: a repeat per slot,
  // the mask's repeat stride 0) and channel 0's rows collect them (OR), for cos and for sin. On the bits, so
  // exact in every dtype.
  __aicore__ inline void CombineChannels(const LocalTensor<TCos> &cosRows, int64_t slots) {
    const LocalTensor<uint16_t> bits = cosRows.template ReinterpretCast<uint16_t>();
    const int64_t words = pitch_ * sizeof(TCos) / sizeof(uint16_t), region = tiling_.cosRowsPerLoop * words;
    const uint8_t stride = static_cast<uint8_t>(pitch_ * sizeof(TCos) / 32);
    const BinaryRepeatParams repeat{1, 1, 1, stride, stride, 0};
    constexpr int64_t kWordsPerRepeat = 128;
    for (int64_t table = 0; table < 2; ++table) {  // cos, then sin
      const int64_t base = table * tiling_.channels * region;
      for (int64_t c = 0; c < tiling_.channels; ++c) {
        for (int64_t word = 0; word < words; word += kWordsPerRepeat) {
          const uint64_t mask = words - word < kWordsPerRepeat ? words - word : kWordsPerRepeat;
          for (int64_t done = 0; done < slots; done += kMaxRepeats) {
            const int64_t repeats = slots - done < kMaxRepeats ? slots - done : kMaxRepeats;
            const int64_t at = base + c * region + done * words + word;
            And(bits[at], bits[at], laneMasks_[c * words + word], mask, static_cast<uint8_t>(repeats), repeat);
          }
        }
      }
      PipeBarrier<PIPE_V>();
      for (int64_t c = 1; c < tiling_.channels; ++c) {
        Or(bits[base], bits[base], bits[base + c * region], static_cast<int32_t>(slots * words));
        PipeBarrier<PIPE_V>();
      }
    }
  }

  // sign * sin in fp32 for the block's cos/sin rows (sin follows cos in the queue's buffer).
  __aicore__ inline LocalTensor<float> SignedSin(const LocalTensor<TCos> &cosRows, int64_t slots) {
    const LocalTensor<float> sinF = sinFloatBuf_.Get<float>();
    LocalTensor<float> sinSrc = sinF;
    if constexpr (kCosFloat) {
      sinSrc = cosRows[sinAt_].template ReinterpretCast<float>();
    } else {
      Cast(sinF, cosRows[sinAt_], RoundMode::CAST_NONE,
           static_cast<uint32_t>(slots * pitch_));
      PipeBarrier<PIPE_V>();
    }
    MulLanes(sinF, 0, sinSrc, 0, sign_, 0, len_, 0, slots, false);
    PipeBarrier<PIPE_V>();
    return sinF;
  }

  // Forward: y = same(x) * cos + partner(x) * (sign * sin), in the y layout. Returns where the fp32 result is
  // (out itself for fp32 dy).
  __aicore__ inline LocalTensor<float> RotateForward(const LocalTensor<TDy> &out, const LocalTensor<float> &xf,
                                                     const LocalTensor<float> &cosF, const LocalTensor<float> &sinF,
                                                     const Block &b) {
    const LocalTensor<float> w1 = work1Buf_.Get<float>(), w2 = work2Buf_.Get<float>();
    LocalTensor<float> in = xf;  // x in the y layout
    if (b.gather16) {
      Cast(w2, out, RoundMode::CAST_NONE, b.count);
      in = w2;
    } else if constexpr (kReorders) {
      Gather(w2, xf, same_, 0, b.count);
      in = w2;
    }
    if (!swap_) Gather(w1, xf, partner_, 0, b.count);
    PipeBarrier<PIPE_V>();
    LocalTensor<float> outF;
    if constexpr (kDyFloat) outF = out.template ReinterpretCast<float>(); else outF = w2;
    if (swap_) {
      MulSwapped(w1, in, sinF, b.row0, b.rows, b.perRow);
    } else {
      MulRows(w1, w1, sinF, b.row0, b.rows, b.perRow);
    }
    if constexpr (!kDyFloat) PipeBarrier<PIPE_V>();  // outF may be `in`, read just above
    MulRows(outF, in, cosF, b.row0, b.rows, b.perRow);
    PipeBarrier<PIPE_V>();
    Add(outF, outF, w1, static_cast<int32_t>(b.n));
    return outF;
  }

  // Backward: dx = same(dy * cos) + partner(dy * sign * sin), in the x layout. Returns where the fp32 result
  // is; with gather16 the rounded result is already in out.
  __aicore__ inline LocalTensor<float> RotateBackward(const LocalTensor<TDy> &out, const LocalTensor<TDy> &slices,
                                                      const LocalTensor<float> &xf, const LocalTensor<float> &cosF,
                                                      const LocalTensor<float> &sinF, const Block &b) {
    const LocalTensor<float> w1 = work1Buf_.Get<float>(), w2 = work2Buf_.Get<float>();
    if (swap_) {
      MulSwapped(w1, xf, sinF, b.row0, b.rows, b.perRow);
    } else {
      MulRows(w1, xf, sinF, b.row0, b.rows, b.perRow);
    }
    if constexpr (!kDyFloat) PipeBarrier<PIPE_V>();  // xf may be w2, read just above
    MulRows(w2, xf, cosF, b.row0, b.rows, b.perRow);
    PipeBarrier<PIPE_V>();
    LocalTensor<float> outF;
    if constexpr (kDyFloat) {
      outF = out.template ReinterpretCast<float>();
    } else {
      outF = swap_ ? w2 : dyFloatBuf_.Get<float>();
    }
    if (swap_ && kReorders) {  // the sum in the y layout, then one gather into the x layout
      Add(w2, w2, w1, static_cast<int32_t>(b.n));
      PipeBarrier<PIPE_V>();
      if (b.gather16) {
        Cast(slices, w2, RoundMode::CAST_RINT, b.count);  // slices is free: rounded, then permuted into out
        PipeBarrier<PIPE_V>();
        Gather(out, slices, same_, 0, b.count);
      } else {
        Gather(outF, w2, same_, 0, b.count);
      }
    } else if (swap_) {
      Add(outF, w2, w1, static_cast<int32_t>(b.n));
    } else {
      if constexpr (kReorders) {
        Gather(outF, w2, same_, 0, b.count);
        PipeBarrier<PIPE_V>();
        Gather(w2, w1, partner_, 0, b.count);
      } else {
        Gather(outF, w1, partner_, 0, b.count);
      }
      PipeBarrier<PIPE_V>();
      Add(outF, outF, w2, static_cast<int32_t>(b.n));
    }
    return outF;
  }

  __aicore__ inline void Compute(int64_t row0, int64_t rows, int64_t slots) {
    LocalTensor<TDy> slices = inQueue_.template DeQue<TDy>();  // not const: FreeTensor takes a reference
    LocalTensor<TCos> cosRows = cosQueue_.template DeQue<TCos>();
    LocalTensor<TDy> out = outQueue_.template AllocTensor<TDy>();
    const int64_t n = rows * pitch_;
    const bool perRow = tiling_.cosNStride != 0;
    const uint32_t count = static_cast<uint32_t>(n);
    // 16-bit interleave-half with swapped groups: `same` permutes the 16-bit data, half the gather repeats
    // (before the cast forward, after the rounding backward: the same bits either way).
    const bool gather16 = !kDyFloat && kReorders && swap_;
    LocalTensor<float> xf;
    if (gather16 && !CONJ) {
      Gather(out, slices, same_, 0, count);  // out is scratch until the result lands in it
    } else {
      xf = AsFloat(slices, swap_ ? work2Buf_ : dyFloatBuf_, n);  // swapping: fp32 x in work2, updated in place
    }
    if (tiling_.channels > 1) CombineChannels(cosRows, slots);
    const LocalTensor<float> cosF = AsFloat(cosRows, cosFloatBuf_, slots * pitch_);
    const LocalTensor<float> sinF = SignedSin(cosRows, slots);
    const Block block{row0, rows, perRow, n, count, gather16};
    LocalTensor<float> outF;
    if constexpr (!CONJ) {
      outF = RotateForward(out, xf, cosF, sinF, block);
    } else {
      outF = RotateBackward(out, slices, xf, cosF, sinF, block);
    }
    if constexpr (!kDyFloat) {
      if (!(gather16 && CONJ)) {
        PipeBarrier<PIPE_V>();
        Cast(out, outF, RoundMode::CAST_RINT, count);  // round to nearest even, once
      }
    }
    outQueue_.EnQue(out);
    inQueue_.FreeTensor(slices);
    cosQueue_.FreeTensor(cosRows);
  }

  __aicore__ inline void CopyOut(int64_t row0, int64_t rows) {
    LocalTensor<TDy> out = outQueue_.template DeQue<TDy>();
    const DataCopyExtParams strided{static_cast<uint16_t>(rows), static_cast<uint32_t>(len_ * sizeof(TDy)),
                                    RowGapBlocks<TDy>(), static_cast<uint32_t>((tiling_.headDim - len_) * sizeof(TDy)),
                                    0};
    DataCopyPad(dyGm_[row0 * tiling_.headDim + tiling_.start], out, strided);
    outQueue_.FreeTensor(out);
  }

  Tiling tiling_;
  int64_t len_ = 0, pitch_ = 0;
  int64_t sinAt_ = 0;  // where sin's rows start in the cos queue's buffer (elements)
  bool swap_ = false;  // partner(v) by offset Muls (MulSwapped), not a gather
  TPipe pipe_;
  TQue<QuePosition::VECIN, 1> inQueue_, cosQueue_, maskQueue_;
  TQue<QuePosition::VECOUT, 1> outQueue_;
  TBuf<TPosition::VECCALC> work1Buf_, work2Buf_, partnerBuf_, sameBuf_, dyFloatBuf_, cosFloatBuf_, sinFloatBuf_;
  TBuf<TPosition::VECCALC> signBuf_, scratchBuf_;
  GlobalTensor<TDy> dyGm_;
  GlobalTensor<TCos> cosGm_, sinGm_;
  GlobalTensor<int64_t> positionsGm_;  // gathering by position
  LocalTensor<uint32_t> partner_, same_;
  LocalTensor<uint16_t> laneMasks_;  // several position channels: LoadLaneMasks
  LocalTensor<float> sign_;
};

}  // namespace ms_rotary_ascend

// The 950's register-based kernel: compiled for __NPU_ARCH__ 3510, and on the host shim (no __NPU_ARCH__).
#if !defined(__NPU_ARCH__) || __NPU_ARCH__ == 3510
#include "rotary_kernel_arch35.h"
#define MS_ROTARY_CASE_ARCH35(conj, mode, dyi, TDy, cosi, TCos)                                              \
  if (TILING_KEY_IS(ms_rotary::kRegisterPathKeys + MS_ROTARY_KEY(mode, conj, dyi, cosi))) {                  \
    ms_rotary_ascend::Blocks::Run<ms_rotary_ascend::arch35::PartialRotaryKernel<mode, conj, TDy, TCos>>(    \
        dy, kernelK, cos, sin, kernelPositions, kernelLaneMasks, kernelTiling);                               \
  }
#else
#define MS_ROTARY_CASE_ARCH35(conj, mode, dyi, TDy, cosi, TCos)
#endif

// The 36 (mode, dy dtype, cos dtype) instances of one direction, and on the 950 their 36 register-based
// twins; keys as in op_host/rotary_tiling.cpp.
#define MS_ROTARY_KEY(mode, conj, dyi, cosi) ms_rotary::tiling_key(mode, conj, dyi, cosi)
#define MS_ROTARY_CASE(conj, mode, dyi, TDy, cosi, TCos)                                                     \
  if (TILING_KEY_IS(MS_ROTARY_KEY(mode, conj, dyi, cosi))) {                                                  \
    ms_rotary_ascend::Blocks::Run<ms_rotary_ascend::PartialRotaryKernel<mode, conj, TDy, TCos>>(            \
        dy, kernelK, cos, sin, kernelPositions, kernelLaneMasks, kernelTiling);                               \
  }                                                                                                           \
  MS_ROTARY_CASE_ARCH35(conj, mode, dyi, TDy, cosi, TCos)
#define MS_ROTARY_CASE_COS(conj, mode, dyi, TDy)                                                              \
  MS_ROTARY_CASE(conj, mode, dyi, TDy, 0, float)                                                              \
  MS_ROTARY_CASE(conj, mode, dyi, TDy, 1, half)                                                               \
  MS_ROTARY_CASE(conj, mode, dyi, TDy, 2, bfloat16_t)
#define MS_ROTARY_CASE_DY(conj, mode)                                                                         \
  MS_ROTARY_CASE_COS(conj, mode, 0, float)                                                                    \
  MS_ROTARY_CASE_COS(conj, mode, 1, half)                                                                     \
  MS_ROTARY_CASE_COS(conj, mode, 2, bfloat16_t)
// Vector cores only (KERNEL_TYPE_AIV_ONLY): a launch then starts no cube cores, whose start-up would add to
// the head cost of this pure vector op (asc-devkit guide, 设置合适的核数和算子Kernel类型).
// k: the q+k ops' second tensor; positions, laneMasks: the inputs of an op that gathers cos/sin rows by
// position; else nullptr. (Not `const GM_ADDR`: GM_ADDR is a macro in CANN, which would make the bytes const,
// not the pointer.)
#define MS_ROTARY_DISPATCH(conj, generatedTiling, k, positions, laneMasks)                                    \
  KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);                                                             \
  const ms_rotary_ascend::Tiling kernelTiling = ms_rotary_ascend::ReadTiling(generatedTiling);                \
  GM_ADDR kernelK = k;                                                                                        \
  GM_ADDR kernelPositions = positions;                                                                        \
  GM_ADDR kernelLaneMasks = laneMasks;                                                                        \
  MS_ROTARY_CASE_DY(conj, 0)                                                                                  \
  MS_ROTARY_CASE_DY(conj, 1)                                                                                  \
  MS_ROTARY_CASE_DY(conj, 2)                                                                                  \
  MS_ROTARY_CASE_DY(conj, 3)

#endif  // MS_ROTARY_ASCEND_ROTARY_KERNEL_H_
