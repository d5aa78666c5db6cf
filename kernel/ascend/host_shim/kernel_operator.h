// Host-side stand-in for the AscendC APIs the rotary kernel uses (ms_rotary's own, not CANN's): the kernel
// sources compile with g++ and run on the CPU, one "core" (block) after another. Semantics follow the
// asc-devkit API documents listed in kernel/ascend/README.md, with their constraints checked: 32-byte
// aligned operands, counts within the tensor, no partial overlap, Gather's source distinct from its
// destination, a queue's buffers used in order. Buffers are separate heap allocations of their exact size
// (AddressSanitizer sees any overrun), start as garbage, and each TPipe checks the total fits the unified
// buffer the tiling was computed for. Every call is counted per core (shim::counts), for
// benchmarks/ascend_model.py.
#ifndef MS_ROTARY_HOST_SHIM_KERNEL_OPERATOR_H_
#define MS_ROTARY_HOST_SHIM_KERNEL_OPERATOR_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../op_host/ms_rotary_partial_rotary_mul_tiling.h"

#define __global__
#define __aicore__
#define __gm__
#define __ubuf__
#define __simd_vf__
#define __simd_callee__
using GM_ADDR = uint8_t *;
using half = _Float16;

struct bfloat16_t {
  uint16_t bits;
};

namespace shim {
extern int64_t block_idx;
extern int64_t tiling_key;
extern int64_t ub_limit;  // bytes of unified buffer per core

// What one core did in one launch.
struct Counts {
  struct Vector {
    int64_t instructions = 0, elements = 0, repeats = 0;  // a repeat: 256 bytes of the widest operand
  };
  std::map<std::string, Vector> vector;  // by instruction kind
  struct Transfers {
    int64_t transfers = 0, bursts = 0, bytes = 0;  // bursts: the contiguous blocks of a strided copy
  };
  Transfers mte2, mte3;  // GM -> UB, UB -> GM
  int64_t barriers = 0, flag_waits = 0, queue_waits = 0, scalar_writes = 0, gm_scalar_reads = 0;
  int64_t queue_buffers = 0;  // fewest buffers of any in/out queue: 1 serializes copy-in, compute, copy-out
  int64_t kernel_type = -1;   // KERNEL_TASK_TYPE_DEFAULT's value (-1: not set)
};
extern std::vector<Counts> counts;  // indexed by block_idx

// Live unified-buffer allocations (start -> bytes), so register loads and stores, which take raw addresses,
// are checked to stay inside one.
inline std::map<const uint8_t *, int64_t> &ub_buffers() {
  static std::map<const uint8_t *, int64_t> buffers;
  return buffers;
}

inline Counts &now() {
  if (static_cast<int64_t>(counts.size()) <= block_idx) counts.resize(block_idx + 1);
  return counts[block_idx];
}

// One register instruction (arch35): one register of work.
inline void count_reg(const char *kind) {
  Counts::Vector &v = now().vector[kind];
  ++v.instructions;
  v.repeats += 1;
}

[[noreturn]] inline void fail(const char *what) {
  std::fprintf(stderr, "ascend host shim: %s\n", what);
  std::abort();
}
inline void check(bool ok, const char *what) {
  if (!ok) fail(what);
}
inline float to_float(float v) { return v; }
inline float to_float(half v) { return static_cast<float>(v); }
inline float to_float(int32_t v) { return static_cast<float>(v); }
inline float to_float(bfloat16_t v) {
  uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
template <typename T>
inline T from_float(float v);
template <>
inline float from_float<float>(float v) { return v; }
template <>
inline half from_float<half>(float v) { return static_cast<half>(v); }
template <>
inline bfloat16_t from_float<bfloat16_t>(float v) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return bfloat16_t{static_cast<uint16_t>((bits >> 16) | 0x40u)};
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bfloat16_t{static_cast<uint16_t>(bits >> 16)};
}
}  // namespace shim

#define GET_TILING_DATA(name, ptr)          \
  optiling::PartialRotaryTilingData name;   \
  std::memcpy(&name, (ptr), sizeof(name))
#define TILING_KEY_IS(key) (shim::tiling_key == (key))

// The cores a launch starts (asc-devkit's KernelMetaType, in its order).
enum KernelMetaType : uint8_t { KERNEL_TYPE_AIV_ONLY, KERNEL_TYPE_AIC_ONLY, KERNEL_TYPE_MIX_AIV_1_0 };
#define KERNEL_TASK_TYPE_DEFAULT(value) (shim::now().kernel_type = (value))

namespace AscendC {

inline int64_t GetBlockIdx() { return shim::block_idx; }

enum class HardEvent { MTE2_V, V_MTE3 };
enum class RoundMode { CAST_NONE, CAST_RINT, CAST_FLOOR, UNKNOWN = 0xFF };
enum class QuePosition { VECIN, VECOUT };
enum class TPosition { VECCALC };
enum pipe_t { PIPE_V };
constexpr int EVENT_ID0 = 0;
template <HardEvent E>
inline void SetFlag(int) {}
template <HardEvent E>
inline void WaitFlag(int) {
  ++shim::now().flag_waits;
}
template <pipe_t P>
inline void PipeBarrier() {
  ++shim::now().barriers;
}

// A view of `size` elements of a unified-buffer allocation starting at `base`.
template <typename T>
class LocalTensor {
 public:
  LocalTensor() = default;
  LocalTensor(T *ptr, int64_t size, const uint8_t *base) : ptr_(ptr), size_(size), base_(base) {}
  LocalTensor operator[](int64_t offset) const {
    shim::check(offset >= 0 && offset <= size_, "LocalTensor offset out of range");
    return LocalTensor(ptr_ + offset, size_ - offset, base_);
  }
  template <typename U>
  LocalTensor<U> ReinterpretCast() const {
    return LocalTensor<U>(reinterpret_cast<U *>(ptr_), size_ * static_cast<int64_t>(sizeof(T)) / sizeof(U), base_);
  }
  T GetValue(int64_t i) const {
    shim::check(i >= 0 && i < size_, "GetValue out of range");
    return ptr_[i];
  }
  void SetValue(int64_t i, T v) const {
    shim::check(i >= 0 && i < size_, "SetValue out of range");
    ++shim::now().scalar_writes;
    ptr_[i] = v;
  }
  T *data() const { return ptr_; }
  T *GetPhyAddr() const { return ptr_; }  // the unified-buffer address register code works on
  int64_t size() const { return size_; }
  int64_t byte_offset() const { return reinterpret_cast<const uint8_t *>(ptr_) - base_; }

 private:
  T *ptr_ = nullptr;
  int64_t size_ = 0;
  const uint8_t *base_ = nullptr;
};

template <typename T>
class GlobalTensor {
 public:
  void SetGlobalBuffer(T *ptr) { ptr_ = ptr; }
  GlobalTensor operator[](int64_t offset) const {
    GlobalTensor g;
    g.ptr_ = ptr_ + offset;
    return g;
  }
  T *data() const { return ptr_; }
  T GetValue(uint64_t offset) const {  // a scalar read through the data cache
    ++shim::now().gm_scalar_reads;
    return ptr_[offset];
  }

 private:
  T *ptr_ = nullptr;
};

struct Buffer {
  std::unique_ptr<uint8_t[]> bytes;
  int64_t size = 0;
  template <typename T>
  LocalTensor<T> view() const {
    return LocalTensor<T>(reinterpret_cast<T *>(bytes.get()), size / static_cast<int64_t>(sizeof(T)), bytes.get());
  }
};

template <TPosition P>
class TBuf {
 public:
  template <typename T>
  LocalTensor<T> Get() {  // not const, as in the real TBuf
    return buffer_.view<T>();
  }
  Buffer buffer_;
};

// A queue of `num` buffers (TPipe::InitBuffer): each is allocated, enqueued by its producer, dequeued by
// its consumer (which waits on the producer there), then freed; two buffers let one stage fill the next
// while another drains the last.
template <QuePosition P, int DEPTH>
class TQue {
 public:
  template <typename T>
  LocalTensor<T> AllocTensor() {
    for (size_t k = 0; k < buffers_.size(); ++k) {
      const size_t i = (next_ + k) % buffers_.size();
      if (state_[i] == kFree) {
        state_[i] = kAllocated;
        next_ = i + 1;
        return buffers_[i].template view<T>();
      }
    }
    shim::fail("TQue: AllocTensor with every buffer in use");
  }
  template <typename T>
  void EnQue(const LocalTensor<T> &t) {
    const size_t i = find(t.data());
    shim::check(state_[i] == kAllocated, "TQue: EnQue of a buffer not allocated");
    shim::check(static_cast<int>(fifo_.size()) < DEPTH, "TQue: EnQue beyond the queue depth");
    state_[i] = kQueued;
    fifo_.push_back(i);
  }
  template <typename T>
  LocalTensor<T> DeQue() {
    shim::check(!fifo_.empty(), "TQue: DeQue before EnQue");
    const size_t i = fifo_.front();
    fifo_.pop_front();
    state_[i] = kAllocated;
    ++shim::now().queue_waits;
    return buffers_[i].template view<T>();
  }
  template <typename T>
  void FreeTensor(LocalTensor<T> &t) {  // a non-const reference, as in the real TQue
    const size_t i = find(t.data());
    shim::check(state_[i] == kAllocated, "TQue: FreeTensor of a buffer not held");
    state_[i] = kFree;
  }
  std::vector<Buffer> buffers_;
  std::vector<int> state_;

 private:
  enum { kFree = 0, kAllocated = 1, kQueued = 2 };
  template <typename T>
  size_t find(const T *ptr) const {
    for (size_t i = 0; i < buffers_.size(); ++i) {
      if (reinterpret_cast<const uint8_t *>(ptr) == buffers_[i].bytes.get()) return i;
    }
    shim::fail("TQue: a tensor that is not one of the queue's buffers");
  }
  std::deque<size_t> fifo_;
  size_t next_ = 0;
};

class TPipe {
 public:
  template <QuePosition P, int DEPTH>
  void InitBuffer(TQue<P, DEPTH> &que, int num, int64_t bytes) {
    que.buffers_.resize(num);
    que.state_.assign(num, 0);
    for (auto &buffer : que.buffers_) Allocate(buffer, bytes);
    shim::Counts &c = shim::now();
    c.queue_buffers = c.queue_buffers == 0 || num < c.queue_buffers ? num : c.queue_buffers;
  }
  template <TPosition P>
  void InitBuffer(TBuf<P> &buf, int64_t bytes) {
    Allocate(buf.buffer_, bytes);
  }
  ~TPipe() {
    for (const uint8_t *start : mine_) shim::ub_buffers().erase(start);
  }

 private:
  void Allocate(Buffer &buffer, int64_t bytes) {
    shim::check(bytes % 32 == 0, "UB buffer size not a multiple of 32 bytes");
    used_ += bytes;
    shim::check(used_ <= shim::ub_limit, "the kernel's buffers exceed the unified buffer");
    buffer.bytes.reset(new uint8_t[bytes]);
    std::memset(buffer.bytes.get(), 0xff, bytes);  // garbage: NaN as float, -1 as int
    buffer.size = bytes;
    shim::ub_buffers()[buffer.bytes.get()] = bytes;
    mine_.push_back(buffer.bytes.get());
  }
  int64_t used_ = 0;
  std::vector<const uint8_t *> mine_;
};

struct DataCopyExtParams {
  uint16_t blockCount;
  uint32_t blockLen;   // bytes
  uint32_t srcStride;  // GM -> UB: bytes between blocks in GM; UB -> GM: 32-byte blocks between blocks in UB
  uint32_t dstStride;  // GM -> UB: 32-byte blocks between blocks in UB; UB -> GM: bytes between blocks in GM
  uint32_t rsv;
};

template <typename T>
struct DataCopyPadExtParams {
  bool isPad = false;
  uint8_t leftPadding = 0, rightPadding = 0;
  T paddingValue{};
};

// Strides of one repeat-form vector instruction, in 32-byte blocks.
struct BinaryRepeatParams {
  uint8_t dstBlkStride, src0BlkStride, src1BlkStride;
  uint8_t dstRepStride, src0RepStride, src1RepStride;
};

inline int64_t Align32(int64_t bytes) { return (bytes + 31) / 32 * 32; }

template <typename T>
inline void check_aligned(const LocalTensor<T> &t) {
  shim::check(t.byte_offset() % 32 == 0, "UB operand not 32-byte aligned");
}

inline void count_transfer(shim::Counts::Transfers &c, const DataCopyExtParams &p) {
  ++c.transfers;
  c.bursts += p.blockCount;
  c.bytes += static_cast<int64_t>(p.blockCount) * p.blockLen;
}

// GM -> UB: blockCount blocks of blockLen bytes; each lands 32-byte aligned in UB, its padding undefined.
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                 const DataCopyPadExtParams<T> &) {
  check_aligned(dst);
  shim::check(p.blockLen % sizeof(T) == 0 && p.blockCount <= 4095, "DataCopyPad GM->UB parameters");
  const int64_t pitch = Align32(p.blockLen) + 32 * static_cast<int64_t>(p.dstStride);
  shim::check(p.blockCount * pitch - 32 * static_cast<int64_t>(p.dstStride) <=
                  dst.size() * static_cast<int64_t>(sizeof(T)), "DataCopyPad GM->UB overruns the UB tensor");
  for (int64_t i = 0; i < p.blockCount; ++i) {
    uint8_t *block = reinterpret_cast<uint8_t *>(dst.data()) + i * pitch;
    std::memcpy(block, reinterpret_cast<const uint8_t *>(src.data()) + i * (p.blockLen + int64_t{p.srcStride}),
                p.blockLen);
    std::memset(block + p.blockLen, 0xff, Align32(p.blockLen) - p.blockLen);
  }
  count_transfer(shim::now().mte2, p);
}

// UB -> GM: the inverse layout; only blockLen bytes of each block are written.
template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p) {
  check_aligned(src);
  shim::check(p.blockLen % sizeof(T) == 0 && p.blockCount <= 4095, "DataCopyPad UB->GM parameters");
  const int64_t pitch = Align32(p.blockLen) + 32 * static_cast<int64_t>(p.srcStride);
  shim::check(p.blockCount * pitch - 32 * static_cast<int64_t>(p.srcStride) <=
                  src.size() * static_cast<int64_t>(sizeof(T)), "DataCopyPad UB->GM reads past the UB tensor");
  for (int64_t i = 0; i < p.blockCount; ++i) {
    std::memcpy(reinterpret_cast<uint8_t *>(dst.data()) + i * (p.blockLen + int64_t{p.dstStride}),
                reinterpret_cast<const uint8_t *>(src.data()) + i * pitch, p.blockLen);
  }
  count_transfer(shim::now().mte3, p);
}

// Counts one vector instruction over `elements` elements of `widest`-byte operands, or `repeats` repeats.
inline void count_vector(const char *kind, int64_t elements, int64_t widest, int64_t repeats = -1) {
  shim::Counts::Vector &v = shim::now().vector[kind];
  ++v.instructions;
  v.elements += elements;
  v.repeats += repeats >= 0 ? repeats : (elements * widest + 255) / 256;
}

// Operands of an elementwise op: aligned, in range, and either the same memory as dst or disjoint from it.
template <typename D, typename S>
inline void check_operand(const LocalTensor<D> &dst, const LocalTensor<S> &src, int64_t count) {
  check_aligned(src);
  shim::check(count >= 0 && count <= src.size(), "vector op count exceeds a source tensor");
  const auto *d = reinterpret_cast<const uint8_t *>(dst.data());
  const auto *s = reinterpret_cast<const uint8_t *>(src.data());
  const int64_t dbytes = count * static_cast<int64_t>(sizeof(D)), sbytes = count * static_cast<int64_t>(sizeof(S));
  shim::check(d == s || d + dbytes <= s || s + sbytes <= d, "vector operands partly overlap");
}
template <typename T>
inline void check_dst(const LocalTensor<T> &dst, int64_t count) {
  check_aligned(dst);
  shim::check(count >= 0 && count <= dst.size(), "vector op count exceeds the destination tensor");
}

template <typename D, typename S>
void Cast(const LocalTensor<D> &dst, const LocalTensor<S> &src, RoundMode mode, uint32_t count) {
  check_dst(dst, count);
  check_operand(dst, src, count);
  for (uint32_t i = 0; i < count; ++i) {
    const float v = shim::to_float(src.data()[i]);
    if constexpr (std::is_same_v<D, int32_t>) {
      shim::check(std::isfinite(v), "Cast to int32 of a non-finite value");
      dst.data()[i] = static_cast<int32_t>(mode == RoundMode::CAST_FLOOR ? std::floor(v) : std::nearbyint(v));
    } else {
      dst.data()[i] = shim::from_float<D>(v);
    }
  }
  count_vector("Cast", count, sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S));
}

#define MS_ROTARY_SHIM_BINARY(name, op)                                                                  \
  template <typename T>                                                                                  \
  void name(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, uint32_t n) {    \
    check_dst(dst, n);                                                                                   \
    check_operand(dst, a, n);                                                                            \
    check_operand(dst, b, n);                                                                            \
    for (uint32_t i = 0; i < n; ++i) dst.data()[i] = a.data()[i] op b.data()[i];                         \
    count_vector(#name, n, sizeof(T));                                                                   \
  }
MS_ROTARY_SHIM_BINARY(Mul, *)
MS_ROTARY_SHIM_BINARY(Add, +)
MS_ROTARY_SHIM_BINARY(Sub, -)
MS_ROTARY_SHIM_BINARY(And, &)
MS_ROTARY_SHIM_BINARY(Or, |)
#undef MS_ROTARY_SHIM_BINARY

#define MS_ROTARY_SHIM_SCALAR(name, expr)                                                                \
  template <typename T>                                                                                  \
  void name(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &s, int32_t n) {               \
    check_dst(dst, n);                                                                                   \
    check_operand(dst, src, n);                                                                          \
    for (int32_t i = 0; i < n; ++i) {                                                                    \
      const T x = src.data()[i];                                                                         \
      dst.data()[i] = (expr);                                                                            \
    }                                                                                                    \
    count_vector(#name, n, sizeof(T));                                                                   \
  }
MS_ROTARY_SHIM_SCALAR(Adds, x + s)
MS_ROTARY_SHIM_SCALAR(Muls, x * s)
MS_ROTARY_SHIM_SCALAR(Maxs, x > s ? x : s)
MS_ROTARY_SHIM_SCALAR(Mins, x < s ? x : s)
#undef MS_ROTARY_SHIM_SCALAR

template <typename T>
void Duplicate(const LocalTensor<T> &dst, const T &value, int32_t n) {
  check_dst(dst, n);
  for (int32_t i = 0; i < n; ++i) dst.data()[i] = value;
  count_vector("Duplicate", n, sizeof(T));
}

// dst[i] = first + i.
template <typename T>
void CreateVecIndex(const LocalTensor<T> &dst, const T &first, uint32_t n) {
  check_dst(dst, n);
  for (uint32_t i = 0; i < n; ++i) dst.data()[i] = first + static_cast<T>(i);
  count_vector("CreateVecIndex", n, sizeof(T));
}

// Repeat form, continuous mask, block stride 1: repeat r computes the first `mask` elements at
// dst + r * dstRepStride blocks from src0 + r * src0RepStride and src1 + r * src1RepStride blocks
// (src1RepStride 0 applies one row to every repeat).
#define MS_ROTARY_SHIM_BINARY_REPEAT(name, op)                                                                \
  template <typename T>                                                                                       \
  void name(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, uint64_t mask,      \
            uint8_t repeats, const BinaryRepeatParams &p) {                                                   \
    constexpr int64_t kPerBlock = 32 / sizeof(T);                                                             \
    shim::check(mask >= 1 && mask <= 8 * kPerBlock, #name " mask out of range");                             \
    shim::check(p.dstBlkStride == 1 && p.src0BlkStride == 1 && p.src1BlkStride == 1,                        \
                "shim: block stride must be 1");                                                              \
    auto extent = [&](int64_t rep) { return repeats == 0 ? 0 : (repeats - 1) * rep * kPerBlock + int64_t(mask); }; \
    check_dst(dst, extent(p.dstRepStride));                                                                   \
    check_operand(dst, a, extent(p.src0RepStride));                                                           \
    check_aligned(b);                                                                                         \
    shim::check(extent(p.src1RepStride) <= b.size(), #name " src1 out of range");                            \
    for (int64_t r = 0; r < repeats; ++r) {                                                                   \
      T *d = dst.data() + r * p.dstRepStride * kPerBlock;                                                     \
      const T *x = a.data() + r * p.src0RepStride * kPerBlock, *y = b.data() + r * p.src1RepStride * kPerBlock; \
      for (uint64_t i = 0; i < mask; ++i) d[i] = x[i] op y[i];                                                \
    }                                                                                                         \
    count_vector(#name, static_cast<int64_t>(mask) * repeats, sizeof(T), repeats);                            \
  }
MS_ROTARY_SHIM_BINARY_REPEAT(Mul, *)
MS_ROTARY_SHIM_BINARY_REPEAT(And, &)
#undef MS_ROTARY_SHIM_BINARY_REPEAT

// dst[i] = the element at byte offset base + offsets[i] of src; src and dst must not share memory.
template <typename T>
void Gather(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<uint32_t> &offsets, uint32_t base,
            uint32_t count) {
  check_dst(dst, count);
  check_aligned(src);
  check_aligned(offsets);
  shim::check(count <= offsets.size(), "Gather count exceeds the offsets");
  int64_t read_end = 0;  // bytes of src read
  for (uint32_t i = 0; i < count; ++i) {
    const int64_t byte = static_cast<int64_t>(base) + offsets.data()[i];
    shim::check(byte % sizeof(T) == 0 && byte / static_cast<int64_t>(sizeof(T)) < src.size(), "Gather offset");
    read_end = byte + static_cast<int64_t>(sizeof(T)) > read_end ? byte + static_cast<int64_t>(sizeof(T)) : read_end;
  }
  const auto *d = reinterpret_cast<const uint8_t *>(dst.data());
  const auto *s = reinterpret_cast<const uint8_t *>(src.data());
  shim::check(d + count * sizeof(T) <= s || s + read_end <= d, "Gather source and destination share memory");
  for (uint32_t i = 0; i < count; ++i) dst.data()[i] = src.data()[(base + offsets.data()[i]) / sizeof(T)];
  count_vector("Gather", count, sizeof(T));
}


// ---- Register-based API of the 950 (arch35), as rotary_kernel_arch35.h uses it ----
// A register holds 256 bytes; a mask register here is a prefix of them (every mask the kernel makes is one).
// Semantics from asc-devkit's Reg documents (kernel/ascend/README.md lists them): LoadAlign reads a whole
// register from a 32-byte aligned address (DIST_UNPACK_B16: 64 16-bit values, each followed by a zero 16-bit
// element); StoreAlign writes the active lanes (DIST_PACK_B32: the low halves of the active 32-bit lanes,
// back to back); Cast with RegLayout::ZERO (ONE) reads or writes 16-bit values in the low (high) half of
// each 32-bit lane; inactive lanes of a result are zeroed (MaskMergeMode::ZEROING); DeInterleave splits the
// 128 values of two registers into even and odd ones, Interleave is its inverse. Each call is counted as one register
// instruction of its kind ("Reg::Mul", ...), each VF call as "VF".
namespace Reg {

enum class LoadDist { DIST_NORM, DIST_UNPACK_B16 };
enum class StoreDist { DIST_PACK_B32, DIST_NORM };
enum class RegLayout { UNKNOWN = -1, ZERO, ONE };
enum class SatMode { UNKNOWN = -1, NO_SAT, SAT };
enum class MaskMergeMode { UNKNOWN, MERGING, ZEROING };
enum class MaskPattern { ALL };

struct CastTrait {
  RegLayout layoutMode = RegLayout::UNKNOWN;
  SatMode satMode = SatMode::UNKNOWN;
  MaskMergeMode mrgMode = MaskMergeMode::UNKNOWN;
  RoundMode roundMode = RoundMode::UNKNOWN;
};

constexpr int64_t kRegBytes = 256;

template <typename T>
struct RegTensor {
  alignas(32) uint8_t bytes[kRegBytes];
  template <typename U>
  U get(int64_t i) const {
    U v;
    std::memcpy(&v, bytes + i * sizeof(U), sizeof(U));
    return v;
  }
  template <typename U>
  void set(int64_t i, U v) {
    std::memcpy(bytes + i * sizeof(U), &v, sizeof(U));
  }
};

struct MaskReg {
  int64_t active_bytes = 0;
  bool lane(int64_t i, int64_t lane_bytes) const { return (i + 1) * lane_bytes <= active_bytes; }
};

using shim::count_reg;

// A mask of the first min(left, lanes of T) lanes; left drops by that many lanes.
template <typename T>
MaskReg UpdateMask(uint32_t &left) {
  constexpr uint32_t kLanesOfT = kRegBytes / sizeof(T);
  const uint32_t lanes = left < kLanesOfT ? left : kLanesOfT;
  left -= lanes;
  count_reg("Reg::UpdateMask");
  return MaskReg{static_cast<int64_t>(lanes * sizeof(T))};
}

template <typename T, MaskPattern P = MaskPattern::ALL>
MaskReg CreateMask() {
  count_reg("Reg::CreateMask");
  return MaskReg{kRegBytes};
}

// [ptr, ptr + bytes) inside one unified-buffer allocation, ptr 32-byte aligned.
inline void check_ub(const void *ptr, int64_t bytes, const char *what) {
  const auto *p = static_cast<const uint8_t *>(ptr);
  auto it = shim::ub_buffers().upper_bound(p);
  shim::check(it != shim::ub_buffers().begin(), what);
  --it;
  shim::check(p + bytes <= it->first + it->second, what);
  shim::check((p - it->first) % 32 == 0, "register load or store address not 32-byte aligned");
}

template <typename T, LoadDist D = LoadDist::DIST_NORM, typename U>
void LoadAlign(RegTensor<U> &dst, T *src) {
  static_assert(sizeof(T) == sizeof(U), "LoadAlign: register and memory types differ");
  if constexpr (D == LoadDist::DIST_NORM) {
    check_ub(src, kRegBytes, "LoadAlign reads outside the unified buffer");
    std::memcpy(dst.bytes, src, kRegBytes);
  } else {
    static_assert(sizeof(T) == 2, "DIST_UNPACK_B16 loads 16-bit values");
    check_ub(src, kRegBytes / 2, "LoadAlign (unpack) reads outside the unified buffer");
    for (int64_t i = 0; i < kRegBytes / 4; ++i) {
      dst.template set<uint16_t>(2 * i, reinterpret_cast<const uint16_t *>(src)[i]);
      dst.template set<uint16_t>(2 * i + 1, 0);
    }
  }
  count_reg("Reg::LoadAlign");
}

template <typename T, StoreDist D = StoreDist::DIST_NORM, typename U>
void StoreAlign(T *dst, RegTensor<U> &src, MaskReg &mask) {
  static_assert(sizeof(T) == sizeof(U), "StoreAlign: register and memory types differ");
  if constexpr (D == StoreDist::DIST_NORM) {
    check_ub(dst, mask.active_bytes, "StoreAlign writes outside the unified buffer");
    std::memcpy(dst, src.bytes, mask.active_bytes);
  } else {
    static_assert(sizeof(T) == 2, "DIST_PACK_B32 stores 16-bit values");
    const int64_t n = mask.active_bytes / 4;  // active 32-bit lanes
    check_ub(dst, 2 * n, "StoreAlign (pack) writes outside the unified buffer");
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<uint16_t *>(dst)[i] = src.template get<uint16_t>(2 * i);
  }
  count_reg("Reg::StoreAlign");
}

// fp32 <-> 16-bit, the 16-bit values in the low (RegLayout::ZERO) or high (ONE) halves of the 32-bit
// lanes: widening dst[i] = src16[2i + layout]; narrowing zeroes dst, then dst16[2i + layout] = src[i].
template <typename D, typename S, const CastTrait &TRAIT, typename RD, typename RS>
void Cast(RegTensor<RD> &dst, RegTensor<RS> &src, MaskReg &mask) {
  constexpr bool kWidening = std::is_same_v<D, float>;
  shim::check((TRAIT.layoutMode == RegLayout::ZERO || TRAIT.layoutMode == RegLayout::ONE) &&
                  TRAIT.mrgMode == MaskMergeMode::ZEROING,
              "shim: Cast supports RegLayout::ZERO and ONE with zeroing");
  const int64_t half = TRAIT.layoutMode == RegLayout::ONE ? 1 : 0;
  RegTensor<RD> out{};
  std::memset(out.bytes, 0, kRegBytes);
  for (int64_t i = 0; i < kRegBytes / 4; ++i) {
    if (!mask.lane(i, 4)) continue;
    if constexpr (kWidening) {
      static_assert(sizeof(S) == 2, "shim: Cast widens 16-bit values");
      out.template set<float>(i, shim::to_float(src.template get<S>(2 * i + half)));
    } else {
      static_assert(sizeof(D) == 2 && std::is_same_v<S, float>, "shim: Cast narrows fp32");
      shim::check(TRAIT.roundMode == RoundMode::CAST_RINT, "shim: Cast narrows to nearest even only");
      out.template set<D>(2 * i + half, shim::from_float<D>(src.template get<float>(i)));
    }
  }
  dst = out;
  count_reg("Reg::Cast");
}

#define MS_ROTARY_SHIM_REG_BINARY(name, op)                                            \
  template <typename T = float, typename U>                                            \
  void name(RegTensor<U> &dst, RegTensor<U> &a, RegTensor<U> &b, MaskReg &mask) {      \
    static_assert(std::is_same_v<U, float>, "shim: register arithmetic in fp32");      \
    RegTensor<U> out{};                                                                \
    for (int64_t i = 0; i < kRegBytes / 4; ++i) {                                      \
      const float v = a.template get<float>(i) op b.template get<float>(i);            \
      out.template set<float>(i, mask.lane(i, 4) ? v : 0.0f);                          \
    }                                                                                  \
    dst = out;                                                                         \
    count_reg("Reg::" #name);                                                          \
  }
MS_ROTARY_SHIM_REG_BINARY(Mul, *)
MS_ROTARY_SHIM_REG_BINARY(Add, +)
MS_ROTARY_SHIM_REG_BINARY(Sub, -)
#undef MS_ROTARY_SHIM_REG_BINARY

// Bitwise or of 16-bit registers.
template <typename T = uint16_t, typename U>
void Or(RegTensor<U> &dst, RegTensor<U> &a, RegTensor<U> &b, MaskReg &mask) {
  static_assert(std::is_same_v<U, uint16_t>, "shim: Or of uint16_t registers");
  RegTensor<U> out{};
  for (int64_t i = 0; i < kRegBytes / 2; ++i) {
    const uint16_t v = static_cast<uint16_t>(a.template get<uint16_t>(i) | b.template get<uint16_t>(i));
    out.template set<uint16_t>(i, mask.lane(i, 2) ? v : uint16_t{0});
  }
  dst = out;
  count_reg("Reg::Or");
}

// (dst0, dst1) = a permutation of the 128 values of (src0, src1): value i of the result is value from(i) of
// the sources, counting src0's 64 then src1's.
template <typename U, typename From>
void shuffle(RegTensor<U> &dst0, RegTensor<U> &dst1, RegTensor<U> &src0, RegTensor<U> &src1, From from) {
  static_assert(sizeof(U) == 4, "shim: register shuffles of 32-bit values");
  constexpr int64_t n = kRegBytes / 4;
  RegTensor<U> lo{}, hi{};
  for (int64_t i = 0; i < 2 * n; ++i) {
    const int64_t j = from(i);
    const U v = j < n ? src0.template get<U>(j) : src1.template get<U>(j - n);
    (i < n ? lo : hi).template set<U>(i < n ? i : i - n, v);
  }
  dst0 = lo, dst1 = hi;
}

// (dst0, dst1) = the even and the odd values of src0 then src1.
template <typename T = float, typename U>
void DeInterleave(RegTensor<U> &dst0, RegTensor<U> &dst1, RegTensor<U> &src0, RegTensor<U> &src1) {
  constexpr int64_t n = kRegBytes / 4;
  shuffle(dst0, dst1, src0, src1, [](int64_t i) { return i < n ? 2 * i : 2 * (i - n) + 1; });
  count_reg("Reg::DeInterleave");
}

// (dst0, dst1) = src0[0], src1[0], src0[1], src1[1], ...: the inverse of DeInterleave.
template <typename T = float, typename U>
void Interleave(RegTensor<U> &dst0, RegTensor<U> &dst1, RegTensor<U> &src0, RegTensor<U> &src1) {
  constexpr int64_t n = kRegBytes / 4;
  shuffle(dst0, dst1, src0, src1, [](int64_t i) { return i % 2 == 0 ? i / 2 : n + i / 2; });
  count_reg("Reg::Interleave");
}

}  // namespace Reg

}  // namespace AscendC

// Starts a vector function (VF) on the vector unit: on the host, a call.
template <auto F, typename... Args>
void asc_vf_call(Args &&...args) {
  AscendC::count_vector("VF", 0, 4, 0);
  F(args...);
}

#endif  // MS_ROTARY_HOST_SHIM_KERNEL_OPERATOR_H_
