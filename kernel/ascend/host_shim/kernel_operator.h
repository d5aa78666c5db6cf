// Host-side stand-in for the few AscendC APIs the rotary kernel uses (ms_rotary's own, not CANN's):
// the kernel sources compile with g++ and run on the CPU, one "core" (block) after another. Buffers are
// separate heap allocations of their exact size, so AddressSanitizer sees any overrun, and each TPipe
// checks that what it allocates fits the unified buffer size the tiling was computed for.
#ifndef MS_ROTARY_HOST_SHIM_KERNEL_OPERATOR_H_
#define MS_ROTARY_HOST_SHIM_KERNEL_OPERATOR_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "../op_host/ms_rotary_partial_rotary_mul_tiling.h"

#define __global__
#define __aicore__
#define __gm__
using GM_ADDR = uint8_t *;
using half = _Float16;

struct bfloat16_t {
  uint16_t bits;
};

namespace shim {
extern int64_t block_idx;
extern int64_t tiling_key;
extern int64_t ub_limit;  // bytes of unified buffer per core

[[noreturn]] inline void fail(const char *what) {
  std::fprintf(stderr, "ascend host shim: %s\n", what);
  std::abort();
}
inline void check(bool ok, const char *what) {
  if (!ok) fail(what);
}
inline float to_float(float v) { return v; }
inline float to_float(half v) { return static_cast<float>(v); }
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
inline bfloat16_t from_float<bfloat16_t>(float v) {
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

namespace AscendC {

inline int64_t GetBlockIdx() { return shim::block_idx; }

enum class HardEvent { MTE2_V, V_MTE3 };
enum class RoundMode { CAST_NONE, CAST_RINT };
enum class QuePosition { VECIN, VECOUT };
enum class TPosition { VECCALC };
enum pipe_t { PIPE_V };
constexpr int EVENT_ID0 = 0;
template <HardEvent E>
inline void SetFlag(int) {}
template <HardEvent E>
inline void WaitFlag(int) {}
template <pipe_t P>
inline void PipeBarrier() {}

// A view of `size` elements of a unified-buffer allocation.
template <typename T>
class LocalTensor {
 public:
  LocalTensor() = default;
  LocalTensor(T *ptr, int64_t size) : ptr_(ptr), size_(size) {}
  LocalTensor operator[](int64_t offset) const {
    shim::check(offset >= 0 && offset <= size_, "LocalTensor offset out of range");
    return LocalTensor(ptr_ + offset, size_ - offset);
  }
  template <typename U>
  LocalTensor<U> ReinterpretCast() const {
    return LocalTensor<U>(reinterpret_cast<U *>(ptr_), size_ * static_cast<int64_t>(sizeof(T)) / sizeof(U));
  }
  T GetValue(int64_t i) const {
    shim::check(i >= 0 && i < size_, "GetValue out of range");
    return ptr_[i];
  }
  void SetValue(int64_t i, T v) const {
    shim::check(i >= 0 && i < size_, "SetValue out of range");
    ptr_[i] = v;
  }
  T *data() const { return ptr_; }
  int64_t size() const { return size_; }

 private:
  T *ptr_ = nullptr;
  int64_t size_ = 0;
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

 private:
  T *ptr_ = nullptr;
};

struct Buffer {
  std::unique_ptr<uint8_t[]> bytes;
  int64_t size = 0;
};

class TPipe;

template <TPosition P>
class TBuf {
 public:
  template <typename T>
  LocalTensor<T> Get() const {
    return LocalTensor<T>(reinterpret_cast<T *>(buffer_.bytes.get()), buffer_.size / static_cast<int64_t>(sizeof(T)));
  }
  Buffer buffer_;
};

template <QuePosition P, int DEPTH>
class TQue {
 public:
  template <typename T>
  LocalTensor<T> AllocTensor() {
    shim::check(!allocated_, "TQue: AllocTensor twice without FreeTensor");
    allocated_ = true;
    return LocalTensor<T>(reinterpret_cast<T *>(buffer_.bytes.get()), buffer_.size / static_cast<int64_t>(sizeof(T)));
  }
  template <typename T>
  void EnQue(const LocalTensor<T> &) {
    queued_ = true;
  }
  template <typename T>
  LocalTensor<T> DeQue() {
    shim::check(queued_, "TQue: DeQue before EnQue");
    queued_ = false;
    return LocalTensor<T>(reinterpret_cast<T *>(buffer_.bytes.get()), buffer_.size / static_cast<int64_t>(sizeof(T)));
  }
  template <typename T>
  void FreeTensor(const LocalTensor<T> &) {
    allocated_ = false;
  }
  Buffer buffer_;

 private:
  bool allocated_ = false, queued_ = false;
};

class TPipe {
 public:
  template <QuePosition P, int DEPTH>
  void InitBuffer(TQue<P, DEPTH> &que, int num, int64_t bytes) {
    Allocate(que.buffer_, num * bytes);
  }
  template <TPosition P>
  void InitBuffer(TBuf<P> &buf, int64_t bytes) {
    Allocate(buf.buffer_, bytes);
  }

 private:
  void Allocate(Buffer &buffer, int64_t bytes) {
    shim::check(bytes % 32 == 0, "UB buffer size not a multiple of 32 bytes");
    used_ += bytes;
    shim::check(used_ <= shim::ub_limit, "the kernel's buffers exceed the unified buffer");
    buffer.bytes.reset(new uint8_t[bytes]);
    buffer.size = bytes;
  }
  int64_t used_ = 0;
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

inline int64_t Align32(int64_t bytes) { return (bytes + 31) / 32 * 32; }

// GM -> UB: blockCount blocks of blockLen bytes; each lands 32-byte aligned in UB.
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                 const DataCopyPadExtParams<T> &) {
  const int64_t pitch = Align32(p.blockLen) + 32 * static_cast<int64_t>(p.dstStride);
  shim::check(p.blockCount * pitch - 32 * static_cast<int64_t>(p.dstStride) <=
                  dst.size() * static_cast<int64_t>(sizeof(T)), "DataCopyPad GM->UB overruns the UB tensor");
  for (int64_t i = 0; i < p.blockCount; ++i) {
    std::memcpy(reinterpret_cast<uint8_t *>(dst.data()) + i * pitch,
                reinterpret_cast<const uint8_t *>(src.data()) + i * (p.blockLen + static_cast<int64_t>(p.srcStride)),
                p.blockLen);
  }
}

// UB -> GM: the inverse layout.
template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p) {
  const int64_t pitch = Align32(p.blockLen) + 32 * static_cast<int64_t>(p.srcStride);
  shim::check(p.blockCount * pitch - 32 * static_cast<int64_t>(p.srcStride) <=
                  src.size() * static_cast<int64_t>(sizeof(T)), "DataCopyPad UB->GM reads past the UB tensor");
  for (int64_t i = 0; i < p.blockCount; ++i) {
    std::memcpy(reinterpret_cast<uint8_t *>(dst.data()) + i * (p.blockLen + static_cast<int64_t>(p.dstStride)),
                reinterpret_cast<const uint8_t *>(src.data()) + i * pitch, p.blockLen);
  }
}

template <typename T>
inline void check_count(const LocalTensor<T> &t, uint32_t count) {
  shim::check(count <= t.size(), "vector op count exceeds the tensor");
}

template <typename D, typename S>
void Cast(const LocalTensor<D> &dst, const LocalTensor<S> &src, RoundMode, uint32_t count) {
  check_count(dst, count);
  check_count(src, count);
  for (uint32_t i = 0; i < count; ++i) dst.data()[i] = shim::from_float<D>(shim::to_float(src.data()[i]));
}

#define MS_ROTARY_SHIM_BINARY(name, op)                                                               \
  template <typename T>                                                                               \
  void name(const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b, uint32_t n) { \
    check_count(dst, n);                                                                              \
    check_count(a, n);                                                                                \
    check_count(b, n);                                                                                \
    for (uint32_t i = 0; i < n; ++i) dst.data()[i] = a.data()[i] op b.data()[i];                      \
  }
MS_ROTARY_SHIM_BINARY(Mul, *)
MS_ROTARY_SHIM_BINARY(Add, +)
MS_ROTARY_SHIM_BINARY(Sub, -)
#undef MS_ROTARY_SHIM_BINARY

// dst[i] = the element at byte offset base + offsets[i] of src.
template <typename T>
void Gather(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<uint32_t> &offsets, uint32_t base,
            uint32_t count) {
  check_count(dst, count);
  check_count(offsets, count);
  for (uint32_t i = 0; i < count; ++i) {
    const int64_t byte = static_cast<int64_t>(base) + offsets.data()[i];
    shim::check(byte % sizeof(T) == 0 && byte / static_cast<int64_t>(sizeof(T)) < src.size(), "Gather offset");
    dst.data()[i] = src.data()[byte / sizeof(T)];
  }
}

}  // namespace AscendC

#endif  // MS_ROTARY_HOST_SHIM_KERNEL_OPERATOR_H_
