// Runs the CPU kernel in place and out of place, on 1 thread and on 2, on buffers of exactly the tensors'
// sizes, so a build with AddressSanitizer stops at any read or write past them (test_kernel_memory.py).
//   kernel_memcheck dy_dtype cos_dtype mode start end conjugate B S N D cb cs cn in_file out_file [norm]
// in_file: dy, cos, sin bytes back to back; out_file gets, for 1 then 2 threads, dy rotated in place and then
// the out-of-place output. With `norm`, the head norm's paths run too (rotary_kernel.h, HeadNorm: the forward
// in place and out of place, the backward's dx and fp32 weight gradient, a weight of exactly D floats).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rotary_kernel.h"

namespace {

std::vector<unsigned char> read_part(std::FILE *f, size_t bytes) {
  std::vector<unsigned char> part(bytes);  // exactly `bytes`: the sanitizer's red zone starts right after
  if (std::fread(part.data(), 1, bytes, f) != bytes) std::exit(3);
  return part;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 16 && !(argc == 17 && std::string(argv[16]) == "norm")) {
    std::fprintf(stderr, "usage: %s dy_dtype cos_dtype mode start end conjugate B S N D cb cs cn in out [norm]\n",
                 argv[0]);
    return 2;
  }
  ms_rotary::RotaryProblem p{};
  p.dy_dtype = ms_rotary::dtype_from_name(argv[1]);
  p.cos_dtype = p.sin_dtype = ms_rotary::dtype_from_name(argv[2]);
  p.rotary_mode = std::atoll(argv[3]);
  p.start = std::atoll(argv[4]);
  p.end = std::atoll(argv[5]);
  p.conjugate = std::atoi(argv[6]) != 0;
  for (int i = 0; i < 4; ++i) p.dy_shape[i] = std::atoll(argv[7 + i]);
  for (int i = 0; i < 3; ++i) p.cos_shape[i] = p.sin_shape[i] = std::atoll(argv[11 + i]);
  p.cos_shape[3] = p.sin_shape[3] = p.end - p.start;

  const size_t dy_item = p.dy_dtype == ms_rotary::kFloat32 ? 4 : 2;
  const size_t cos_item = p.cos_dtype == ms_rotary::kFloat32 ? 4 : 2;
  const size_t dy_bytes = dy_item * p.dy_shape[0] * p.dy_shape[1] * p.dy_shape[2] * p.dy_shape[3];
  const size_t cos_bytes = cos_item * p.cos_shape[0] * p.cos_shape[1] * p.cos_shape[2] * p.cos_shape[3];
  std::FILE *in = std::fopen(argv[14], "rb");
  if (in == nullptr) return 3;
  std::vector<unsigned char> dy = read_part(in, dy_bytes), cos = read_part(in, cos_bytes);
  std::vector<unsigned char> sin = read_part(in, cos_bytes);
  std::fclose(in);
  std::FILE *result = std::fopen(argv[15], "wb");
  if (result == nullptr) return 5;
  p.cos = cos.data();
  p.sin = sin.data();
  for (int threads = 1; threads <= 2; ++threads) {
    std::vector<unsigned char> in_place = dy, out(dy_bytes);
    p.dy = in_place.data();
    p.out = nullptr;
    if (ms_rotary::run_rotary(p, threads) != ms_rotary::kOk) return 4;
    p.dy = dy.data();
    p.out = out.data();
    if (ms_rotary::run_rotary(p, threads) != ms_rotary::kOk) return 4;
    if (std::fwrite(in_place.data(), 1, dy_bytes, result) != dy_bytes ||
        std::fwrite(out.data(), 1, dy_bytes, result) != dy_bytes) {
      return 5;
    }
  }
  if (std::fclose(result) != 0) return 5;
  if (argc == 17) {
    const int64_t D = p.dy_shape[3];
    std::vector<float> weight(D, 1.25f), weight_grad(D);
    p.norm.weight = weight.data();
    p.norm.weight_dtype = ms_rotary::kFloat32;
    p.norm.eps = 1e-6f;
    p.norm.offset = 1.0f;
    for (int threads = 1; threads <= 2; ++threads) {
      std::vector<unsigned char> in_place = dy, out(dy_bytes), dx(dy_bytes);
      p.conjugate = false;
      p.dy = in_place.data();
      p.out = nullptr;
      if (ms_rotary::run_rotary(p, threads) != ms_rotary::kOk) return 6;
      p.dy = dy.data();
      p.out = out.data();
      if (ms_rotary::run_rotary(p, threads) != ms_rotary::kOk) return 6;
      p.conjugate = true;  // the backward: dy the output's gradient, x the forward's input
      p.norm.x = in_place.data();
      p.out = dx.data();
      p.norm.weight_grad = weight_grad.data();
      if (ms_rotary::run_rotary(p, threads) != ms_rotary::kOk) return 6;
      p.norm.x = nullptr;
      p.norm.weight_grad = nullptr;
    }
  }
  return 0;
}
