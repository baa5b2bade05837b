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

#include <algorithm>
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

// Blocks of subsequences first, first + 1, ..., first + count - 1 (count <= kPhiloxBatch):
// the words philox_block gives, with the ten rounds of all of them computed side by side
// so the compiler vectorizes the 32 x 32 -> 64-bit multiplies (7 ns a block for eight
// against 16 one at a time on the CI machine; below four, one at a time).
constexpr int kPhiloxBatch = 8;
inline void philox_blocks(const PhiloxSeed& s, uint64_t first, int count, at::detail::UINT4* out) {
  if (count < 4) {  // too few to pay for the side-by-side loop
    for (int j = 0; j < count; ++j) out[j] = philox_block(s, first + static_cast<uint64_t>(j));
    return;
  }
  const uint64_t offset = s.offset / 4;
  uint32_t c0[kPhiloxBatch], c1[kPhiloxBatch], c2[kPhiloxBatch], c3[kPhiloxBatch];
  for (int j = 0; j < count; ++j) {
    const uint64_t sub = first + static_cast<uint64_t>(j);
    c0[j] = static_cast<uint32_t>(offset);
    c1[j] = static_cast<uint32_t>(offset >> 32);
    c2[j] = static_cast<uint32_t>(sub);
    c3[j] = static_cast<uint32_t>(sub >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(s.seed), k1 = static_cast<uint32_t>(s.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int j = 0; j < count; ++j) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[j];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[j];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[j] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = static_cast<uint32_t>(p1);
      c3[j] = static_cast<uint32_t>(p0);
      c0[j] = n0;
      c2[j] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int j = 0; j < count; ++j) out[j] = at::detail::UINT4{{c0[j], c1[j], c2[j], c3[j]}};
}

// Blocks first, first + 1, ..., end - 1 of a stream, one by one in that order, computed
// kPhiloxBatch at a time (philox_blocks): consecutive rows' blocks are consecutive, so a
// task's rows share batches instead of starting one per row (a row of a few draws would
// otherwise take them one at a time, at twice the cost each).
class PhiloxBlocks {
 public:
  PhiloxBlocks(const PhiloxSeed& seed, uint64_t first, uint64_t end) : seed_(seed), next_(first), end_(end) {}
  const at::detail::UINT4& operator()() {
    if (pos_ == count_) {
      TORCH_INTERNAL_ASSERT_DEBUG_ONLY(next_ < end_, "PhiloxBlocks: a block past the end");
      count_ = static_cast<int>(std::min<uint64_t>(kPhiloxBatch, end_ - next_));
      philox_blocks(seed_, next_, count_, batch_);
      next_ += static_cast<uint64_t>(count_);
      pos_ = 0;
    }
    return batch_[pos_++];
  }

 private:
  PhiloxSeed seed_;
  uint64_t next_, end_;
  at::detail::UINT4 batch_[kPhiloxBatch];
  int pos_ = 0, count_ = 0;
};

// Sources of 32-bit draws, one per subsequence, for code that consumes a variable number
// (rejection samplers): streams(subsequence)() yields the subsequence's draws in order.
struct PhiloxStreams {
  PhiloxSeed seed;
  at::philox_engine operator()(uint64_t subsequence) const {
    return at::philox_engine(seed.seed, subsequence, seed.offset / 4);
  }
};

}  // namespace wrs
