// Entry point of MsRotaryPartialRotaryMulPositionsQKGrad (backward of q and k in one launch, cos/sin rows
// gathered by position from a cache) on Ascend vector cores.
#include "rotary_kernel.h"

extern "C" __global__ __aicore__ void ms_rotary_partial_rotary_mul_positions_qk_grad(
    GM_ADDR dy /* q */, GM_ADDR k, GM_ADDR cos, GM_ADDR sin, GM_ADDR positions, GM_ADDR lane_masks,
    GM_ADDR /*q_out: q itself*/, GM_ADDR /*k_out: k itself*/, GM_ADDR /*workspace*/, GM_ADDR tiling) {
  GET_TILING_DATA(tilingData, tiling);
  MS_ROTARY_DISPATCH(1, tilingData, k, positions, lane_masks)
}
