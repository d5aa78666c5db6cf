// Entry point of MsRotaryPartialRotaryMulGrad (backward) on Ascend vector cores.
#include "rotary_kernel.h"

extern "C" __global__ __aicore__ void ms_rotary_partial_rotary_mul_grad(GM_ADDR dy, GM_ADDR cos, GM_ADDR sin,
                                                                      GM_ADDR /*dy_out: dy itself*/,
                                                                      GM_ADDR /*workspace*/, GM_ADDR tiling) {
  GET_TILING_DATA(tilingData, tiling);
  MS_ROTARY_DISPATCH(1, tilingData, nullptr, nullptr, nullptr)
}
