// TilingData of the six ops. One TILING_DATA_FIELD_DEF line per field: kernel-tiling generators such as
// asc-devkit's gen_kernel_tiling_data_def.py read these lines one at a time, and a macro expanding to fields
// would give them none. The fields are MS_ROTARY_TILING_FIELDS (kernel/common/rotary_rules.h) in its order;
// tests/test_ascend_headers.py checks that the two lists agree.
#ifndef MS_ROTARY_ASCEND_INPLACE_PARTIAL_ROTARY_MUL_TILING_H_
#define MS_ROTARY_ASCEND_INPLACE_PARTIAL_ROTARY_MUL_TILING_H_

#include "register/tilingdata_base.h"

namespace optiling {
BEGIN_TILING_DATA_DEF(PartialRotaryTilingData)
TILING_DATA_FIELD_DEF(int64_t, rows);
TILING_DATA_FIELD_DEF(int64_t, seq);
TILING_DATA_FIELD_DEF(int64_t, heads);
TILING_DATA_FIELD_DEF(int64_t, headDim);
TILING_DATA_FIELD_DEF(int64_t, start);
TILING_DATA_FIELD_DEF(int64_t, len);
TILING_DATA_FIELD_DEF(int64_t, cosBStride);
TILING_DATA_FIELD_DEF(int64_t, cosSStride);
TILING_DATA_FIELD_DEF(int64_t, cosNStride);
TILING_DATA_FIELD_DEF(int64_t, usedCores);
TILING_DATA_FIELD_DEF(int64_t, rowsPerLoop);
TILING_DATA_FIELD_DEF(int64_t, cosRowsPerLoop);
TILING_DATA_FIELD_DEF(int64_t, pitch);
TILING_DATA_FIELD_DEF(int64_t, cacheRows);
TILING_DATA_FIELD_DEF(int64_t, channels);
TILING_DATA_FIELD_DEF(int64_t, channelStride);
TILING_DATA_FIELD_DEF(int64_t, rowsQ);
TILING_DATA_FIELD_DEF(int64_t, kSeq);
TILING_DATA_FIELD_DEF(int64_t, kHeads);
END_TILING_DATA_DEF;

REGISTER_TILING_DATA_CLASS(MsRotaryPartialRotaryMul, PartialRotaryTilingData)
REGISTER_TILING_DATA_CLASS(MsRotaryPartialRotaryMulGrad, PartialRotaryTilingData)
REGISTER_TILING_DATA_CLASS(MsRotaryPartialRotaryMulPositions, PartialRotaryTilingData)
REGISTER_TILING_DATA_CLASS(MsRotaryPartialRotaryMulPositionsGrad, PartialRotaryTilingData)
REGISTER_TILING_DATA_CLASS(MsRotaryPartialRotaryMulPositionsQK, PartialRotaryTilingData)
REGISTER_TILING_DATA_CLASS(MsRotaryPartialRotaryMulPositionsQKGrad, PartialRotaryTilingData)
}  // namespace optiling

#endif  // MS_ROTARY_ASCEND_INPLACE_PARTIAL_ROTARY_MUL_TILING_H_
