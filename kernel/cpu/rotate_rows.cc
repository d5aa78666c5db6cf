// rotary_rows.h's rotate_rows for every mode and dtype pair, in a translation unit of its own (built in
// parallel with the others).
#include "rotary_rows.h"

namespace ms_rotary {
namespace row_loops {

RowFn rotate_rows_for(bool conjugate, int64_t mode, DType dy_dtype, DType cos_dtype) {
  return conjugate ? pick_instance<PickRotateRows<true>>(mode, dy_dtype, cos_dtype)
                   : pick_instance<PickRotateRows<false>>(mode, dy_dtype, cos_dtype);
}

}  // namespace row_loops
}  // namespace ms_rotary
