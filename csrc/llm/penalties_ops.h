#pragma once
// penalize_logits's arguments, checked and made contiguous for the CPU and CUDA kernels
// (penalties.h states what they do).
#include <ATen/core/Tensor.h>

#include <optional>

namespace wrs::llm {

struct PenaltyCall {
  int64_t rows = 0, v = 0;
  at::Tensor x;                                // [B, V] logits, contiguous
  at::Tensor bitmask;                          // int32 [B, ceil(V / 32)] or undefined
  at::Tensor masked, bias_ids, output, prompt; // int64 [B, n] each, or undefined
  at::Tensor bias_values;                      // float32 [B, n] with bias_ids
  at::Tensor repetition, frequency, presence;  // float32 [B] or undefined
};

PenaltyCall prepare_penalties(const at::Tensor& logits, const std::optional<at::Tensor>& allowed_bitmask,
                              const std::optional<at::Tensor>& masked_ids, const std::optional<at::Tensor>& bias_ids,
                              const std::optional<at::Tensor>& bias_values, const std::optional<at::Tensor>& output_ids,
                              const std::optional<at::Tensor>& prompt_ids,
                              const std::optional<at::Tensor>& repetition_penalty,
                              const std::optional<at::Tensor>& frequency_penalty,
                              const std::optional<at::Tensor>& presence_penalty);

}  // namespace wrs::llm
