// Entry point of MsRotaryPartialRotaryMulPositions (forward, cos/sin rows gathered by position from a cache)
// on Ascend vector cores.
#include "rotary_kernel.h"

extern "C" __global__ __aicore__ void ms_rotary_partial_rotary_mul_positions(GM_ADDR dy, GM_ADDR cos, GM_ADDR sin,
                                                                           GM_ADDR positions, GM_ADDR lane_masks,
                                                                           GM_ADDR /*dy_out: dy itself*/,
                                                                           GM_ADDR /*workspace*/, GM_ADDR tiling) {
  GET_TILING_DATA(tilingData, tiling);
  MS_ROTARY_DISPATCH(0, tilingData, nullptr, positions, lane_masks)
}
