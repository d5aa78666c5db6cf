// Ascend C kernel of partial rotary for the Ascend 950 (arch35, __NPU_ARCH__ 3510), forward and backward, all
// modes and dtypes, for slices whose segments fit registers (ms_rotary::fits_register_path); other slices take
// rotary_kernel.h, which the 950 runs too. Register-based: vector functions (Reg API, started by asc_vf_call)
// load dy once, rotate in fp32 registers and store once; no gather tables, no fp32 work buffers.
//
// A row's slice holds pairs (a, b); a segment is the slice, or each half of it for mode 2 (quarters: groups
// a0 b0 a1 b1), and holds `pairs` pairs. A block of rows sits in the unified buffer as
//   split layouts (halves, quarters): one region per group, holding that group of every row back to back, so
//     the a (or b) elements of a segment over the block's rows are one run: full registers even for short rows;
//   interleaved pairs: the rows back to back; two loads and a DeInterleave split 64 pairs into a and b (for
//     16-bit data one load and two widening casts, one per half of each 32-bit lane).
// One strided DataCopyPad per region moves a block in (MTE2) and out (MTE3), the slice only. Per 64 pairs:
//   forward   ya = xa * ca - xb * sa,  yb = xb * cb + xa * sb    x in the x layout; y, cos, sin in the y layout
//   backward  xa = ya * ca + yb * sb,  xb = yb * cb - ya * sa
// the same products and sums as rotary_kernel.h (partner and sign folded in), rounded once on the store.
// cos/sin rows shared by a run of rows (heads under [1, S, 1, L]) are loaded into registers once per run;
// segments of 16 or 32 pairs first have each cos row repeated across a 64-lane register in the buffer.
#ifndef MS_ROTARY_ASCEND_ROTARY_KERNEL_ARCH35_H_
#define MS_ROTARY_ASCEND_ROTARY_KERNEL_ARCH35_H_

#include "rotary_rows.h"

namespace ms_rotary_ascend {
namespace arch35 {
using namespace AscendC;

constexpr uint32_t kLanes = 64;  // fp32 lanes of one 256-byte register

// 16-bit values travel in the low half of each 32-bit lane: the unpacking load puts them there and the
// packing store takes them from there; narrowing rounds to nearest even, as the CPU kernel does. Casts with
// RegLayout::ONE use the high halves: the odd values of 128 16-bit values as they lie in memory.
constexpr Reg::CastTrait kWiden = {Reg::RegLayout::ZERO, Reg::SatMode::UNKNOWN, Reg::MaskMergeMode::ZEROING,
                                   RoundMode::UNKNOWN};
constexpr Reg::CastTrait kWidenOdd = {Reg::RegLayout::ONE, Reg::SatMode::UNKNOWN, Reg::MaskMergeMode::ZEROING,
                                      RoundMode::UNKNOWN};
constexpr Reg::CastTrait kNarrow = {Reg::RegLayout::ZERO, Reg::SatMode::NO_SAT, Reg::MaskMergeMode::ZEROING,
                                    RoundMode::CAST_RINT};
constexpr Reg::CastTrait kNarrowOdd = {Reg::RegLayout::ONE, Reg::SatMode::NO_SAT, Reg::MaskMergeMode::ZEROING,
                                       RoundMode::CAST_RINT};

// Elements one row of a layout keeps in each of its regions, and how many regions.
constexpr int64_t RowUnit(int32_t layout, int64_t len, int64_t pairs) {
  return layout == ms_rotary::kPairs ? len : pairs;
}
constexpr int64_t Regions(int32_t layout, int32_t mode) { return layout == ms_rotary::kPairs ? 1 : mode == 2 ? 4 : 2; }

template <typename T>
__simd_callee__ inline void LoadFloat(Reg::RegTensor<float> &dst, __ubuf__ T *src, Reg::MaskReg &all) {
  if constexpr (sizeof(T) == sizeof(float)) {
    Reg::LoadAlign(dst, src);
  } else {
    Reg::RegTensor<T> narrow;
    Reg::LoadAlign<T, Reg::LoadDist::DIST_UNPACK_B16>(narrow, src);
    Reg::Cast<float, T, kWiden>(dst, narrow, all);
  }
}

template <typename T>
__simd_callee__ inline void StoreFloat(__ubuf__ T *dst, Reg::RegTensor<float> &src, Reg::MaskReg &mask) {
  if constexpr (sizeof(T) == sizeof(float)) {
    Reg::StoreAlign(dst, src, mask);
  } else {
    Reg::RegTensor<T> narrow;
    Reg::Cast<T, float, kNarrow>(narrow, src, mask);
    Reg::StoreAlign<T, Reg::StoreDist::DIST_PACK_B32>(dst, narrow, mask);
  }
}

// The a and b elements of pairs [p, p + 64) of a segment, in fp32: from its two regions (split layouts) or
// from the interleaved pairs at element 2p (16-bit: one register of 64 pairs, its even and odd values
// widened apart).
template <int32_t LAYOUT, typename T>
__simd_callee__ inline void LoadPairs(Reg::RegTensor<float> &a, Reg::RegTensor<float> &b, __ubuf__ T *aBase,
                                      __ubuf__ T *bBase, uint32_t p, Reg::MaskReg &all) {
  if constexpr (LAYOUT == ms_rotary::kPairs && sizeof(T) != sizeof(float)) {
    Reg::RegTensor<T> pairs;
    Reg::LoadAlign(pairs, aBase + 2 * p);
    Reg::Cast<float, T, kWiden>(a, pairs, all);
    Reg::Cast<float, T, kWidenOdd>(b, pairs, all);
  } else if constexpr (LAYOUT == ms_rotary::kPairs) {
    Reg::RegTensor<float> lo, hi;
    LoadFloat(lo, aBase + 2 * p, all);
    LoadFloat(hi, aBase + 2 * p + kLanes, all);
    Reg::DeInterleave(a, b, lo, hi);
  } else {
    LoadFloat(a, aBase + p, all);
    LoadFloat(b, bBase + p, all);
  }
}

// Stores the first `count` pairs of a and b as pairs [p, p + count) of a segment (16-bit interleaved: a
// narrowed into the low halves, b into the high halves of another register, the two or-ed: one store).
template <int32_t LAYOUT, typename T>
__simd_callee__ inline void StorePairs(__ubuf__ T *aBase, __ubuf__ T *bBase, uint32_t p, Reg::RegTensor<float> &a,
                                       Reg::RegTensor<float> &b, uint32_t count, Reg::MaskReg &all) {
  if constexpr (LAYOUT == ms_rotary::kPairs && sizeof(T) != sizeof(float)) {
    Reg::RegTensor<T> even, odd;
    Reg::Cast<T, float, kNarrow>(even, a, all);  // the other halves are zeroed
    Reg::Cast<T, float, kNarrowOdd>(odd, b, all);
    Reg::RegTensor<uint16_t> &bits = reinterpret_cast<Reg::RegTensor<uint16_t> &>(even);
    Reg::Or(bits, bits, reinterpret_cast<Reg::RegTensor<uint16_t> &>(odd), all);
    uint32_t elements = 2 * count;
    Reg::MaskReg mask = Reg::UpdateMask<T>(elements);
    Reg::StoreAlign(aBase + 2 * p, even, mask);
  } else if constexpr (LAYOUT == ms_rotary::kPairs) {
    Reg::RegTensor<float> lo, hi;
    Reg::Interleave(lo, hi, a, b);
    uint32_t elements = 2 * count;
    Reg::MaskReg loMask = Reg::UpdateMask<float>(elements);
    Reg::MaskReg hiMask = Reg::UpdateMask<float>(elements);
    StoreFloat(aBase + 2 * p, lo, loMask);
    StoreFloat(aBase + 2 * p + kLanes, hi, hiMask);
  } else {
    Reg::MaskReg mask = Reg::UpdateMask<float>(count);
    StoreFloat(aBase + p, a, mask);
    StoreFloat(bBase + p, b, mask);
  }
}

// One register of pairs: (oa, ob) from (ia, ib) and the cos/sin a and b lanes.
template <bool CONJ>
__simd_callee__ inline void Rotate(Reg::RegTensor<float> &oa, Reg::RegTensor<float> &ob, Reg::RegTensor<float> &ia,
                                   Reg::RegTensor<float> &ib, Reg::RegTensor<float> &ca, Reg::RegTensor<float> &cb,
                                   Reg::RegTensor<float> &sa, Reg::RegTensor<float> &sb, Reg::MaskReg &all) {
  Reg::RegTensor<float> p0, p1;
  Reg::Mul(p0, ia, ca, all);
  if constexpr (!CONJ) {  // forward: oa = xa * ca - xb * sa, ob = xb * cb + xa * sb
    Reg::Mul(p1, ib, sa, all);
    Reg::Sub(oa, p0, p1, all);
    Reg::Mul(p0, ib, cb, all);
    Reg::Mul(p1, ia, sb, all);
    Reg::Add(ob, p0, p1, all);
  } else {  // backward: oa = ya * ca + yb * sb, ob = yb * cb - ya * sa
    Reg::Mul(p1, ib, sb, all);
    Reg::Add(oa, p0, p1, all);
    Reg::Mul(p0, ib, cb, all);
    Reg::Mul(p1, ia, sa, all);
    Reg::Sub(ob, p0, p1, all);
  }
}

// Rotates `pairs` pairs of each segment of a run of rows: src and dst point at the run's first row, dyRegion
// elements between regions of a split layout, cosRegion between cos (and sin) regions. cos/sin: one row for
// the run, loaded once per 64 lanes of a segment (cosPerRow 0), or a row per row, read like dy (1).
template <int32_t MODE, bool CONJ, typename TDy, typename TCos>
__simd_vf__ inline void RotateVF(__ubuf__ TDy *dst, __ubuf__ TDy *src, __ubuf__ TCos *cos, __ubuf__ TCos *sin,
                                 uint32_t pairs, uint32_t segmentPairs, uint32_t dyRegion, uint32_t cosRegion,
                                 uint32_t cosPerRow) {
  constexpr int32_t kX = ms_rotary::kModeLayouts[MODE].x, kY = ms_rotary::kModeLayouts[MODE].y;
  constexpr int32_t kIn = CONJ ? kY : kX, kOut = CONJ ? kX : kY;
  constexpr uint16_t kSegments = MODE == 2 ? 2 : 1;
  Reg::MaskReg all = Reg::CreateMask<float, Reg::MaskPattern::ALL>();
  // A segment of 64 pairs or more: a register per 64 pairs of a row, rows `segmentPairs` apart; shorter:
  // registers over consecutive rows.
  const uint32_t step = segmentPairs > kLanes ? segmentPairs : kLanes;
  const uint16_t chunks = static_cast<uint16_t>(segmentPairs > kLanes ? segmentPairs / kLanes : 1);
  for (uint16_t s = 0; s < kSegments; ++s) {
    __ubuf__ TDy *ia = src + 2 * s * dyRegion, *ib = ia + dyRegion;
    __ubuf__ TDy *oa = dst + 2 * s * dyRegion, *ob = oa + dyRegion;
    __ubuf__ TCos *ca = cos + 2 * s * cosRegion, *cb = ca + cosRegion;
    __ubuf__ TCos *sa = sin + 2 * s * cosRegion, *sb = sa + cosRegion;
    for (uint16_t j = 0; j < chunks; ++j) {
      const uint32_t first = j * kLanes;
      const uint16_t count = static_cast<uint16_t>((pairs - first + step - 1) / step);
      Reg::RegTensor<float> xa, xb, ya, yb, cosA, cosB, sinA, sinB;
      if (cosPerRow == 0) {
        LoadPairs<kY>(cosA, cosB, ca, cb, first, all);
        LoadPairs<kY>(sinA, sinB, sa, sb, first, all);
        for (uint16_t i = 0; i < count; ++i) {
          const uint32_t p = first + i * step;
          LoadPairs<kIn>(xa, xb, ia, ib, p, all);
          Rotate<CONJ>(ya, yb, xa, xb, cosA, cosB, sinA, sinB, all);
          StorePairs<kOut>(oa, ob, p, ya, yb, pairs - p < kLanes ? pairs - p : kLanes, all);
        }
      } else {
        for (uint16_t i = 0; i < count; ++i) {
          const uint32_t p = first + i * step;
          LoadPairs<kY>(cosA, cosB, ca, cb, p, all);
          LoadPairs<kY>(sinA, sinB, sa, sb, p, all);
          LoadPairs<kIn>(xa, xb, ia, ib, p, all);
          Rotate<CONJ>(ya, yb, xa, xb, cosA, cosB, sinA, sinB, all);
          StorePairs<kOut>(oa, ob, p, ya, yb, pairs - p < kLanes ? pairs - p : kLanes, all);
        }
      }
    }
  }
}

// Repeats the first `unit` elements of each of `slots` slots (`slotStride` apart, in each of `regions` regions
// `region` apart) over the slot's first `copies` * unit elements: a cos row of 16 or 32 pairs per segment
// then fills a 64-lane register.
template <typename TCos>
__simd_vf__ inline void RepeatSlotsVF(__ubuf__ TCos *base, uint16_t regions, uint32_t region, uint16_t slots,
                                      uint32_t slotStride, uint32_t unit, uint16_t copies) {
  Reg::RegTensor<TCos> row;
  for (uint16_t r = 0; r < regions; ++r) {
    for (uint16_t t = 0; t < slots; ++t) {
      __ubuf__ TCos *slot = base + r * region + t * slotStride;
      Reg::LoadAlign(row, slot);
      for (uint16_t k = 1; k < copies; ++k) {
        uint32_t elements = unit;
        Reg::MaskReg mask = Reg::UpdateMask<TCos>(elements);
        Reg::StoreAlign(slot + k * unit, row, mask);
      }
    }
  }
}

template <int32_t MODE, bool CONJ, typename TDy, typename TCos>
class PartialRotaryKernel {
 public:
  static constexpr int32_t kXLayout = ms_rotary::kModeLayouts[MODE].x;
  static constexpr int32_t kYLayout = ms_rotary::kModeLayouts[MODE].y;
  static constexpr int32_t kInLayout = CONJ ? kYLayout : kXLayout, kOutLayout = CONJ ? kXLayout : kYLayout;

  // laneMasks: unused (the tiling gives several position channels to the memory kernel).
  __aicore__ inline void Init(GM_ADDR dy, GM_ADDR cos, GM_ADDR sin, GM_ADDR positions, GM_ADDR /*laneMasks*/,
                              const Tiling &t) {
    tiling_ = t;
    len_ = t.len;
    pairs_ = ms_rotary::register_segment_pairs(MODE, len_);
    cosPerRow_ = CosGroupRows(t) == 1;
    dyRegion_ = t.rowsPerLoop * pairs_;  // split layouts; the pairs layout has one region
    // A cos row's share of each region: its group (row, for pairs), widened to a register where shorter.
    const int64_t cosWidth = ms_rotary::register_cos_slot(MODE, len_) / Regions(kYLayout, MODE);
    cosSlot_ = cosPerRow_ ? RowUnit(kYLayout, len_, pairs_) : cosWidth;
    cosRegion_ = t.cosRowsPerLoop * cosWidth;
    dyGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TDy *>(dy));
    cosGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TCos *>(cos));
    sinGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TCos *>(sin));
    positionsGm_.SetGlobalBuffer(reinterpret_cast<__gm__ int64_t *>(positions));
    const int64_t block = t.rowsPerLoop * len_ * static_cast<int64_t>(sizeof(TDy)) + ms_rotary::kRegisterSlackBytes;
    pipe_.InitBuffer(inQueue_, 2, block);
    pipe_.InitBuffer(outQueue_, 2, block);
    pipe_.InitBuffer(cosQueue_, 2, 2 * Regions(kYLayout, MODE) * cosRegion_ * static_cast<int64_t>(sizeof(TCos)) +
                                       ms_rotary::kRegisterSlackBytes);  // cos regions, then sin regions
  }

 private:
  friend struct ms_rotary_ascend::Blocks;  // runs CopyIn, Compute, CopyOut per block

  // The q+k ops: from here on the rows are k's (its tensor, its seq and heads in `t`).
  __aicore__ inline void SetTensor(GM_ADDR dy, const Tiling &t) {
    tiling_ = t;
    dyGm_.SetGlobalBuffer(reinterpret_cast<__gm__ TDy *>(dy));
  }

  // One strided copy per region of a layout, `rows` rows of dy from row0, GM -> UB or UB -> GM.
  template <int32_t LAYOUT>
  __aicore__ inline void CopyRegionsIn(const LocalTensor<TDy> &ub, int64_t row0, int64_t rows) {
    const int64_t unit = RowUnit(LAYOUT, len_, pairs_), region = LAYOUT == ms_rotary::kPairs ? 0 : dyRegion_;
    const DataCopyExtParams copy{static_cast<uint16_t>(rows), static_cast<uint32_t>(unit * sizeof(TDy)),
                                 static_cast<uint32_t>((tiling_.headDim - unit) * sizeof(TDy)), 0, 0};
    for (int64_t r = 0; r < Regions(LAYOUT, MODE); ++r) {
      DataCopyPad(ub[r * region], dyGm_[row0 * tiling_.headDim + tiling_.start + r * unit], copy,
                  DataCopyPadExtParams<TDy>{});
    }
  }

  template <int32_t LAYOUT>
  __aicore__ inline void CopyRegionsOut(const LocalTensor<TDy> &ub, int64_t row0, int64_t rows) {
    const int64_t unit = RowUnit(LAYOUT, len_, pairs_), region = LAYOUT == ms_rotary::kPairs ? 0 : dyRegion_;
    const DataCopyExtParams copy{static_cast<uint16_t>(rows), static_cast<uint32_t>(unit * sizeof(TDy)), 0,
                                 static_cast<uint32_t>((tiling_.headDim - unit) * sizeof(TDy)), 0};
    for (int64_t r = 0; r < Regions(LAYOUT, MODE); ++r) {
      DataCopyPad(dyGm_[row0 * tiling_.headDim + tiling_.start + r * unit], ub[r * region], copy);
    }
  }

  // `count` consecutive cos (and sin) rows from `cosRow` into slots from `slot`, one copy per region each.
  __aicore__ inline void CopyCosRows(const LocalTensor<TCos> &rows, int64_t slot, int64_t cosRow, int64_t count) {
    const int64_t unit = RowUnit(kYLayout, len_, pairs_), regions = Regions(kYLayout, MODE);
    const DataCopyExtParams copy{static_cast<uint16_t>(count), static_cast<uint32_t>(unit * sizeof(TCos)),
                                 static_cast<uint32_t>((len_ - unit) * sizeof(TCos)),
                                 static_cast<uint32_t>((cosSlot_ - unit) * sizeof(TCos) / 32), 0};
    for (int64_t r = 0; r < regions; ++r) {
      const int64_t at = r * cosRegion_ + slot * cosSlot_;
      DataCopyPad(rows[at], cosGm_[cosRow * len_ + r * unit], copy, DataCopyPadExtParams<TCos>{});
      DataCopyPad(rows[regions * cosRegion_ + at], sinGm_[cosRow * len_ + r * unit], copy,
                  DataCopyPadExtParams<TCos>{});
    }
  }

  // Returns how many cos rows (slots) the block reads.
  __aicore__ inline int64_t CopyIn(int64_t row0, int64_t rows) {
    LocalTensor<TDy> slices = inQueue_.template AllocTensor<TDy>();
    CopyRegionsIn<kInLayout>(slices, row0, rows);
    inQueue_.EnQue(slices);
    LocalTensor<TCos> cosRows = cosQueue_.template AllocTensor<TCos>();
    CosRuns runs(tiling_, positionsGm_, row0, rows);
    for (int64_t slot, cosRow, count; runs.Next(slot, cosRow, count);) CopyCosRows(cosRows, slot, cosRow, count);
    cosQueue_.EnQue(cosRows);
    return runs.Slots();
  }

  __aicore__ inline void Compute(int64_t row0, int64_t rows, int64_t slots) {
    LocalTensor<TDy> slices = inQueue_.template DeQue<TDy>();
    LocalTensor<TCos> cosRows = cosQueue_.template DeQue<TCos>();
    LocalTensor<TDy> out = outQueue_.template AllocTensor<TDy>();
    __ubuf__ TDy *src = reinterpret_cast<__ubuf__ TDy *>(slices.GetPhyAddr());
    __ubuf__ TDy *dst = reinterpret_cast<__ubuf__ TDy *>(out.GetPhyAddr());
    __ubuf__ TCos *cos = reinterpret_cast<__ubuf__ TCos *>(cosRows.GetPhyAddr());
    __ubuf__ TCos *sin = cos + Regions(kYLayout, MODE) * cosRegion_;
    const int64_t inUnit = RowUnit(kInLayout, len_, pairs_), outUnit = RowUnit(kOutLayout, len_, pairs_);
    const uint32_t segmentPairs = static_cast<uint32_t>(pairs_), dyRegion = static_cast<uint32_t>(dyRegion_);
    const uint32_t cosRegion = static_cast<uint32_t>(cosRegion_);
    if (cosPerRow_) {
      asc_vf_call<RotateVF<MODE, CONJ, TDy, TCos>>(dst, src, cos, sin, static_cast<uint32_t>(rows * pairs_),
                                                   segmentPairs, dyRegion, cosRegion, 1u);
    } else {
      const int64_t cosUnit = RowUnit(kYLayout, len_, pairs_);
      if (cosSlot_ > cosUnit) {
        asc_vf_call<RepeatSlotsVF<TCos>>(cos, static_cast<uint16_t>(2 * Regions(kYLayout, MODE)), cosRegion,
                                         static_cast<uint16_t>(slots), static_cast<uint32_t>(cosSlot_),
                                         static_cast<uint32_t>(cosUnit), static_cast<uint16_t>(cosSlot_ / cosUnit));
      }
      int64_t slot = 0;
      for (int64_t r = 0; r < rows; ++slot) {
        const int64_t run = RunRows(tiling_, row0, r, rows);
        asc_vf_call<RotateVF<MODE, CONJ, TDy, TCos>>(dst + r * outUnit, src + r * inUnit, cos + slot * cosSlot_,
                                                     sin + slot * cosSlot_, static_cast<uint32_t>(run * pairs_),
                                                     segmentPairs, dyRegion, cosRegion, 0u);
        r += run;
      }
    }
    outQueue_.EnQue(out);
    inQueue_.FreeTensor(slices);
    cosQueue_.FreeTensor(cosRows);
  }

  __aicore__ inline void CopyOut(int64_t row0, int64_t rows) {
    LocalTensor<TDy> out = outQueue_.template DeQue<TDy>();
    CopyRegionsOut<kOutLayout>(out, row0, rows);
    outQueue_.FreeTensor(out);
  }

  Tiling tiling_;
  int64_t len_ = 0, pairs_ = 0;
  bool cosPerRow_ = false;  // every row its own cos row: cos/sin read like dy, no runs
  int64_t dyRegion_ = 0, cosSlot_ = 0, cosRegion_ = 0;  // elements
  TPipe pipe_;
  TQue<QuePosition::VECIN, 1> inQueue_, cosQueue_;
  TQue<QuePosition::VECOUT, 1> outQueue_;
  GlobalTensor<TDy> dyGm_;
  GlobalTensor<TCos> cosGm_, sinGm_;
  GlobalTensor<int64_t> positionsGm_;  // gathering by position
};

}  // namespace arch35
}  // namespace ms_rotary_ascend

#endif  // MS_ROTARY_ASCEND_ROTARY_KERNEL_ARCH35_H_
