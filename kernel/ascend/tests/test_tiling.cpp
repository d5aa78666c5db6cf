// Host unit tests of the Ascend tiling (op_host/rotary_tiling.cpp): edge shapes and invariants.
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "rotary_tiling.h"

using namespace ms_rotary_ascend;

static int failures = 0;
#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

static RotaryShape make(int64_t B, int64_t S, int64_t N, int64_t D, int64_t start, int64_t end, int64_t mode = 1,
                        int64_t dy_bytes = 4, int64_t cos_bytes = 4) {
  RotaryShape s{};
  s.dy[0] = B, s.dy[1] = S, s.dy[2] = N, s.dy[3] = D;
  s.cos[0] = 1, s.cos[1] = S, s.cos[2] = 1, s.cos[3] = end - start;
  s.dy_dtype_id = dy_bytes == 4 ? ms_rotary::kFloat32 : ms_rotary::kFloat16;
  s.cos_dtype_id = cos_bytes == 4 ? ms_rotary::kFloat32 : ms_rotary::kBFloat16;
  s.rotary_mode = mode;
  s.start = start;
  s.end = end;
  return s;
}

// Rows of q (dy) core `core` takes: what the kernel splits by ms_rotary::core_share.
static int64_t share(const RotaryTiling &t, int64_t core) {
  return ms_rotary::core_share(t.rows_q, t.used_cores, core).count;
}

// Every row of q (dy) and of k is owned by exactly one core, in order (each tensor's rows split on their own);
// each block fits the unified buffer and is the largest that does (a smaller one costs instructions and copies
// per row).
static void check_cover(const RotaryShape &shape, const RotaryTiling &t, int64_t cores, int64_t ub) {
  int64_t most = 0;
  for (const int64_t rows : {t.rows_q, t.rows - t.rows_q}) {
    int64_t next = 0;
    for (int64_t c = 0; c < t.used_cores; ++c) {
      const ms_rotary::CoreShare share = ms_rotary::core_share(rows, t.used_cores, c);
      EXPECT(share.first == next);
      EXPECT(share.count >= (rows >= t.used_cores ? 1 : 0));
      next = share.first + share.count;
      most = share.count > most ? share.count : most;
    }
    EXPECT(next == rows);
  }
  EXPECT(t.used_cores <= cores);
  EXPECT(t.rows_per_loop >= 1 && t.rows_per_loop <= ms_rotary::kMaxCopyBlocks);
  EXPECT(ub_bytes_for_block(shape, t, t.rows_per_loop) <= ub);
  EXPECT(t.rows_per_loop == (most < ms_rotary::kMaxCopyBlocks ? most : ms_rotary::kMaxCopyBlocks) ||
         ub_bytes_for_block(shape, t, t.rows_per_loop + 1) > ub);
  EXPECT(t.cos_rows_per_loop == cos_rows_for_block(t, t.rows_per_loop));
  EXPECT(t.pitch % 16 == 0 && t.pitch >= t.len && t.pitch < t.len + 16);
}

int main() {
  const int64_t ub = 192 * 1024;
  RotaryTiling t{};
  {  // typical: GPT-NeoX-like fp32
    RotaryShape s = make(4, 4096, 32, 128, 0, 64);
    EXPECT(compute_rotary_tiling(s, 40, ub, &t) == ms_rotary::kOk);
    EXPECT(t.rows == 4 * 4096 * 32 && t.used_cores == 40 && t.len == 64);
    check_cover(s, t, 40, ub);
  }
  {  // cos broadcast over heads: a block of 32 rows starting mid-group reads two cos rows, not one
    RotaryShape s = make(4, 4096, 32, 128, 0, 64);
    EXPECT(compute_rotary_tiling(s, 40, ub, &t) == ms_rotary::kOk);
    EXPECT(cos_rows_for_block(t, 32) == 2 && cos_rows_for_block(t, 1) == 1 && cos_rows_for_block(t, 64) == 3);
    s.cos[2] = 32;  // a cos row per head: one per row
    EXPECT(compute_rotary_tiling(s, 40, ub, &t) == ms_rotary::kOk);
    EXPECT(cos_rows_for_block(t, 32) == 32);
    s.cos[1] = 1, s.cos[2] = 1;  // one cos row for everything
    EXPECT(compute_rotary_tiling(s, 40, ub, &t) == ms_rotary::kOk);
    EXPECT(cos_rows_for_block(t, 1000) == 2);
  }
  {  // slice not 32-byte aligned: fp16, start 3, length 6 (12 bytes)
    RotaryShape s = make(2, 5, 3, 16, 3, 9, 0, 2, 2);
    EXPECT(compute_rotary_tiling(s, 8, ub, &t) == ms_rotary::kOk);
    EXPECT(t.start == 3 && t.len == 6 && t.rows == 30);
    check_cover(s, t, 8, ub);
  }
  {  // D = 1024, full slice, quarter mode
    RotaryShape s = make(1, 7, 2, 1024, 0, 1024, 2);
    EXPECT(compute_rotary_tiling(s, 24, ub, &t) == ms_rotary::kOk);
    EXPECT(t.rows_per_loop >= 1);
    check_cover(s, t, 24, ub);
  }
  {  // one row
    RotaryShape s = make(1, 1, 1, 64, 0, 64);
    EXPECT(compute_rotary_tiling(s, 40, ub, &t) == ms_rotary::kOk);
    EXPECT(t.used_cores == 1 && share(t, 0) == 1);
    check_cover(s, t, 40, ub);
  }
  {  // more cores than rows: one row per core
    RotaryShape s = make(1, 3, 2, 32, 0, 32);
    EXPECT(compute_rotary_tiling(s, 48, ub, &t) == ms_rotary::kOk);
    EXPECT(t.used_cores == 6 && share(t, 0) == 1 && share(t, 5) == 1);
    check_cover(s, t, 48, ub);
  }
  {  // uneven split: 10 rows over 4 cores -> 3, 3, 2, 2
    RotaryShape s = make(1, 5, 2, 32, 0, 32);
    EXPECT(compute_rotary_tiling(s, 4, ub, &t) == ms_rotary::kOk);
    EXPECT(share(t, 0) == 3 && share(t, 1) == 3 && share(t, 2) == 2 && share(t, 3) == 2);
    check_cover(s, t, 4, ub);
  }
  {  // a small unified buffer forces several loops per core, never more than fit
    RotaryShape s = make(2, 64, 4, 128, 64, 128, 3);
    EXPECT(compute_rotary_tiling(s, 2, 8192, &t) == ms_rotary::kOk);
    EXPECT(t.rows_per_loop < share(t, t.used_cores - 1));
    check_cover(s, t, 2, 8192);
  }
  {  // huge row count: rows per loop capped by the DMA block count
    RotaryShape s = make(64, 4096, 1, 4, 0, 2, 1);
    EXPECT(compute_rotary_tiling(s, 1, 1 << 30, &t) == ms_rotary::kOk);
    EXPECT(t.rows_per_loop == ms_rotary::kMaxCopyBlocks);
  }
  {  // the 950: slices whose segments hold 16, 32 or a multiple of 64 pairs take the register-based kernel's
     // keys, which need no fp32 work rows (larger blocks); other slices, and other chips, the memory-based one
    RotaryShape s = make(2, 4096, 16, 192, 128, 192, 3, 2, 2);
    EXPECT(compute_rotary_tiling(s, 72, ub, &t) == ms_rotary::kOk);
    EXPECT(!uses_register_path(t) && t.tiling_key < ms_rotary::kRegisterPathKeys);
    const int64_t memory_rows = t.rows_per_loop, memory_key = t.tiling_key;
    s.arch35 = true;
    EXPECT(compute_rotary_tiling(s, 72, ub, &t) == ms_rotary::kOk);
    EXPECT(uses_register_path(t) && t.tiling_key == ms_rotary::kRegisterPathKeys + memory_key);
    EXPECT(t.pitch == t.len && t.rows_per_loop > memory_rows);
    check_cover(s, t, 72, ub);
    for (int64_t len : {32, 64, 128, 256, 384}) {  // 16, 32, 64, 128, 192 pairs: in
      RotaryShape fits = make(1, 8, 4, 384, 0, len, 0);
      fits.arch35 = true;
      EXPECT(compute_rotary_tiling(fits, 8, ub, &t) == ms_rotary::kOk && uses_register_path(t));
      check_cover(fits, t, 8, ub);
    }
    for (int64_t len : {8, 24, 48, 96, 160}) {  // 4, 12, 24, 48, 80 pairs: out
      RotaryShape other = make(1, 8, 4, 384, 0, len, 0);
      other.arch35 = true;
      EXPECT(compute_rotary_tiling(other, 8, ub, &t) == ms_rotary::kOk && !uses_register_path(t));
    }
    RotaryShape quarters = make(1, 8, 4, 128, 0, 128, 2);  // 32 pairs a segment, two segments a row
    quarters.arch35 = true;
    EXPECT(compute_rotary_tiling(quarters, 8, ub, &t) == ms_rotary::kOk && uses_register_path(t));
  }
  {  // empty work: no core runs
    RotaryShape s = make(2, 3, 1, 16, 4, 4);
    EXPECT(compute_rotary_tiling(s, 8, ub, &t) == ms_rotary::kOk);
    EXPECT(t.rows == 0 && t.used_cores == 0);
  }
  {  // refusals
    RotaryShape reversed = make(1, 2, 1, 16, 8, 4);
    reversed.cos[3] = 4;
    EXPECT(compute_rotary_tiling(reversed, 8, ub, &t) == ms_rotary::kBadSlice);
    EXPECT(compute_rotary_tiling(make(1, 2, 1, 16, 0, 20), 8, ub, &t) == ms_rotary::kBadSlice);
    EXPECT(compute_rotary_tiling(make(1, 2, 1, 16, 0, 6, 2), 8, ub, &t) == ms_rotary::kBadSliceLength);
    EXPECT(compute_rotary_tiling(make(1, 2, 1, 2048, 0, 8), 8, ub, &t) == ms_rotary::kHeadDimTooLarge);
    EXPECT(compute_rotary_tiling(make(1, 2, 1, 16, 0, 8, 4), 8, ub, &t) == ms_rotary::kBadMode);
    EXPECT(compute_rotary_tiling(make(1, 2, 1, 16, 0, 8), 0, ub, &t) == ms_rotary::kBadCoreCount);
    EXPECT(compute_rotary_tiling(make(1, 2, 1, 1024, 0, 1024), 8, 1024, &t) == ms_rotary::kNoUbRoom);
    RotaryShape wrong = make(2, 2, 1, 16, 0, 8);
    wrong.cos[0] = 3;
    EXPECT(compute_rotary_tiling(wrong, 8, ub, &t) == ms_rotary::kBadBroadcast);
  }
  {  // gathering by position: strides locate a row's token in the positions, the cache is any length
    RotaryShape s = make(2, 5, 4, 128, 64, 128, 3);  // BSND, [B, S] positions
    s.gathers = true;
    s.cos[1] = 4096;
    s.positions.batch = 2, s.positions.batch_axis = 0, s.positions.seq_axis = 1, s.positions.seq = 5;
    EXPECT(compute_rotary_tiling(s, 8, ub, &t) == ms_rotary::kOk);
    EXPECT(t.cache_rows == 4096 && t.cos_b_stride == 5 && t.cos_s_stride == 1 && t.cos_n_stride == 0);
    check_cover(s, t, 8, ub);
    RotaryShape bnsd = s;  // [B, N, S, D] with one row of positions for the batch
    bnsd.dy[1] = 4, bnsd.dy[2] = 5;
    bnsd.positions.batch = 1, bnsd.positions.seq_axis = 2;
    EXPECT(compute_rotary_tiling(bnsd, 8, ub, &t) == ms_rotary::kOk);
    EXPECT(t.cos_b_stride == 0 && t.cos_s_stride == 0 && t.cos_n_stride == 1 && t.cos_rows_per_loop == t.rows_per_loop);
    EXPECT(compute_rotary_tiling(make(2, 5, 4, 128, 64, 128, 3), 8, ub, &t) == ms_rotary::kOk && t.cache_rows == 0);
    RotaryShape bad = s;
    bad.positions.seq = 4;  // positions for another sequence length
    EXPECT(compute_rotary_tiling(bad, 8, ub, &t) == ms_rotary::kBadPositions);
    bad = s, bad.positions.batch = 3;
    EXPECT(compute_rotary_tiling(bad, 8, ub, &t) == ms_rotary::kBadPositions);
    bad = s, bad.cos[0] = 2;  // not a cache [1, P, 1, L]
    EXPECT(compute_rotary_tiling(bad, 8, ub, &t) == ms_rotary::kBadPositions);
    RotaryShape mrope = s;  // M-RoPE: each lane from one of three rows, combined by the memory kernel
    mrope.positions.channels = 3, mrope.arch35 = true;
    EXPECT(compute_rotary_tiling(mrope, 8, ub, &t) == ms_rotary::kOk && !uses_register_path(t));
    EXPECT(t.channels == 3 && t.channel_stride == 10);
    check_cover(mrope, t, 8, ub);
    RotaryShape four = mrope;  // HunYuan-VL's four axes: the most a token has (kMaxPositionChannels)
    four.positions.channels = 4;
    EXPECT(compute_rotary_tiling(four, 8, ub, &t) == ms_rotary::kOk && t.channels == 4);
    check_cover(four, t, 8, ub);
    bad = s, bad.positions.channels = 5;
    EXPECT(compute_rotary_tiling(bad, 8, ub, &t) == ms_rotary::kBadPositions);
    bad = s, bad.positions.seq_axis = 0;
    EXPECT(compute_rotary_tiling(bad, 8, ub, &t) == ms_rotary::kBadPositions);
    RotaryShape qk = bnsd;  // q [2, 4, 5, 128] and k [2, 1, 5, 128] (BNSD: heads on axis 1) in one launch
    qk.k_heads = 1;
    EXPECT(compute_rotary_tiling(qk, 8, ub, &t) == ms_rotary::kOk);
    EXPECT(t.rows_q == 40 && t.rows == 50 && t.k_seq == 1 && t.k_heads == 5 && t.seq == 4 && t.heads == 5);
    check_cover(qk, t, 8, ub);
    RotaryShape gqa = s;  // BSND q with 4 heads, k with 1: k's blocks read more distinct cos rows
    gqa.k_heads = 1;
    EXPECT(compute_rotary_tiling(gqa, 1, ub, &t) == ms_rotary::kOk && t.rows == 50 && t.k_heads == 1);
    EXPECT(t.cos_rows_per_loop == t.rows_per_loop);  // k's one head: a cos row per row
    bad = make(2, 5, 4, 128, 64, 128, 3), bad.k_heads = 1;  // k without gathering
    EXPECT(compute_rotary_tiling(bad, 8, ub, &t) == ms_rotary::kBadPositions);
  }
  if (failures) {
    std::fprintf(stderr, "%d tiling expectations failed\n", failures);
    return 1;
  }
  std::printf("tiling host tests passed\n");
  return 0;
}
