#pragma once
// top_logprobs: what sample_logits(..., top_logprobs=n) returns beside its tokens, in one
// read of the row on CUDA (top_logprobs_cuda.cu) and a row at a time on the CPU. For row b
// of a law x [B, V] with an optional per-row scale s_b (1 / temperature):
//   1. y_i = float32(x_i) * s_b (float32, as llm.h's values); the row is invalid where it
//      holds NaN or +inf or no finite y;
//   2. lse = max y + log(sum exp(y_i - max y)), the sum in float64;
//   3. a token t's log-prob is float32(double(y_t) - lse); its rank is one plus the number of
//      items with y_i > y_t (the exact order of the log-probs);
//   4. the top n: the n largest composite keys (y_i, then the lower index first), most likely
//      first, with their log-probs.
// Invalid rows (and tokens outside [0, V)) get NaN log-probs and rank 0; an invalid row's top
// tokens are 0, 1, ..., n - 1.
#include "llm/llm.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace wrs::llm {

// Distinct for distinct items (V < 2^31): the value's order key, then the lower index.
C10_HOST_DEVICE inline uint64_t composite_key(float y, int64_t i) {
  return (static_cast<uint64_t>(order_key(y)) << 32) | (0xFFFFFFFFull - static_cast<uint64_t>(i));
}

C10_HOST_DEVICE inline int64_t key_index(uint64_t key) { return static_cast<int64_t>(0xFFFFFFFFull - (key & 0xFFFFFFFFull)); }

C10_HOST_DEVICE inline float key_value(uint64_t key) {
  const uint32_t k = static_cast<uint32_t>(key >> 32);
  const uint32_t b = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
  float y;
#if defined(__CUDA_ARCH__)
  y = __uint_as_float(b);
#else
  __builtin_memcpy(&y, &b, sizeof(y));
#endif
  return y;
}

C10_HOST_DEVICE inline float logprob_of(float y, double lse) {
  return static_cast<float>(static_cast<double>(y) - lse);
}

// The op's arguments, checked: law [B, V] contiguous, tokens int64 [B, S], scale float32 [B]
// or undefined.
struct TopLogprobsCall {
  int64_t rows = 0, v = 0, samples = 0, n = 0;
  at::Tensor x, tokens, scale;
};

TopLogprobsCall prepare_top_logprobs(const at::Tensor& law, const at::Tensor& tokens, int64_t n,
                                     const std::optional<at::Tensor>& scale);

// The op's outputs, uninitialised: log-probs float32 [B, S], top tokens int64 [B, n], their
// log-probs float32 [B, n], ranks int64 [B, S].
struct TopLogprobsOut {
  at::Tensor lp, top_tokens, top_lp, ranks;
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> tuple() const { return {lp, top_tokens, top_lp, ranks}; }
};

TopLogprobsOut empty_top_logprobs(const TopLogprobsCall& c);

// sample_llm_top_logprobs: sample_logits' draw with raw log-probs (llm.h) and top_logprobs
// over logits / T (1 on greedy rows) for the drawn tokens: (tokens, log-probs, top tokens,
// their log-probs, ranks), shaped [..., S], [..., S], [..., n], [..., n], [..., S].
using SampleTopLogprobs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

void check_top_n(const char* op, int64_t n, int64_t v);

// The two ops one after the other, through the dispatcher (the CPU kernel; on CUDA, the calls
// whose top n the thresholds kernel does not rank).
SampleTopLogprobs sample_then_top_logprobs(const at::Tensor& logits, int64_t num_samples, int64_t n,
                                           const std::optional<at::Tensor>& temperature, double temperature_value,
                                           const std::optional<at::Tensor>& top_k, int64_t top_k_value,
                                           const std::optional<at::Tensor>& top_p, double top_p_value,
                                           const std::optional<at::Tensor>& min_p, double min_p_value,
                                           const std::optional<at::Tensor>& seeds,
                                           const std::optional<at::Generator>& generator);

}  // namespace wrs::llm
