// Ascend C kernel of partial rotary, forward and backward, all modes and dtypes: the same
// split -> rotate -> merge scheme as kernel/cpu/rotary_kernel.cc, on vector cores.
// Each core takes a contiguous range of B*S*N rows; a loop moves rowsPerLoop row slices from dy into
// the unified buffer with one strided copy (only the slice's bytes), rotates them in fp32 and writes
// them back with one strided copy. Lane layouts are applied with Gather through byte-offset tables.
#ifndef MS_ROTARY_ASCEND_ROTARY_KERNEL_H_
#define MS_ROTARY_ASCEND_ROTARY_KERNEL_H_

#include "kernel_operator.h"
#include "rotary_rules.h"  // kernel/common: the tiling key

namespace ms_rotary_ascend {
using namespace AscendC;

constexpr int32_t kAlignFloats = 8;  // 32 bytes of fp32
constexpr int32_t kHalves = 0, kPairs = 1, kQuarters = 2;

__aicore__ inline int64_t AlignUp(int64_t value, int64_t to) { return (value + to - 1) / to * to; }

// Lane of pair k's a (second=false) or b element in a slice of `len` lanes laid out as `layout`.
__aicore__ inline int64_t LaneOf(int32_t layout, int64_t k, bool second, int64_t len) {
  const int64_t half = len / 2, quarter = len / 4;
  if (layout == kHalves) return k + (second ? half : 0);
  if (layout == kPairs) return 2 * k + (second ? 1 : 0);
  const int64_t base = k < quarter ? k : k + quarter;  // quarters: halves of each half
  return base + (second ? quarter : 0);
}

template <int32_t MODE, bool CONJ, typename TDy, typename TCos>
class PartialRotaryKernel {
 public:
  static constexpr int32_t kXLayout = MODE == 0 ? kHalves : MODE == 2 ? kQuarters : kPairs;
  static constexpr int32_t kYLayout = MODE == 1 ? kPairs : MODE == 2 ? kQuarters : kHalves;
  static constexpr int32_t kInLayout = CONJ ? kYLayout : kXLayout;
  static constexpr int32_t kOutLayout = CONJ ? kXLayout : kYLayout;

  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR cos, GM_ADDR sin, const optiling::PartialRotaryTilingData &t) {
    tiling_ = t;
    const int64_t core = GetBlockIdx();
    rowBegin_ = core * t.rowsPerCore + (core < t.bigCores ? core : t.bigCores);
    rowCount_ = t.rowsPerCore + (core < t.bigCores ? 1 : 0);
    len_ = t.len;
    half_ = len_ / 2;
    halfPitch_ = AlignUp(half_, kAlignFloats);
    dyPitch_ = AlignUp(len_ * sizeof(TDy), 32) / sizeof(TDy);
    cosPitch_ = AlignUp(len_ * sizeof(TCos), 32) / sizeof(TCos);
    dyGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TDy *>(dy));
    cosGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TCos *>(cos));
    sinGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TCos *>(sin));
    const int64_t rows = t.rowsPerLoop;
    pipe_.InitBuffer(inQueue_, 1, rows * dyPitch_ * sizeof(TDy));
    pipe_.InitBuffer(outQueue_, 1, rows * dyPitch_ * sizeof(TDy));
    pipe_.InitBuffer(cosBuf_, 2 * rows * cosPitch_ * sizeof(TCos));
    pipe_.InitBuffer(workBuf_, 5 * AlignUp(2 * halfPitch_, kAlignFloats) * sizeof(float));
    pipe_.InitBuffer(tableBuf_, 3 * AlignUp(2 * halfPitch_, kAlignFloats) * sizeof(uint32_t));
    BuildTables();
  }

  __aicore__ inline void Process() {
    for (int64_t done = 0; done < rowCount_; done += tiling_.rowsPerLoop) {
      const int64_t rows = rowCount_ - done < tiling_.rowsPerLoop ? rowCount_ - done : tiling_.rowsPerLoop;
      CopyIn(rowBegin_ + done, rows);
      Compute(rowBegin_ + done, rows);
      CopyOut(rowBegin_ + done, rows);
    }
  }

 private:
  // Byte-offset tables: split in-layout -> [a | pad | b]; split y-layout (cos/sin) -> [a | pad | b];
  // merge [a | pad | b] -> out-layout. Pad entries point at lane 0 and are never used.
  __aicore__ inline void BuildTables() {
    const int64_t span = AlignUp(2 * halfPitch_, kAlignFloats);
    splitIn_ = tableBuf_.Get<uint32_t>();
    splitCos_ = splitIn_[span];
    merge_ = splitIn_[2 * span];
    for (int64_t i = 0; i < span; ++i) {
      splitIn_.SetValue(i, 0);
      splitCos_.SetValue(i, 0);
    }
    for (int64_t k = 0; k < half_; ++k) {
      for (int32_t second = 0; second < 2; ++second) {
        const int64_t slot = k + (second ? halfPitch_ : 0);
        splitIn_.SetValue(slot, static_cast<uint32_t>(LaneOf(kInLayout, k, second, len_) * sizeof(float)));
        splitCos_.SetValue(slot, static_cast<uint32_t>(LaneOf(kYLayout, k, second, len_) * sizeof(float)));
        merge_.SetValue(LaneOf(kOutLayout, k, second, len_), static_cast<uint32_t>(slot * sizeof(float)));
      }
    }
  }

  __aicore__ inline void CopyIn(int64_t row0, int64_t rows) {
    LocalTensor<TDy> slices = inQueue_.template AllocTensor<TDy>();
    const DataCopyExtParams strided{static_cast<uint16_t>(rows), static_cast<uint32_t>(len_ * sizeof(TDy)),
                                    static_cast<uint32_t>((tiling_.headDim - len_) * sizeof(TDy)), 0, 0};
    DataCopyPad(slices, dyGm_[row0 * tiling_.headDim + tiling_.start], strided, DataCopyPadExtParams<TDy>{});
    inQueue_.EnQue(slices);
  }

  __aicore__ inline int64_t CosRow(int64_t row) const {
    const int64_t n = row % tiling_.heads, s = (row / tiling_.heads) % tiling_.seq;
    const int64_t b = row / (tiling_.heads * tiling_.seq);
    return b * tiling_.cosBStride + s * tiling_.cosSStride + n * tiling_.cosNStride;
  }

  __aicore__ inline void Compute(int64_t row0, int64_t rows) {
    LocalTensor<TDy> slices = inQueue_.template DeQue<TDy>();
    LocalTensor<TDy> out = outQueue_.template AllocTensor<TDy>();
    LocalTensor<TCos> cosRaw = cosBuf_.Get<TCos>();
    LocalTensor<TCos> sinRaw = cosRaw[tiling_.rowsPerLoop * cosPitch_];
    const int64_t span = AlignUp(2 * halfPitch_, kAlignFloats);
    LocalTensor<float> work = workBuf_.Get<float>();
    LocalTensor<float> xf = work, ab = work[span], cs = work[2 * span], sn = work[3 * span], res = work[4 * span];
    const DataCopyExtParams oneRow{1, static_cast<uint32_t>(len_ * sizeof(TCos)), 0, 0, 0};
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t cosRow = CosRow(row0 + r);
      DataCopyPad(cosRaw[r * cosPitch_], cosGm_[cosRow * len_], oneRow, DataCopyPadExtParams<TCos>{});
      DataCopyPad(sinRaw[r * cosPitch_], sinGm_[cosRow * len_], oneRow, DataCopyPadExtParams<TCos>{});
    }
    SetFlag<HardEvent::MTE2_V>(EVENT_ID0);
    WaitFlag<HardEvent::MTE2_V>(EVENT_ID0);
    for (int64_t r = 0; r < rows; ++r) {
      Gather(ab, AsFloat(slices[r * dyPitch_], xf), splitIn_, 0, static_cast<uint32_t>(span));
      PipeBarrier<PIPE_V>();
      Gather(cs, AsFloat(cosRaw[r * cosPitch_], xf), splitCos_, 0, static_cast<uint32_t>(span));
      PipeBarrier<PIPE_V>();
      Gather(sn, AsFloat(sinRaw[r * cosPitch_], xf), splitCos_, 0, static_cast<uint32_t>(span));
      PipeBarrier<PIPE_V>();
      Rotate(ab, cs, sn, res, xf);
      PipeBarrier<PIPE_V>();
      StoreMerged(out[r * dyPitch_], res, xf);
      PipeBarrier<PIPE_V>();
    }
    outQueue_.EnQue(out);
    inQueue_.FreeTensor(slices);
  }

  // res = [oa | pad | ob] from ab = [a | pad | b], cs = [ca | pad | cb], sn = [sa | pad | sb]; tmp is scratch.
  __aicore__ inline void Rotate(const LocalTensor<float> &ab, const LocalTensor<float> &cs,
                                const LocalTensor<float> &sn, const LocalTensor<float> &res,
                                const LocalTensor<float> &tmp) {
    const LocalTensor<float> a = ab, b = ab[halfPitch_], ca = cs, cb = cs[halfPitch_];
    const LocalTensor<float> sa = sn, sb = sn[halfPitch_], oa = res, ob = res[halfPitch_];
    const uint32_t n = static_cast<uint32_t>(half_);
    if (CONJ) {  // oa = a*ca + b*sb; ob = b*cb - a*sa
      Mul(oa, a, ca, n);
      Mul(tmp, b, sb, n);
      PipeBarrier<PIPE_V>();
      Add(oa, oa, tmp, n);
      Mul(ob, b, cb, n);
      Mul(tmp, a, sa, n);
      PipeBarrier<PIPE_V>();
      Sub(ob, ob, tmp, n);
    } else {  // oa = a*ca - b*sa; ob = b*cb + a*sb
      Mul(oa, a, ca, n);
      Mul(tmp, b, sa, n);
      PipeBarrier<PIPE_V>();
      Sub(oa, oa, tmp, n);
      Mul(ob, b, cb, n);
      Mul(tmp, a, sb, n);
      PipeBarrier<PIPE_V>();
      Add(ob, ob, tmp, n);
    }
  }

  // fp32 lanes of a row: the row itself when it is fp32 (no copy, -0.0 kept), else cast into scratch.
  template <typename T>
  __aicore__ inline LocalTensor<float> AsFloat(const LocalTensor<T> &row, const LocalTensor<float> &scratch) {
    if constexpr (sizeof(T) == sizeof(float)) {
      return row.template ReinterpretCast<float>();
    } else {
      Cast(scratch, row, RoundMode::CAST_NONE, static_cast<uint32_t>(len_));
      PipeBarrier<PIPE_V>();
      return scratch;
    }
  }

  // res = [oa | pad | ob] -> the row in the output layout, rounded once to TDy.
  __aicore__ inline void StoreMerged(const LocalTensor<TDy> &row, const LocalTensor<float> &res,
                                     const LocalTensor<float> &scratch) {
    if constexpr (sizeof(TDy) == sizeof(float)) {
      Gather(row.template ReinterpretCast<float>(), res, merge_, 0, static_cast<uint32_t>(len_));
    } else {
      Gather(scratch, res, merge_, 0, static_cast<uint32_t>(len_));
      PipeBarrier<PIPE_V>();
      Cast(row, scratch, RoundMode::CAST_RINT, static_cast<uint32_t>(len_));  // round to nearest even
    }
  }

  __aicore__ inline void CopyOut(int64_t row0, int64_t rows) {
    LocalTensor<TDy> out = outQueue_.template DeQue<TDy>();
    const DataCopyExtParams strided{static_cast<uint16_t>(rows), static_cast<uint32_t>(len_ * sizeof(TDy)), 0,
                                    static_cast<uint32_t>((tiling_.headDim - len_) * sizeof(TDy)), 0};
    DataCopyPad(dyGm_[row0 * tiling_.headDim + tiling_.start], out, strided);
    outQueue_.FreeTensor(out);
  }

  optiling::PartialRotaryTilingData tiling_;
  int64_t rowBegin_ = 0, rowCount_ = 0, len_ = 0, half_ = 0, halfPitch_ = 0;
  int64_t dyPitch_ = 0, cosPitch_ = 0;
  TPipe pipe_;
  TQue<QuePosition::VECIN, 1> inQueue_;
  TQue<QuePosition::VECOUT, 1> outQueue_;
  TBuf<TPosition::VECCALC> cosBuf_, workBuf_, tableBuf_;
  GlobalTensor<TDy> dyGm_;
  GlobalTensor<TCos> cosGm_, sinGm_;
  LocalTensor<uint32_t> splitIn_, splitCos_, merge_;
};

// Runs the kernel instance a tiling key names; CONJ is fixed by the entry point.
template <bool CONJ, int32_t MODE, typename TDy, typename TCos>
__aicore__ inline void RunRotary(GM_ADDR dy, GM_ADDR cos, GM_ADDR sin, const optiling::PartialRotaryTilingData &t) {
  if (t.rows == 0 || GetBlockIdx() >= t.usedCores) return;  // empty work, or an idle core
  PartialRotaryKernel<MODE, CONJ, TDy, TCos> kernel;
  kernel.Init(dy, cos, sin, t);
  kernel.Process();
}

}  // namespace ms_rotary_ascend

// The 36 (mode, dy dtype, cos dtype) instances of one direction; keys as in op_host/rotary_tiling.cpp.
#define MS_ROTARY_KEY(mode, conj, dyi, cosi) ms_rotary::tiling_key(mode, conj, dyi, cosi)
#define MS_ROTARY_CASE_COS(conj, mode, dyi, TDy)                                                              \
  if (TILING_KEY_IS(MS_ROTARY_KEY(mode, conj, dyi, 0))) {                                                     \
    ms_rotary_ascend::RunRotary<conj, mode, TDy, float>(dy, cos, sin, tilingData);                            \
  } else if (TILING_KEY_IS(MS_ROTARY_KEY(mode, conj, dyi, 1))) {                                              \
    ms_rotary_ascend::RunRotary<conj, mode, TDy, half>(dy, cos, sin, tilingData);                             \
  } else if (TILING_KEY_IS(MS_ROTARY_KEY(mode, conj, dyi, 2))) {                                              \
    ms_rotary_ascend::RunRotary<conj, mode, TDy, bfloat16_t>(dy, cos, sin, tilingData);                       \
  }
#define MS_ROTARY_CASE_DY(conj, mode)           \
  MS_ROTARY_CASE_COS(conj, mode, 0, float)      \
  MS_ROTARY_CASE_COS(conj, mode, 1, half)       \
  MS_ROTARY_CASE_COS(conj, mode, 2, bfloat16_t)
#define MS_ROTARY_DISPATCH(conj) \
  MS_ROTARY_CASE_DY(conj, 0)     \
  MS_ROTARY_CASE_DY(conj, 1)     \
  MS_ROTARY_CASE_DY(conj, 2)     \
  MS_ROTARY_CASE_DY(conj, 3)

#endif  // MS_ROTARY_ASCEND_ROTARY_KERNEL_H_
