#pragma once
// Host side of the LLM samplers, shared by the CPU and CUDA entries: argument checks and
// the call's shape (llm.h says what the kernels compute).
#include "llm/llm.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <vector>

namespace wrs::llm {

// One call, its input seen as [rows, v].
struct Call {
  at::Tensor x;  // the input, contiguous: rows of v items
  int64_t rows = 0;
  int64_t v = 0;
  int64_t samples = 1;
  bool logits = true;
  int64_t logprobs = kNoLogprobs;
  Controls controls{};
  const int32_t* plan = nullptr;  // sample_llm(overrides=): a penalty plan's rows (penalties.h), or nullptr
  int64_t plan_stride = 0;
  int64_t plan_cap = 0;
  std::vector<at::Tensor> keep;     // per-row control tensors, contiguous and of the kernels' dtypes
  c10::SmallVector<int64_t, 6> out_shape;  // [..., samples]: the outputs, allocated in it (no views)
};

// Checks shapes, dtypes, devices and scalar ranges (no data read) and resolves the controls.
Call prepare(const char* op, const at::Tensor& input, int64_t num_samples, bool logits,
             const std::optional<at::Tensor>& temperature, double temperature_value,
             const std::optional<at::Tensor>& top_k, int64_t top_k_value, const std::optional<at::Tensor>& top_p,
             double top_p_value, const std::optional<at::Tensor>& min_p, double min_p_value,
             const std::optional<at::Tensor>& seeds, int64_t logprobs);

// speculative_accept's checks: draft_probs [B, S, V], draft_tokens [B, S], target_probs [B, S + 1, V].
void check_speculative(const at::Tensor& draft_probs, const at::Tensor& draft_tokens, const at::Tensor& target_probs);

}  // namespace wrs::llm
