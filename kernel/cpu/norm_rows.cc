// rotary_rows.h's norm_rows for every mode and dtype pair, in a translation unit of its own (built in
// parallel with the others).
#include "rotary_rows.h"

namespace ms_rotary {
namespace row_loops {

NormFn norm_rows_for(int64_t mode, DType dy_dtype, DType cos_dtype, int64_t D, int64_t start, int64_t end) {
  const NormFn whole = start == 0 && end == D ? norm_whole_rows_for(mode, dy_dtype, cos_dtype, D) : nullptr;
  return whole != nullptr ? whole : pick_instance<PickNormRows>(mode, dy_dtype, cos_dtype);
}

}  // namespace row_loops
}  // namespace ms_rotary
