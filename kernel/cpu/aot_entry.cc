// MindSpore ops.Custom(func_type="aot") entry points for the CPU kernel, and the plain C entries eager calls,
// tests and benchmarks use. Built with -D_GLIBCXX_USE_CXX11_ABI=0: MindSpore passes std::string across this
// boundary in the old ABI.
// An AOT entry refuses a call by throwing std::invalid_argument: MindSpore reports its text ("... Error message
// is <text>"), where a status code would only give a number. The plain C entries never throw.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "rotary_kernel.h"

extern "C" int ms_rotary_run(void *dy, void *out, const void *cos, const void *sin, const int64_t *dy_shape,
                             const int64_t *cos_shape, const int64_t *sin_shape, const char *dy_dtype,
                             const char *cos_dtype, const char *sin_dtype, int64_t rotary_mode, int64_t start,
                             int64_t end, int conjugate, int num_threads);
extern "C" int ms_rotary_run_positions(void *q, void *q_out, void *k, void *k_out, const void *cos, const void *sin,
                                       const int64_t *positions, const int64_t *positions_shape,
                                       const int64_t *lane_channels, int64_t batch_axis, int64_t seq_axis,
                                       const int64_t *q_shape, const int64_t *k_shape, const int64_t *cache_shape,
                                       const char *dy_dtype, const char *cos_dtype, int64_t rotary_mode,
                                       int64_t start, int64_t end, int conjugate, int num_threads);
extern "C" int ms_rotary_norm_positions(void *q, void *q_out, void *k, void *k_out, const void *q_weight,
                                        const void *k_weight, const char *q_weight_dtype,
                                        const char *k_weight_dtype, float eps, float offset,
                                        const void *cos, const void *sin, const int64_t *positions,
                                        const int64_t *positions_shape, const int64_t *lane_channels,
                                        int64_t batch_axis, int64_t seq_axis, const int64_t *q_shape,
                                        const int64_t *k_shape, const int64_t *cache_shape, const char *dtype,
                                        const char *cos_dtype, int64_t rotary_mode, int64_t start, int64_t end,
                                        int num_threads);
extern "C" int ms_rotary_norm_positions_grad(const void *dy, const void *x, void *dx, const void *weight,
                                             float *weight_grad, const char *weight_dtype, float eps, float offset,
                                             const void *cos, const void *sin, const int64_t *positions,
                                             const int64_t *positions_shape, const int64_t *lane_channels,
                                             int64_t batch_axis, int64_t seq_axis, const int64_t *shape,
                                             const int64_t *cache_shape, const char *dtype, const char *cos_dtype,
                                             int64_t rotary_mode, int64_t start, int64_t end, int num_threads);
extern "C" int ms_rotary_cos_sin_grad(const void *y_side, const void *x_side, void *dcos, void *dsin,
                                      const int64_t *dy_shape, const int64_t *cos_shape, const char *dy_dtype,
                                      const char *cos_dtype, int64_t rotary_mode, int64_t start, int64_t end,
                                      int num_threads);

// Same virtual-method order as MindSpore's AotExtra (include/mindspore/ccsrc/utils/custom_aot_extra.h),
// declared here because that header pulls in MindSpore's internal headers. Only the vtable is used.
// Not in an anonymous namespace: GCC would see no subclass and devirtualise calls into the pure stubs.
class AotExtraView {
 public:
  virtual ~AotExtraView() = default;
  virtual bool HasAttr(std::string name) = 0;
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
};

namespace {


// MS_ROTARY_NUM_THREADS pins the kernel's thread count when the caller passes 0 (unset or 0: automatic).
// Anything but a whole number 0..kMaxThreads is ignored with one warning on stderr.
int configured_threads() {
  static const int threads = [] {
    const char *env = std::getenv("MS_ROTARY_NUM_THREADS");
    if (env == nullptr || *env == '\0') return 0;
    char *end = nullptr;
    errno = 0;
    const long value = std::strtol(env, &end, 10);
    if (errno != 0 || *end != '\0' || value < 0 || value > ms_rotary::kMaxThreads) {
      std::fprintf(stderr, "ms_rotary: ignoring MS_ROTARY_NUM_THREADS='%s': expected a whole number from 0 "
                   "(automatic) to %lld\n", env, static_cast<long long>(ms_rotary::kMaxThreads));
      return 0;
    }
    return static_cast<int>(value);
  }();
  return threads;
}

bool same_shape(const int64_t *a, const int64_t *b) {
  for (int i = 0; i < 4; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// The rotary_mode and partial_slice attributes every entry carries, the slice's end resolved against cos's
// length: kOk and *mode, *start, *end set, or the status that says what is missing.
int read_rotary_attrs(AotExtraView *attrs, const int64_t *cos_shape, int64_t *mode, int64_t *start, int64_t *end) {
  if (attrs == nullptr || !attrs->HasAttr("rotary_mode") || !attrs->HasAttr("partial_slice")) {
    return ms_rotary::kMissingAttr;
  }
  const std::vector<int64_t> slice = attrs->GetAttrIntVec("partial_slice");
  if (slice.size() != 2) return ms_rotary::kBadSlice;
  *mode = attrs->GetAttrInt("rotary_mode");
  *start = slice[0];
  *end = ms_rotary::slice_end(slice[0], slice[1], cos_shape);
  return ms_rotary::kOk;
}

// Throws the refusal of a call that returned `status` (never kOk).
[[noreturn]] void refuse(int status) {
  throw std::invalid_argument(std::string("ms_rotary: the CPU kernel refused its arguments: ") +
                              ms_rotary::status_message(status));
}

// The attribute position_error (the caller's message, "{position}" and "{cache_rows}" in it) filled in.
std::string fill_position_message(AotExtraView *attrs, int64_t position, int64_t cache_rows) {
  std::string text = attrs->HasAttr("position_error") ? attrs->GetAttrStr("position_error")
                                                      : "ms_rotary: position {position} is outside the cos/sin cache "
                                                        "[0, {cache_rows})";
  for (const auto &[key, value] : {std::pair<std::string, int64_t>{"{position}", position},
                                   std::pair<std::string, int64_t>{"{cache_rows}", cache_rows}}) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at)) {
      const std::string digits = std::to_string(static_cast<long long>(value));
      text.replace(at, key.size(), digits);
      at += digits.size();
    }
  }
  return text;
}

// params: dy, cos, sin, then the output dx, shaped and typed like dy: dy with its slice rotated. Graph mode
// only computes out of place; an in-place call writes dx back with MindSpore's InplaceCopy.
int run(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *extra, bool conjugate) {
  if (nparam != 4 || params == nullptr || ndims == nullptr || shapes == nullptr || dtypes == nullptr) {
    return ms_rotary::kBadParamCount;
  }
  for (int i = 0; i < 4; ++i) {  // every tensor, shape and dtype this entry reads, the output included
    if (params[i] == nullptr || shapes[i] == nullptr || dtypes[i] == nullptr) return ms_rotary::kBadParamCount;
    if (ndims[i] != 4) return ms_rotary::kBadRank;
  }
  if (params[3] == params[0]) return ms_rotary::kBadParamCount;
  if (!same_shape(shapes[0], shapes[3])) return ms_rotary::kBadRank;
  if (ms_rotary::dtype_from_name(dtypes[3]) != ms_rotary::dtype_from_name(dtypes[0])) return ms_rotary::kBadDTypeCode;
  int64_t mode, start, end;
  const int status = read_rotary_attrs(static_cast<AotExtraView *>(extra), shapes[1], &mode, &start, &end);
  if (status != ms_rotary::kOk) refuse(status);
  const int run_status = ms_rotary_run(params[0], params[3], params[1], params[2], shapes[0], shapes[1], shapes[2],
                                       dtypes[0], dtypes[1], dtypes[2], mode, start, end, conjugate ? 1 : 0, 0);
  if (run_status != ms_rotary::kOk) refuse(run_status);
  return 0;
}

// The attributes of a call reading a cache at positions (rotary_mode, partial_slice, positions_axes, lane_channels,
// position_error), and its positions checked against the cache: a position outside it refused in the caller's
// words (the one refusal only the values show).
struct CacheReadAttrs {
  int64_t mode = 0, start = 0, end = 0;
  std::vector<int64_t> axes{0, 1}, lane_channels;
  const int64_t *positions;

  CacheReadAttrs(AotExtraView *attrs, const void *positions_data, const int64_t *cache_shape,
                 const int64_t *positions_shape)
      : positions(static_cast<const int64_t *>(positions_data)) {
    const int status = read_rotary_attrs(attrs, cache_shape, &mode, &start, &end);
    if (status != ms_rotary::kOk) refuse(status);
    if (attrs->HasAttr("positions_axes")) axes = attrs->GetAttrIntVec("positions_axes");
    if (positions_shape[0] > 1) {
      if (!attrs->HasAttr("lane_channels")) refuse(ms_rotary::kMissingAttr);
      lane_channels = attrs->GetAttrIntVec("lane_channels");
      if (static_cast<int64_t>(lane_channels.size()) != end - start) refuse(ms_rotary::kBadPositions);
    }
    if (axes.size() != 2) refuse(ms_rotary::kBadPositions);
    const int64_t count = positions_shape[0] * positions_shape[1] * positions_shape[2];
    const int64_t outside = ms_rotary::position_outside(positions, count, cache_shape[1]);
    if (outside >= 0) throw std::invalid_argument(fill_position_message(attrs, positions[outside], cache_shape[1]));
  }
  const int64_t *lanes() const { return lane_channels.empty() ? nullptr : lane_channels.data(); }
};

// params: dy, cos, sin, positions, then the output: dy with its slice rotated by the cache rows the positions
// pick. cos/sin are the cache [1, P, 1, L], positions int64 [channels, batch, S] (more than one channel: the
// attribute lane_channels too); the optional attribute positions_axes is dy's (B axis, S axis), default (0, 1).
// A graph rotates q and k with one call each (MindSpore 2.10's CPU AOT kernels take one output); the eager
// path rotates both in one call.
int run_positions(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *extra,
                  bool conjugate) {
  if (nparam != 5 || params == nullptr || ndims == nullptr || shapes == nullptr || dtypes == nullptr) {
    return ms_rotary::kBadParamCount;
  }
  for (int i = 0; i < 5; ++i) {
    if (params[i] == nullptr || shapes[i] == nullptr || dtypes[i] == nullptr) return ms_rotary::kBadParamCount;
    if (i != 3 && ndims[i] != 4) return ms_rotary::kBadRank;
  }
  if (std::string(dtypes[3]) != "int64" || ndims[3] != 3) return ms_rotary::kBadPositions;
  if (!same_shape(shapes[0], shapes[4]) || params[4] == params[0]) return ms_rotary::kBadRank;
  const CacheReadAttrs read(static_cast<AotExtraView *>(extra), params[3], shapes[1], shapes[3]);
  const int run_status = ms_rotary_run_positions(
      params[0], params[4], nullptr, nullptr, params[1], params[2], read.positions, shapes[3], read.lanes(),
      read.axes[0], read.axes[1], shapes[0], nullptr, shapes[1], dtypes[0], dtypes[1], read.mode, read.start,
      read.end, conjugate ? 1 : 0, 0);
  if (run_status != ms_rotary::kOk) refuse(run_status);
  return 0;
}

// A head norm before the rotation (rotary_kernel.h, HeadNorm), one tensor a call; the attributes of
// run_positions plus norm_eps and norm_offset.
//   forward:              x, cos, sin, positions, weight -> out (x's shape and dtype)
//   backward, what:       dy, x, cos, sin, positions, weight -> dx (kDx) or the weight's gradient, fp32 [D]
enum class NormOut { kForward, kDx, kWeightGrad };

int run_norm_positions(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *extra,
                       NormOut what) {
  const int inputs = what == NormOut::kForward ? 5 : 6;
  if (nparam != inputs + 1 || params == nullptr || ndims == nullptr || shapes == nullptr || dtypes == nullptr) {
    return ms_rotary::kBadParamCount;
  }
  for (int i = 0; i <= inputs; ++i) {
    if (params[i] == nullptr || shapes[i] == nullptr || dtypes[i] == nullptr) return ms_rotary::kBadParamCount;
  }
  // inputs from cos on: cos, sin, positions, weight
  const int cos_at = inputs - 4, weight_at = inputs - 1, out_at = inputs;
  for (int i = 0; i < cos_at + 2; ++i) {
    if (ndims[i] != 4) return ms_rotary::kBadRank;
  }
  if (std::string(dtypes[cos_at + 2]) != "int64" || ndims[cos_at + 2] != 3) return ms_rotary::kBadPositions;
  if (ndims[weight_at] != 1 || shapes[weight_at][0] != shapes[0][3]) return ms_rotary::kBadHeadNorm;
  if (what == NormOut::kWeightGrad ? (ndims[out_at] != 1 || shapes[out_at][0] != shapes[0][3])
                                   : !same_shape(shapes[0], shapes[out_at])) {
    return ms_rotary::kBadRank;
  }
  if (what != NormOut::kForward && !same_shape(shapes[0], shapes[1])) return ms_rotary::kBadRank;  // dy, x
  auto *attrs = static_cast<AotExtraView *>(extra);
  if (attrs == nullptr || !attrs->HasAttr("norm_eps") || !attrs->HasAttr("norm_offset")) {
    refuse(ms_rotary::kMissingAttr);
  }
  const CacheReadAttrs read(attrs, params[cos_at + 2], shapes[cos_at], shapes[cos_at + 2]);
  const float eps = attrs->GetAttrFloat("norm_eps"), offset = attrs->GetAttrFloat("norm_offset");
  int status;
  if (what == NormOut::kForward) {
    status = ms_rotary_norm_positions(params[0], params[out_at], nullptr, nullptr, params[weight_at], nullptr,
                                      dtypes[weight_at], nullptr, eps, offset, params[1], params[2], read.positions,
                                      shapes[3], read.lanes(), read.axes[0], read.axes[1], shapes[0], nullptr,
                                      shapes[1], dtypes[0], dtypes[1], read.mode, read.start, read.end, 0);
  } else {
    const bool dx = what == NormOut::kDx;
    status = ms_rotary_norm_positions_grad(
        params[0], params[1], dx ? params[out_at] : nullptr, params[weight_at],
        dx ? nullptr : static_cast<float *>(params[out_at]), dtypes[weight_at], eps, offset, params[2], params[3],
        read.positions, shapes[4], read.lanes(), read.axes[0], read.axes[1], shapes[0], shapes[2], dtypes[0],
        dtypes[2], read.mode, read.start, read.end, 0);
  }
  if (status != ms_rotary::kOk) refuse(status);
  return 0;
}

// params: x twice (read-only), then a 1-element int32 output. A graph's in-place call puts this before its
// write into x: MindSpore 2.10 hands a kernel's input its tensor's own memory when that tensor is contiguous
// and whole, and each input a separate contiguous copy when it is a view (non-contiguous, or part of a larger
// tensor), which its InplaceCopy would then write in the wrong order (its own Tensor.add_ too). So two
// different addresses mean a view: refused (attribute "message") before anything is written.
int write_guard(int nparam, void **params, int * /*ndims*/, int64_t ** /*shapes*/, const char ** /*dtypes*/,
                void *extra) {
  if (nparam != 3 || params == nullptr || params[2] == nullptr) refuse(ms_rotary::kBadParamCount);
  auto *attrs = static_cast<AotExtraView *>(extra);
  if (params[0] != params[1]) {
    throw std::invalid_argument(attrs != nullptr && attrs->HasAttr("message")
                                    ? attrs->GetAttrStr("message")
                                    : std::string("ms_rotary: an in-place write into a view is refused"));
  }
  *static_cast<int32_t *>(params[2]) = 0;
  return 0;
}

// params: n float tensors (read-only), then a 1-element int32 output. Attributes: "written", how many of the
// first are written in place by the call this guards; "messages", one line for each pair (i, j), i < written,
// j > i, in that order: the eager path's refusal of the two sharing memory. MindSpore hands a kernel each whole
// contiguous input's own memory (a view gets a copy, and the write guard above refuses writing one), so two
// inputs whose bytes overlap are one tensor: a write into one would land in the other, or be read back from
// it. Refused before anything is written, as eagerly (constraints.check_eager_inputs, the prologue's checks).
int apart_guard(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *extra) {
  auto *attrs = static_cast<AotExtraView *>(extra);
  if (nparam < 3 || params == nullptr || params[nparam - 1] == nullptr) refuse(ms_rotary::kBadParamCount);
  if (attrs == nullptr || !attrs->HasAttr("written") || !attrs->HasAttr("messages")) refuse(ms_rotary::kMissingAttr);
  const int count = nparam - 1;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans(count);  // [first byte, past the last)
  for (int i = 0; i < count; ++i) {
    const ms_rotary::DType dtype = ms_rotary::dtype_from_name(dtypes[i]);
    if (dtype == ms_rotary::kBadDType) refuse(ms_rotary::kBadDTypeCode);
    int64_t bytes = ms_rotary::dtype_bytes(dtype);
    for (int axis = 0; axis < ndims[i]; ++axis) bytes *= shapes[i][axis];
    const auto first = reinterpret_cast<uintptr_t>(params[i]);
    spans[i] = {first, first + static_cast<uintptr_t>(bytes)};
  }
  const std::string messages = attrs->GetAttrStr("messages");
  const int64_t written = attrs->GetAttrInt("written");
  size_t line = 0;
  for (int i = 0; i < written && i < count; ++i) {
    for (int j = i + 1; j < count; ++j) {
      const size_t end = messages.find('\n', line);
      const bool empty = spans[i].first == spans[i].second || spans[j].first == spans[j].second;
      if (!empty && spans[i].first < spans[j].second && spans[j].first < spans[i].second) {
        throw std::invalid_argument(messages.substr(line, end == std::string::npos ? end : end - line));
      }
      line = end == std::string::npos ? messages.size() : end + 1;
    }
  }
  *static_cast<int32_t *>(params[nparam - 1]) = 0;
  return 0;
}

}  // namespace

// MindSpore's AOT signature around one of the runners above (the names are library.AOT_ENTRIES,
// library.AOT_POSITIONS_ENTRIES, library.AOT_WRITE_GUARD and library.AOT_APART_GUARD).
#define MS_ROTARY_AOT_ENTRY(name, call)                                                             \
  extern "C" int name(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, \
                      void * /*stream*/, void *extra) {                                           \
    return call;                                                                                  \
  }

MS_ROTARY_AOT_ENTRY(RotaryMulOut, run(nparam, params, ndims, shapes, dtypes, extra, false))
MS_ROTARY_AOT_ENTRY(RotaryMulGradOut, run(nparam, params, ndims, shapes, dtypes, extra, true))
MS_ROTARY_AOT_ENTRY(RotaryPositionsOut, run_positions(nparam, params, ndims, shapes, dtypes, extra, false))
MS_ROTARY_AOT_ENTRY(RotaryPositionsGradOut, run_positions(nparam, params, ndims, shapes, dtypes, extra, true))
MS_ROTARY_AOT_ENTRY(RotaryNormPositionsOut,
                    run_norm_positions(nparam, params, ndims, shapes, dtypes, extra, NormOut::kForward))
MS_ROTARY_AOT_ENTRY(RotaryNormPositionsGradOut,
                    run_norm_positions(nparam, params, ndims, shapes, dtypes, extra, NormOut::kDx))
MS_ROTARY_AOT_ENTRY(RotaryNormPositionsWeightGradOut,
                    run_norm_positions(nparam, params, ndims, shapes, dtypes, extra, NormOut::kWeightGrad))
MS_ROTARY_AOT_ENTRY(RotaryWriteGuard, write_guard(nparam, params, ndims, shapes, dtypes, extra))
MS_ROTARY_AOT_ENTRY(RotaryApartGuard, apart_guard(nparam, params, ndims, shapes, dtypes, extra))

// The text of a status code (rotary_rules.h, status_message), or null for a code that is none.
extern "C" const char *ms_rotary_status_message(int status) { return ms_rotary::status_message(status); }

// Plain C entry for host tests and benchmarks that call the kernel without MindSpore.
extern "C" int ms_rotary_run(void *dy, void *out, const void *cos, const void *sin, const int64_t *dy_shape,
                             const int64_t *cos_shape, const int64_t *sin_shape, const char *dy_dtype,
                             const char *cos_dtype, const char *sin_dtype, int64_t rotary_mode, int64_t start,
                             int64_t end, int conjugate, int num_threads) {
  if (dy == nullptr || cos == nullptr || sin == nullptr || dy_shape == nullptr || cos_shape == nullptr ||
      sin_shape == nullptr) {
    return ms_rotary::kBadParamCount;
  }
  ms_rotary::RotaryProblem p{};
  p.dy = dy;
  p.out = out;
  p.cos = cos;
  p.sin = sin;
  for (int i = 0; i < 4; ++i) {
    p.dy_shape[i] = dy_shape[i];
    p.cos_shape[i] = cos_shape[i];
    p.sin_shape[i] = sin_shape[i];
  }
  p.dy_dtype = ms_rotary::dtype_from_name(dy_dtype);
  p.cos_dtype = ms_rotary::dtype_from_name(cos_dtype);
  p.sin_dtype = ms_rotary::dtype_from_name(sin_dtype);
  p.rotary_mode = rotary_mode;
  p.start = start;
  p.end = end;
  p.conjugate = conjugate != 0;
  return ms_rotary::run_rotary(p, num_threads > 0 ? num_threads : configured_threads());
}

// Plain C entry of run_cos_sin_grad: y_side and x_side are dy-shaped, dcos and dsin cos-shaped.
extern "C" int ms_rotary_cos_sin_grad(const void *y_side, const void *x_side, void *dcos, void *dsin,
                                      const int64_t *dy_shape, const int64_t *cos_shape, const char *dy_dtype,
                                      const char *cos_dtype, int64_t rotary_mode, int64_t start, int64_t end,
                                      int num_threads) {
  if (y_side == nullptr || x_side == nullptr || dcos == nullptr || dsin == nullptr || dy_shape == nullptr ||
      cos_shape == nullptr) {
    return ms_rotary::kBadParamCount;
  }
  ms_rotary::RotaryProblem p{};
  for (int i = 0; i < 4; ++i) {
    p.dy_shape[i] = dy_shape[i];
    p.cos_shape[i] = cos_shape[i];
    p.sin_shape[i] = cos_shape[i];
  }
  p.dy_dtype = ms_rotary::dtype_from_name(dy_dtype);
  p.cos_dtype = p.sin_dtype = ms_rotary::dtype_from_name(cos_dtype);
  p.rotary_mode = rotary_mode;
  p.start = start;
  p.end = end;
  return ms_rotary::run_cos_sin_grad(p, y_side, x_side, dcos, dsin,
                                     num_threads > 0 ? num_threads : configured_threads());
}

// The problems of a call that reads cos/sin rows by position, one per rotated tensor (tensors[1] may be null),
// each checked, reading `own_positions`: a private copy of the positions, which may share memory with a tensor
// an in-place call writes.
static int positions_problems(void *const tensors[2], void *const outs[2], const int64_t *const shapes[2],
                              const void *cos, const void *sin, const int64_t *positions,
                              const int64_t *positions_shape, const int64_t *lane_channels, int64_t batch_axis,
                              int64_t seq_axis, const int64_t *cache_shape, const char *dtype, const char *cos_dtype,
                              int64_t rotary_mode, int64_t start, int64_t end, bool conjugate,
                              std::vector<int64_t> &own_positions, ms_rotary::RotaryProblem problems[2]) {
  int64_t count = 1;
  for (int i = 0; i < 3; ++i) {
    if (positions_shape[i] < 0 || __builtin_mul_overflow(count, positions_shape[i], &count)) {
      return ms_rotary::kBadPositions;
    }
  }
  try {
    own_positions.assign(positions, positions + count);
  } catch (const std::exception &) {
    return ms_rotary::kShapeTooLarge;
  }
  for (int h = 0; h < 2 && tensors[h] != nullptr; ++h) {
    ms_rotary::RotaryProblem &p = problems[h];
    p.dy = tensors[h];
    p.out = outs[h];
    p.cos = cos;
    p.sin = sin;
    for (int i = 0; i < 4; ++i) {
      p.dy_shape[i] = shapes[h][i];
      p.cos_shape[i] = p.sin_shape[i] = cache_shape[i];
    }
    p.dy_dtype = ms_rotary::dtype_from_name(dtype);
    p.cos_dtype = p.sin_dtype = ms_rotary::dtype_from_name(cos_dtype);
    p.rotary_mode = rotary_mode;
    p.start = start;
    p.end = end;
    p.conjugate = conjugate;
    p.positions.values = own_positions.data();
    p.positions.lane_channels = lane_channels;
    p.positions.channels = positions_shape[0], p.positions.batch = positions_shape[1];
    p.positions.seq = positions_shape[2];
    p.positions.batch_axis = batch_axis, p.positions.seq_axis = seq_axis;
  }
  return ms_rotary::kOk;
}

static int run_problems(ms_rotary::RotaryProblem problems[2], int heads, int num_threads) {
  for (int h = 0; h < heads; ++h) {  // both checked before either is written
    const ms_rotary::Status status = ms_rotary::check_rotary(problems[h]);
    if (status != ms_rotary::kOk) return status;
  }
  const int threads = num_threads > 0 ? num_threads : configured_threads();
  for (int h = 0; h < heads; ++h) {
    const ms_rotary::Status status = ms_rotary::run_rotary(problems[h], threads);
    if (status != ms_rotary::kOk) return status;
  }
  return ms_rotary::kOk;
}

// Plain C entry of a call that gathers cos/sin rows by position: q (and k, when not null) rotated by the cache
// rows the positions pick (rotary_kernel.h, Positions; positions_shape is [channels, batch, S]); out
// pointers null: in place. Both are checked before either is written.
extern "C" int ms_rotary_run_positions(void *q, void *q_out, void *k, void *k_out, const void *cos, const void *sin,
                                       const int64_t *positions, const int64_t *positions_shape,
                                       const int64_t *lane_channels, int64_t batch_axis, int64_t seq_axis,
                                       const int64_t *q_shape, const int64_t *k_shape, const int64_t *cache_shape,
                                       const char *dy_dtype, const char *cos_dtype, int64_t rotary_mode,
                                       int64_t start, int64_t end, int conjugate, int num_threads) {
  if (q == nullptr || cos == nullptr || sin == nullptr || positions == nullptr || positions_shape == nullptr ||
      q_shape == nullptr || cache_shape == nullptr || (k != nullptr && k_shape == nullptr)) {
    return ms_rotary::kBadParamCount;
  }
  void *const tensors[2] = {q, k}, *const outs[2] = {q_out, k_out};
  const int64_t *const shapes[2] = {q_shape, k_shape};
  std::vector<int64_t> own_positions;
  ms_rotary::RotaryProblem problems[2]{};
  const int status = positions_problems(tensors, outs, shapes, cos, sin, positions, positions_shape, lane_channels,
                                        batch_axis, seq_axis, cache_shape, dy_dtype, cos_dtype, rotary_mode, start,
                                        end, conjugate != 0, own_positions, problems);
  return status != ms_rotary::kOk ? status : run_problems(problems, k != nullptr ? 2 : 1, num_threads);
}

// Plain C entry of a head norm before the rotation (rotary_kernel.h, HeadNorm) reading the cache at positions:
// q (and k, when not null) normalised with their own weights ([D], each of its dtype) and rotated; out pointers
// null: in place (each row is read whole before it is written). Both are checked before either is written.
extern "C" int ms_rotary_norm_positions(void *q, void *q_out, void *k, void *k_out, const void *q_weight,
                                        const void *k_weight, const char *q_weight_dtype,
                                        const char *k_weight_dtype, float eps, float offset,
                                        const void *cos, const void *sin, const int64_t *positions,
                                        const int64_t *positions_shape, const int64_t *lane_channels,
                                        int64_t batch_axis, int64_t seq_axis, const int64_t *q_shape,
                                        const int64_t *k_shape, const int64_t *cache_shape, const char *dtype,
                                        const char *cos_dtype, int64_t rotary_mode, int64_t start, int64_t end,
                                        int num_threads) {
  if (q == nullptr || q_weight == nullptr || cos == nullptr || sin == nullptr || positions == nullptr ||
      positions_shape == nullptr || q_shape == nullptr || cache_shape == nullptr ||
      (k != nullptr && (k_shape == nullptr || k_weight == nullptr))) {
    return ms_rotary::kBadParamCount;
  }
  void *const tensors[2] = {q, k}, *const outs[2] = {q_out, k_out};
  const int64_t *const shapes[2] = {q_shape, k_shape};
  std::vector<int64_t> own_positions;
  ms_rotary::RotaryProblem problems[2]{};
  const int status = positions_problems(tensors, outs, shapes, cos, sin, positions, positions_shape, lane_channels,
                                        batch_axis, seq_axis, cache_shape, dtype, cos_dtype, rotary_mode, start, end,
                                        false, own_positions, problems);
  if (status != ms_rotary::kOk) return status;
  const void *const weights[2] = {q_weight, k_weight};
  const char *const weight_dtypes[2] = {q_weight_dtype, k_weight_dtype};
  for (int h = 0; h < 2; ++h) {
    problems[h].norm.weight = weights[h];
    problems[h].norm.weight_dtype = ms_rotary::dtype_from_name(weight_dtypes[h]);
    problems[h].norm.eps = eps;
    problems[h].norm.offset = offset;
  }
  return run_problems(problems, k != nullptr ? 2 : 1, num_threads);
}

// Plain C entry of that forward's backward for one tensor: dy the gradient of its output, x its input; dx
// (null: not wanted) and weight_grad (fp32 [D], null: not wanted) written.
extern "C" int ms_rotary_norm_positions_grad(const void *dy, const void *x, void *dx, const void *weight,
                                             float *weight_grad, const char *weight_dtype, float eps, float offset,
                                             const void *cos, const void *sin, const int64_t *positions,
                                             const int64_t *positions_shape, const int64_t *lane_channels,
                                             int64_t batch_axis, int64_t seq_axis, const int64_t *shape,
                                             const int64_t *cache_shape, const char *dtype, const char *cos_dtype,
                                             int64_t rotary_mode, int64_t start, int64_t end, int num_threads) {
  if (dy == nullptr || x == nullptr || weight == nullptr || cos == nullptr || sin == nullptr ||
      positions == nullptr || positions_shape == nullptr || shape == nullptr || cache_shape == nullptr ||
      (dx == nullptr && weight_grad == nullptr) || dx == dy || dx == x) {
    return ms_rotary::kBadParamCount;
  }
  void *const tensors[2] = {const_cast<void *>(dy), nullptr}, *const outs[2] = {dx, nullptr};
  const int64_t *const shapes[2] = {shape, nullptr};
  std::vector<int64_t> own_positions;
  ms_rotary::RotaryProblem problems[2]{};
  const int status = positions_problems(tensors, outs, shapes, cos, sin, positions, positions_shape, lane_channels,
                                        batch_axis, seq_axis, cache_shape, dtype, cos_dtype, rotary_mode, start, end,
                                        true, own_positions, problems);
  if (status != ms_rotary::kOk) return status;
  ms_rotary::HeadNorm &norm = problems[0].norm;
  norm.weight = weight;
  norm.weight_dtype = ms_rotary::dtype_from_name(weight_dtype);
  norm.eps = eps;
  norm.offset = offset;
  norm.x = x;
  norm.weight_grad = weight_grad;
  return run_problems(problems, 1, num_threads);
}
