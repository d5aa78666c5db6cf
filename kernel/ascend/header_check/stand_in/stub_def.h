// Our stand-in for CANN's closed tikicpulib header stub_def.h, so that g++ can type-check kernel sources
// against the public asc-devkit headers in CPU-debug mode. Declarations only, written here: the language
// extensions bisheng knows (address spaces, pipe attributes), the types and enumerators the headers name,
// and the intrinsics they call. Every name comes from what the headers use (check_headers.py --harvest);
// the values are placeholders, so the check proves types and calls, never behaviour.
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

// bisheng's function and address-space qualifiers: no meaning to g++.
#define __aicore__
#define __global__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__
#define __fbuf__
#define __sbuf__
#define __ssbuf__
#define __simd_callee__
#define __simd_vf__
#define __host__
#define __BLOCK_LOCAL__
#define __sync_alias__
#define __check_sync_alias__
#define __disable_kernel_type_autoinfer__
#define __simt_callee__
#define __sync_noalias__
#define __no_simd_vf_fusion__
#define __inout_pipe__(...)
#define __in_pipe__(...)
#define __out_pipe__(...)
#ifndef ASCENDC_HOST_AICORE  // kernel_macros.h defines it so without bisheng, but some headers come first
#define ASCENDC_HOST_AICORE
#endif

enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5, PIPE_V2, PIPE_FIX };
enum event_t { EVENT_ID0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7 };

// Enumerations the headers pass to intrinsics; enumerators as the headers spell them.
enum class QuantMode_t {
  NoQuant, DEQF16, DEQS16, F322BF16, F322F16, QF162B8_PRE, QF162S16_PRE, QF162S4_PRE, QF322B8_PRE, QF322BF16_PRE,
  QF322F16_PRE, QF322F32_PRE, QF322FP8_PRE, QF322HIF8_PRE, QF322HIF8_PRE_HYBRID, QS322BF16_PRE, REQ4, REQ8, VDEQF16,
  VDEQS16, VQF162B8_PRE, VQF162S16_PRE, VQF162S4_PRE, VQF322B8_PRE, VQF322BF16_PRE, VQF322F16_PRE, VQF322F32_PRE,
  VQF322FP8_PRE, VQF322HIF8_PRE, VQF322HIF8_PRE_HYBRID, VQS322BF16_PRE, VREQ4, VREQ8
};
enum class pad_t { PAD_NONE };
enum class cache_line_t { SINGLE_CACHE_LINE, ENTIRE_DATA_CACHE };
enum class dcci_dst_t { CACHELINE_ALL, CACHELINE_ATOMIC, CACHELINE_OUT, CACHELINE_UB };
enum class Order_t { VALUE_INDEX, INDEX_VALUE, ONLY_VALUE, ONLY_INDEX };
enum atomic_type_t { ATOMIC_NONE_TYPE };
enum atomic_op_t { ATOMIC_NONE_OP };
enum mem_t { MEM_NONE };
enum mem_dsb_t { DSB_NONE };
enum addr_cal_mode_t { inc, dec };
enum vector_address_reg_t { VA0, VA1, VA2, VA3, VA4, VA5, VA6, VA7 };
enum vector_half_t { L128, H128 };

// Scalar types bisheng builds in: storage bits (named as the headers read them), float in and out.
#define MS_STAND_IN_SCALAR(name, storage, member) \
  struct name {                                   \
    storage member = 0;                           \
    name() = default;                             \
    name(float value);                            \
    operator float() const;                       \
    float ToFloat() const;                        \
    name &operator+=(float value);                \
    name &operator-=(float value);                \
  };
MS_STAND_IN_SCALAR(half, uint16_t, bits)
MS_STAND_IN_SCALAR(bfloat16_t, uint16_t, bits)
MS_STAND_IN_SCALAR(fp8_e4m3fn_t, uint8_t, val)
MS_STAND_IN_SCALAR(fp8_e5m2_t, uint8_t, val)
MS_STAND_IN_SCALAR(fp8_e8m0_t, uint8_t, val)
MS_STAND_IN_SCALAR(fp4x2_e1m2_t, uint8_t, val)
MS_STAND_IN_SCALAR(fp4x2_e2m1_t, uint8_t, val)
MS_STAND_IN_SCALAR(hifloat8_t, uint8_t, val)
MS_STAND_IN_SCALAR(int4x2_t, uint8_t, val)
#undef MS_STAND_IN_SCALAR

// Core identity bisheng provides as variables.
extern int64_t block_idx, block_num, sub_block_idx;
extern int64_t g_taskRation;
extern uint64_t g_fixpipeNdNzParam;

// tikicpulib's CPU-debug state the headers read.
namespace AscendC {
enum CpuDebugCoreType : int32_t { AIC_TYPE, AIV_TYPE, MIX_TYPE };
extern bool g_isVdeq;
}  // namespace AscendC

// ---- dav_3510 (950): the register-based vector ISA and SIMT ----
// Enumerations the register-based implementations cast their own enums to, and the enumerators they spell.
enum Dist { DIST_NORM };
enum DistVST { DIST_VST_NORM };
enum Post { POST_UPDATE, NO_POST_UPDATE };
enum Part { PART_EVEN, PART_ODD };
enum Part_T { PART_P0, PART_P1, PART_P2, PART_P3 };
enum HiloPart { LOWER, HIGHER };
enum ROUND {  // bisheng's modes, and the CAST_* names CPU-debug mode reads (kernel_reg_compute_common_impl.h)
  ROUND_R, ROUND_A, ROUND_F, ROUND_C, ROUND_Z, ROUND_O, R, A, F, C, Z, O, H,
  CAST_RINT, CAST_ROUND, CAST_FLOOR, CAST_CEIL, CAST_TRUNC, CAST_ODD, CAST_HYBRID
};
enum RoundingSaturation { RS_DISABLE, RS_ENABLE };
enum Pat { PAT_ALL, PAT_ALLF };
enum Mode { MODE_ZEROING, MODE_MERGING, MODE_UNKNOWN };
enum Pos { POS_LOWEST };
enum Order { INC_ORDER, DEC_ORDER };
enum Spr { SPR_AR };
enum StoreMode { STORE_NORM };
enum CpuMode { CPU_MODE_NORM };
enum Bin { BIN_0 };
enum MemBar { VV_ALL, VS_ALL, SV_ALL, LD_VST, ST_VLD, ST_VST, VLD_ST, VLD_VST, VST_LD, VST_ST, VST_VLD, VST_VST };
enum class QuantMode_post { NoConv };
enum class KernelMode { AIC_MODE, AIV_MODE, MIX_MODE };
extern KernelMode g_kernelMode;

// SIMT vector scalars (CUDA-style x, y, z, w members).
#define MS_STAND_IN_VEC(name, T) \
  struct name##1 { T x; };       \
  struct name##2 { T x, y; };    \
  struct name##3 { T x, y, z; }; \
  struct name##4 { T x, y, z, w; };
MS_STAND_IN_VEC(float, float)
MS_STAND_IN_VEC(int, int32_t)
MS_STAND_IN_VEC(long, int64_t)
#undef MS_STAND_IN_VEC
struct half2 { half x, y; };
namespace bfloat16 {
template <typename T>
bfloat16_t Bf16T(T value);
}  // namespace bfloat16

// Vector registers: one opaque type per element type, as bisheng names them.
#define MS_STAND_IN_VECTOR_TYPES(X)                                                                            \
  X(vector_bool) X(vector_align) X(vector_address) X(vector_store_unalign) X(vector_load_unalign) X(vector_u8) \
  X(vector_s8) X(vector_u16) X(vector_s16) X(vector_u32) X(vector_s32) X(vector_u64) X(vector_s64) X(vector_f16) \
  X(vector_bf16) X(vector_f32) X(vector_f8e8m0) X(vector_f8e5m2) X(vector_f8e4m3) X(vector_f4e2m1x2)             \
  X(vector_f4e1m2x2) X(vector_s4x2) X(vector_hif8)
#define MS_STAND_IN_VECTOR_TYPE(name) \
  struct name {};
MS_STAND_IN_VECTOR_TYPES(MS_STAND_IN_VECTOR_TYPE)
#undef MS_STAND_IN_VECTOR_TYPE

// SIMT: the launch geometry and the CPU-debug launcher the SIMT headers name.
namespace cce {
struct dim3 {
  uint32_t x = 1, y = 1, z = 1;
  dim3(uint32_t x_ = 1, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}
};
template <auto function, typename... Args>
void async_invoke(dim3 threads, Args &&...args);
}  // namespace cce
extern cce::dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __VEC_SCOPE__
#define __biasbuf__
// tikicpulib's CPU model of a SIMT thread block.
struct Warp {
  template <typename T, typename Op>
  T WarpOp(T value, Op) { return value; }  // defined: callers pass lambdas of local type
  template <typename T, typename... Args>
  T WarpShuffleOp(T value, Args...) { return value; }
};
struct ThreadBlock {
  static ThreadBlock &GetBlockInstance();
  template <typename Op>
  void AtomicOp(Op op) { op(); }
  Warp warps_[64];
};
vector_address VagCpuSim(...);
void Sync();
extern int32_t warpSize;
int32_t GetLaneId();
int32_t GetWarpId();

// Intrinsics: any arguments, a result that converts to what the caller stores it in (a scalar, a mask or
// address register).
struct StandInResult {
  operator int64_t() const;  // arithmetic on a scalar result
  template <typename T, typename = std::enable_if_t<!std::is_arithmetic_v<T>>>
  operator T() const;  // registers, enums, pointers
};
#include "intrinsics.inc"
#define MS_STAND_IN_DECLARE(name) \
  template <typename... Args>     \
  StandInResult name(Args &&...);
MS_STAND_IN_INTRINSICS(MS_STAND_IN_DECLARE)
#undef MS_STAND_IN_DECLARE
