#pragma once
// Shared between the CPU (.cpp) and CUDA (.cu) translation units: the same inline
// functions serve both, so the CPU kernels are a bit-exact reference for the GPU ones.
#include <c10/macros/Macros.h>
#include <cstdint>

namespace wrs {

// High 64 bits of the 128-bit product a * b.
C10_HOST_DEVICE inline uint64_t mul_hi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

}  // namespace wrs
