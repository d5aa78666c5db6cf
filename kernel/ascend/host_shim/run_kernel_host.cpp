// Runs the Ascend kernel sources on the host through the shim, block after block, as a vector-core
// launch would. Usage: run_kernel_host IN OUT, where IN holds a header of int64 values
//   conjugate mode dy_dtype cos_dtype dy[4] cos[4] start end core_num ub_bytes
// then dy, cos, sin bytes; OUT receives dy after the call. Exit 2: the tiling refused the problem.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "../op_host/rotary_tiling.h"
#include "kernel_operator.h"

namespace shim {
int64_t block_idx = 0;
int64_t tiling_key = -1;
int64_t ub_limit = 0;
}  // namespace shim

extern "C" void ms_rotary_partial_rotary_mul(GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR);
extern "C" void ms_rotary_partial_rotary_mul_grad(GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR);

int main(int argc, char **argv) {
  if (argc != 3) return 1;
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr int kHeader = 16;
  if (bytes.size() < kHeader * sizeof(int64_t)) return 1;
  const int64_t *h = reinterpret_cast<const int64_t *>(bytes.data());
  ms_rotary_ascend::RotaryShape shape{};
  shape.conjugate = h[0] != 0;
  shape.rotary_mode = h[1];
  shape.dy_dtype_id = h[2];
  shape.cos_dtype_id = h[3];
  for (int i = 0; i < 4; ++i) {
    shape.dy[i] = h[4 + i];
    shape.cos[i] = h[8 + i];
  }
  shape.start = h[12];
  shape.end = h[13];
  shape.dy_dtype_bytes = shape.dy_dtype_id == 0 ? 4 : 2;
  shape.cos_dtype_bytes = shape.cos_dtype_id == 0 ? 4 : 2;
  const int64_t core_num = h[14];
  shim::ub_limit = h[15];
  ms_rotary_ascend::RotaryTiling t{};
  if (ms_rotary_ascend::compute_rotary_tiling(shape, core_num, shim::ub_limit, &t) != ms_rotary::kOk) {
    return 2;
  }
  const int64_t dy_bytes = shape.dy[0] * shape.dy[1] * shape.dy[2] * shape.dy[3] * shape.dy_dtype_bytes;
  const int64_t cos_bytes = shape.cos[0] * shape.cos[1] * shape.cos[2] * shape.cos[3] * shape.cos_dtype_bytes;
  // Separate exact-size copies, so AddressSanitizer catches any access outside each tensor.
  const char *payload = bytes.data() + kHeader * sizeof(int64_t);
  std::vector<uint8_t> dy(payload, payload + dy_bytes);
  std::vector<uint8_t> cos(payload + dy_bytes, payload + dy_bytes + cos_bytes);
  std::vector<uint8_t> sin(payload + dy_bytes + cos_bytes, payload + dy_bytes + 2 * cos_bytes);
  optiling::PartialRotaryTilingData data{t.rows, t.seq, t.heads, t.head_dim, t.start, t.len, t.cos_b_stride,
                                         t.cos_s_stride, t.cos_n_stride, t.used_cores, t.rows_per_core,
                                         t.big_cores, t.rows_per_loop};
  shim::tiling_key = t.tiling_key;
  auto *entry = shape.conjugate ? ms_rotary_partial_rotary_mul_grad : ms_rotary_partial_rotary_mul;
  const int64_t launched = t.used_cores > 0 ? t.used_cores : 1;
  for (shim::block_idx = 0; shim::block_idx < launched; ++shim::block_idx) {
    entry(dy.data(), cos.data(), sin.data(), dy.data(), nullptr, reinterpret_cast<GM_ADDR>(&data));
  }
  std::ofstream(argv[2], std::ios::binary).write(reinterpret_cast<const char *>(dy.data()), dy_bytes);
  return 0;
}
