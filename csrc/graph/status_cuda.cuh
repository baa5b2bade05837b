#pragma once
// The flags of a graph call on CUDA: read back (a sync) when the call validates outside
// CUDA-graph capture, else a device word the kernels write and nobody reads.
#include "common/cuda_utils.cuh"
#include "common/status_word.h"

#include <optional>

namespace wrs::graph {

class CallStatus {
 public:
  CallStatus(bool validate, const at::TensorOptions& opts, cudaStream_t stream) {
    if (validate && !stream_is_capturing(stream)) {
      word_.emplace(opts, stream);
      bits_ = word_->bits();
    } else {
      scratch_ = zeroed_status_word(opts, stream);
      bits_ = status_bits(scratch_);
    }
  }
  uint32_t* bits() const { return bits_; }
  // The flags, or 0 where the call does not read them.
  uint32_t read() { return word_.has_value() ? word_->read() : 0u; }

 private:
  std::optional<StatusWord> word_;
  at::Tensor scratch_;
  uint32_t* bits_ = nullptr;
};

}  // namespace wrs::graph
