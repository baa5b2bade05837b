#pragma once
// Counter-based random numbers (Philox4x32-10), the same stream on CPU and CUDA.
//
// A stream is (seed, subsequence, offset): the counter's high 64 bits are the
// subsequence, its low 64 bits the offset in 128-bit blocks. Kernels use the element
// (or pair of elements) they produce as the subsequence, so results depend only on
// (seed, offset), never on the thread count or the grid. at::philox_engine (CPU) and
// curandStatePhilox4_32_10_t (CUDA) lay the counter out the same way.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/PhiloxRNGEngine.h>

#include <mutex>
#include <optional>

namespace wrs {

struct PhiloxSeed {
  uint64_t seed;
  uint64_t offset;  // in 32-bit draws; always a multiple of 4
};

// CPU: one 64-bit draw from the (default or given) CPU generator keys the Philox
// stream of a call, so torch.manual_seed reproduces it and successive calls differ.
inline PhiloxSeed cpu_philox_seed(const std::optional<at::Generator>& generator) {
  auto* gen = at::get_generator_or_default<at::CPUGeneratorImpl>(
      generator, at::detail::getDefaultCPUGenerator());
  std::lock_guard<std::mutex> lock(gen->mutex_);
  return PhiloxSeed{gen->random64(), 0};
}

// Four 32-bit draws of block `subsequence` of the stream (CPU side).
inline at::detail::UINT4 philox_block(const PhiloxSeed& s, uint64_t subsequence) {
  at::philox_engine engine(s.seed, subsequence, s.offset / 4);
  at::detail::UINT4 out;
  for (auto& v : out) v = engine();
  return out;
}

// Sources of 32-bit draws, one per subsequence, for code that consumes a variable number
// (rejection samplers): streams(subsequence)() yields the subsequence's draws in order.
struct PhiloxStreams {
  PhiloxSeed seed;
  at::philox_engine operator()(uint64_t subsequence) const {
    return at::philox_engine(seed.seed, subsequence, seed.offset / 4);
  }
};

}  // namespace wrs
