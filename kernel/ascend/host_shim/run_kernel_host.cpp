// Runs the Ascend kernel sources on the host through the shim, block after block, as a vector-core
// launch would. Usage: run_kernel_host IN OUT [COUNTS], where IN starts with one line of named values
// (benchmarks/ascend_model.py, runner_input, writes it; a missing required name or an unknown one is refused):
//   conjugate mode dy_dtype cos_dtype dy=B,S,N,D cos=b,s,n,L start end cores ub_bytes npu_arch
//   [channels positions_batch batch_axis seq_axis k_heads]
// (npu_arch 3510: an Ascend 950, whose tiling picks the register-based kernel where the slice fits it;
// channels 1-3: the ops that gather cos/sin rows by position, cos the cache [1, P, 1, L], positions
// [channels, positions_batch, S]; 0, the default: cos broadcast over dy; k_heads > 0: the q+k ops, k dy's shape
// with that many heads), then dy (and k) bytes, cos, sin bytes, and when gathering the int64 positions and the
// int16 lane masks [channels, L * cos bytes / 2] (or nothing: zeros, positions 0, 1, 2, ... along S, to count a
// large launch cheaply); OUT receives dy (and k) after the call; COUNTS (JSON) what each core did.
// Exit 2: the tiling refused the problem; 1: a bad input file.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../op_host/rotary_tiling.h"
#include "kernel_operator.h"

namespace shim {
int64_t block_idx = 0;
int64_t tiling_key = -1;
int64_t ub_limit = 0;
std::vector<Counts> counts;
}  // namespace shim

namespace {

void write_counts(const char *path, const ms_rotary_ascend::RotaryTiling &t) {
  std::FILE *f = std::fopen(path, "w");
  if (f == nullptr) return;
  std::fprintf(f, "{\"rows_per_loop\": %lld, \"used_cores\": %lld, \"cores\": [",
               static_cast<long long>(t.rows_per_loop), static_cast<long long>(t.used_cores));
  for (size_t i = 0; i < shim::counts.size(); ++i) {
    const shim::Counts &c = shim::counts[i];
    std::fprintf(f, "%s\n{\"vector\": {", i ? "," : "");
    bool first = true;
    for (const auto &[kind, v] : c.vector) {
      std::fprintf(f, "%s\"%s\": [%lld, %lld, %lld]", first ? "" : ", ", kind.c_str(),
                   static_cast<long long>(v.instructions), static_cast<long long>(v.elements),
                   static_cast<long long>(v.repeats));
      first = false;
    }
    std::fprintf(f, "}, \"mte2\": [%lld, %lld, %lld], \"mte3\": [%lld, %lld, %lld], ",
                 static_cast<long long>(c.mte2.transfers), static_cast<long long>(c.mte2.bursts),
                 static_cast<long long>(c.mte2.bytes), static_cast<long long>(c.mte3.transfers),
                 static_cast<long long>(c.mte3.bursts), static_cast<long long>(c.mte3.bytes));
    std::fprintf(f, "\"barriers\": %lld, \"flag_waits\": %lld, \"queue_waits\": %lld, \"scalar_writes\": %lld, "
                 "\"queue_buffers\": %lld, \"kernel_type\": %lld, \"gm_scalar_reads\": %lld}",
                 static_cast<long long>(c.barriers), static_cast<long long>(c.flag_waits),
                 static_cast<long long>(c.queue_waits), static_cast<long long>(c.scalar_writes),
                 static_cast<long long>(c.queue_buffers), static_cast<long long>(c.kernel_type),
                 static_cast<long long>(c.gm_scalar_reads));
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

// The input file's first line, "name=value ..." (values: integers, or comma-separated lists of them).
// Returns false, saying why on stderr, for a malformed line, an unknown name or a missing required one.
bool read_header(const std::string &line, std::map<std::string, std::vector<int64_t>> *fields) {
  static const std::map<std::string, std::vector<int64_t>> kDefaults = {
      {"conjugate", {}}, {"mode", {}},    {"dy_dtype", {}},         {"cos_dtype", {}},   {"dy", {}},
      {"cos", {}},       {"start", {}},   {"end", {}},              {"cores", {}},       {"ub_bytes", {}},
      {"npu_arch", {}},  {"channels", {0}}, {"positions_batch", {1}}, {"batch_axis", {0}}, {"seq_axis", {1}},
      {"k_heads", {0}}};
  *fields = kDefaults;
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    const size_t eq = word.find('=');
    const std::string name = word.substr(0, eq);
    if (eq == std::string::npos || kDefaults.count(name) == 0) {
      std::fprintf(stderr, "run_kernel_host: unknown header field '%s'\n", word.c_str());
      return false;
    }
    std::vector<int64_t> values;
    std::istringstream items(word.substr(eq + 1));
    std::string item;
    try {
      while (std::getline(items, item, ',')) values.push_back(std::stoll(item));
    } catch (const std::exception &) {
      std::fprintf(stderr, "run_kernel_host: header field '%s' is not integers\n", word.c_str());
      return false;
    }
    (*fields)[name] = values;
  }
  for (const auto &[name, values] : *fields) {
    const size_t expected = name == "dy" || name == "cos" ? 4 : 1;
    if (values.size() != expected) {
      std::fprintf(stderr, "run_kernel_host: header field '%s' is missing or needs %zu value(s)\n", name.c_str(),
                   expected);
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" void ms_rotary_partial_rotary_mul(GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR);
extern "C" void ms_rotary_partial_rotary_mul_grad(GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR);
extern "C" void ms_rotary_partial_rotary_mul_positions(GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR,
                                                       GM_ADDR);
extern "C" void ms_rotary_partial_rotary_mul_positions_grad(GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR,
                                                            GM_ADDR, GM_ADDR);
extern "C" void ms_rotary_partial_rotary_mul_positions_qk(GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR,
                                                          GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR);
extern "C" void ms_rotary_partial_rotary_mul_positions_qk_grad(GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR,
                                                               GM_ADDR, GM_ADDR, GM_ADDR, GM_ADDR);

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) return 1;
  std::ifstream in(argv[1], std::ios::binary);
  std::string line;
  std::map<std::string, std::vector<int64_t>> h;
  if (!std::getline(in, line) || !read_header(line, &h)) return 1;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ms_rotary_ascend::RotaryShape shape{};
  shape.conjugate = h["conjugate"][0] != 0;
  shape.rotary_mode = h["mode"][0];
  shape.dy_dtype_id = h["dy_dtype"][0];
  shape.cos_dtype_id = h["cos_dtype"][0];
  for (int i = 0; i < 4; ++i) {
    shape.dy[i] = h["dy"][i];
    shape.cos[i] = h["cos"][i];
  }
  shape.start = h["start"][0];
  shape.end = h["end"][0];
  const int64_t core_num = h["cores"][0];
  shim::ub_limit = h["ub_bytes"][0];
  shape.arch35 = h["npu_arch"][0] == 3510;
  shape.gathers = h["channels"][0] != 0;
  shape.positions.channels = h["channels"][0];
  shape.positions.batch = h["positions_batch"][0];
  shape.positions.batch_axis = h["batch_axis"][0];
  shape.positions.seq_axis = h["seq_axis"][0];
  shape.positions.seq = shape.positions.seq_axis >= 0 && shape.positions.seq_axis < 3 ? shape.dy[shape.positions.seq_axis]
                                                                                      : -1;
  shape.k_heads = h["k_heads"][0];
  ms_rotary_ascend::RotaryTiling t{};
  if (ms_rotary_ascend::compute_rotary_tiling(shape, core_num, shim::ub_limit, &t) != ms_rotary::kOk) {
    return 2;
  }
  const int64_t dy_bytes =
      shape.dy[0] * shape.dy[1] * shape.dy[2] * shape.dy[3] * ms_rotary::dtype_bytes(shape.dy_dtype_id);
  int64_t k_bytes = shape.k_heads > 0 ? ms_rotary::dtype_bytes(shape.dy_dtype_id) : 0;  // dy's shape, k's heads
  for (int i = 0; i < 4; ++i) {
    k_bytes *= i == 3 - shape.positions.batch_axis - shape.positions.seq_axis ? shape.k_heads : shape.dy[i];
  }
  const int64_t cos_bytes =
      shape.cos[0] * shape.cos[1] * shape.cos[2] * shape.cos[3] * ms_rotary::dtype_bytes(shape.cos_dtype_id);
  const int64_t positions_count = shape.gathers ? shape.positions.channels * shape.positions.batch *
                                                      shape.positions.seq : 0;
  const int64_t masks_bytes = shape.gathers ? shape.positions.channels * (shape.end - shape.start) *
                                                  ms_rotary::dtype_bytes(shape.cos_dtype_id) : 0;
  // Separate exact-size copies, so AddressSanitizer catches any access outside each tensor.
  const bool zeros = bytes.empty();
  const int64_t payload_bytes = dy_bytes + k_bytes + 2 * cos_bytes + positions_count * 8 + masks_bytes;
  if (!zeros && static_cast<int64_t>(bytes.size()) != payload_bytes) return 1;
  const char *payload = bytes.data();
  std::vector<uint8_t> dy(dy_bytes), k(k_bytes), cos(cos_bytes), sin(cos_bytes);
  std::vector<int64_t> positions(positions_count);
  std::vector<uint8_t> masks(masks_bytes);
  if (!zeros) {
    std::memcpy(dy.data(), payload, dy_bytes);
    if (k_bytes > 0) std::memcpy(k.data(), payload + dy_bytes, k_bytes);
    const char *tables = payload + dy_bytes + k_bytes;
    std::memcpy(cos.data(), tables, cos_bytes);
    std::memcpy(sin.data(), tables + cos_bytes, cos_bytes);
    const char *gather_payload = tables + 2 * cos_bytes;
    if (positions_count > 0) std::memcpy(positions.data(), gather_payload, positions_count * 8);
    if (masks_bytes > 0) std::memcpy(masks.data(), gather_payload + positions_count * 8, masks_bytes);
  } else {  // a prompt's positions: 0, 1, 2, ... along S (within the cache)
    for (int64_t i = 0; i < positions_count; ++i) positions[i] = i % shape.positions.seq % shape.cos[1];
  }
  optiling::PartialRotaryTilingData data{};
#define MS_ROTARY_COPY_FIELD(tiling_field, data_field) data.data_field = t.tiling_field;
  MS_ROTARY_TILING_FIELDS(MS_ROTARY_COPY_FIELD)
#undef MS_ROTARY_COPY_FIELD
  shim::tiling_key = t.tiling_key;
  auto *entry = shape.conjugate ? ms_rotary_partial_rotary_mul_grad : ms_rotary_partial_rotary_mul;
  auto *gather_entry =
      shape.conjugate ? ms_rotary_partial_rotary_mul_positions_grad : ms_rotary_partial_rotary_mul_positions;
  auto *qk_entry =
      shape.conjugate ? ms_rotary_partial_rotary_mul_positions_qk_grad : ms_rotary_partial_rotary_mul_positions_qk;
  const GM_ADDR tiling = reinterpret_cast<GM_ADDR>(&data);
  const int64_t launched = t.used_cores > 0 ? t.used_cores : 1;
  for (shim::block_idx = 0; shim::block_idx < launched; ++shim::block_idx) {
    const GM_ADDR positions_addr = reinterpret_cast<GM_ADDR>(positions.data());
    if (shape.k_heads > 0) {
      qk_entry(dy.data(), k.data(), cos.data(), sin.data(), positions_addr, masks.data(), dy.data(), k.data(),
               nullptr, tiling);
    } else if (shape.gathers) {
      gather_entry(dy.data(), cos.data(), sin.data(), positions_addr, masks.data(), dy.data(), nullptr, tiling);
    } else {
      entry(dy.data(), cos.data(), sin.data(), dy.data(), nullptr, tiling);
    }
  }
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char *>(dy.data()), dy_bytes);
  out.write(reinterpret_cast<const char *>(k.data()), k_bytes);
  if (argc == 4) write_counts(argv[3], t);
  return 0;
}
