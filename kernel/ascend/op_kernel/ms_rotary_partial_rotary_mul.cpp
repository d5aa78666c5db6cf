// Entry point of MsRotaryPartialRotaryMul (forward) on Ascend vector cores.
#include "rotary_kernel.h"

extern "C" __global__ __aicore__ void ms_rotary_partial_rotary_mul(GM_ADDR dy, GM_ADDR cos, GM_ADDR sin,
                                                                 GM_ADDR /*dy_out: dy itself*/, GM_ADDR /*workspace*/,
                                                                 GM_ADDR tiling) {
  GET_TILING_DATA(tilingData, tiling);
  MS_ROTARY_DISPATCH(0, tilingData, nullptr, nullptr, nullptr)
}
