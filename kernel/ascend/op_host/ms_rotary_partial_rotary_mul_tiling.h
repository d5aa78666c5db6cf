// TilingData of both ops: the fields of MS_ROTARY_TILING_FIELDS (kernel/common/rotary_rules.h), all int64.
// The kernel reads it with GET_TILING_DATA.
#ifndef MS_ROTARY_ASCEND_INPLACE_PARTIAL_ROTARY_MUL_TILING_H_
#define MS_ROTARY_ASCEND_INPLACE_PARTIAL_ROTARY_MUL_TILING_H_

#include "register/tilingdata_base.h"
#include "rotary_rules.h"

namespace optiling {
#define MS_ROTARY_TILING_DATA_FIELD(tiling_field, data_field) TILING_DATA_FIELD_DEF(int64_t, data_field);
BEGIN_TILING_DATA_DEF(PartialRotaryTilingData)
MS_ROTARY_TILING_FIELDS(MS_ROTARY_TILING_DATA_FIELD)
END_TILING_DATA_DEF;
#undef MS_ROTARY_TILING_DATA_FIELD

REGISTER_TILING_DATA_CLASS(MsRotaryPartialRotaryMul, PartialRotaryTilingData)
REGISTER_TILING_DATA_CLASS(MsRotaryPartialRotaryMulGrad, PartialRotaryTilingData)
}  // namespace optiling

#endif  // MS_ROTARY_ASCEND_INPLACE_PARTIAL_ROTARY_MUL_TILING_H_
