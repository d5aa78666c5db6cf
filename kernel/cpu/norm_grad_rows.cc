// rotary_rows.h's norm_grad_rows for every mode and dtype pair, in a translation unit of its own (built in
// parallel with the others).
#include "rotary_rows.h"

namespace ms_rotary {
namespace row_loops {

NormGradFn norm_grad_rows_for(int64_t mode, DType dy_dtype, DType cos_dtype) {
  return pick_instance<PickNormGradRows>(mode, dy_dtype, cos_dtype);
}

}  // namespace row_loops
}  // namespace ms_rotary
