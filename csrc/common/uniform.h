#pragma once
// Uniform doubles from 32-bit random words, the same on the CPU and the GPU.
#include <c10/macros/Macros.h>

#include <cstdint>

namespace wrs {

// A uniform in (0, 1), both ends excluded, from two 32-bit words (53 bits).
C10_HOST_DEVICE inline double open_uniform(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 32) | lo;
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

// The same from a source of 32-bit words (bits() yields the next one).
template <typename Bits>
C10_HOST_DEVICE inline double open_uniform(Bits& bits) {
  const uint32_t hi = bits();
  const uint32_t lo = bits();
  return open_uniform(hi, lo);
}

}  // namespace wrs
