#pragma once
// CUDA side of csrc/common/philox.h: torch's CUDA generator hands out (seed, offset)
// through philox_cuda_state, which also works under CUDA-graph capture (the offset is
// then read from device memory at replay), and cuRAND's Philox produces the numbers.
#include "common/philox.h"

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/PhiloxUtils.cuh>
#include <curand_kernel.h>

#include <mutex>
#include <optional>

namespace wrs {

// `draws_per_subsequence`: the most 32-bit numbers any one subsequence consumes in the
// call; the generator's offset advances by that much, so the next call is independent.
inline at::PhiloxCudaState cuda_philox_state(const std::optional<at::Generator>& generator,
                                             c10::DeviceIndex device,
                                             uint64_t draws_per_subsequence) {
  auto* gen = at::get_generator_or_default<at::CUDAGeneratorImpl>(
      generator, at::cuda::detail::getDefaultCUDAGenerator(device));
  std::lock_guard<std::mutex> lock(gen->mutex_);
  const uint64_t increment = (draws_per_subsequence + 3) / 4 * 4;
  return gen->philox_cuda_state(increment);
}

// The call's (seed, offset); under graph capture the offset is read at replay. Once per thread.
__device__ inline PhiloxSeed philox_seed(const at::PhiloxCudaState& state) {
  const auto seeds = at::cuda::philox::unpack(state);
  return PhiloxSeed{std::get<0>(seeds), std::get<1>(seeds)};
}

// Philox4x32-10 block `block` of subsequence `subsequence` under `seed`: cuRAND's counter
// layout (curand_init(seed, subsequence, 4 * block) then curand4 give the same words).
__device__ inline uint4 philox_block_at(uint64_t seed, uint64_t block, uint64_t subsequence) {
  return curand_Philox4x32_10(make_uint4(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                         static_cast<uint32_t>(subsequence), static_cast<uint32_t>(subsequence >> 32)),
                              make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
}

// The four 32-bit draws of Philox block `subsequence` of the call's stream (CUDA side of
// philox_block in philox.h, with the same counter layout). One Philox evaluation: curand4
// on a fresh state would also compute the block after it, for the state it leaves.
__device__ inline uint4 philox_block_cuda(const PhiloxSeed& s, uint64_t subsequence) {
  return philox_block_at(s.seed, s.offset / 4, subsequence);
}

// CUDA side of PhiloxStreams (philox.h): the same draws, from cuRAND.
struct CurandBits {
  curandStatePhilox4_32_10_t state;
  __device__ uint32_t operator()() { return curand(&state); }
};

struct CurandStreams {
  PhiloxSeed seed;
  __device__ CurandBits operator()(uint64_t subsequence) const {
    CurandBits bits;
    curand_init(seed.seed, subsequence, seed.offset, &bits.state);
    return bits;
  }
};

}  // namespace wrs
