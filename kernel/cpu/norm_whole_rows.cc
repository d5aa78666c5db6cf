// rotary_rows.h's norm_rotate_whole_rows for every mode and dtype pair at the head widths that have it, in a
// translation unit of its own (built in parallel with the others).
#include "rotary_rows.h"

namespace ms_rotary {
namespace row_loops {

NormFn norm_whole_rows_for(int64_t mode, DType dy_dtype, DType cos_dtype, int64_t D) {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
  switch (D) {  // Gemma-3's 256, most models' 128, small models' 64
    case 64: return pick_instance<PickNormWholeRows<64>>(mode, dy_dtype, cos_dtype);
    case 128: return pick_instance<PickNormWholeRows<128>>(mode, dy_dtype, cos_dtype);
    case 256: return pick_instance<PickNormWholeRows<256>>(mode, dy_dtype, cos_dtype);
    default: return nullptr;
  }
#else
  (void)mode, (void)dy_dtype, (void)cos_dtype, (void)D;
  return nullptr;
#endif
}

}  // namespace row_loops
}  // namespace ms_rotary
