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

// The hash table's capacity of a penalty plan (penalties.h): a power of two >= 2 and at
// least twice the ids the lists hold, so that probes stay short.
int64_t plan_capacity(const PenaltyCall& c);

// A plan given to sample_llm(overrides=): int32 [rows, plan_stride(V, C)] on the input's device, C a
// power of two >= 2. Returns C. Raises naming `overrides` otherwise.
int64_t check_plan(const char* op, const at::Tensor& plan, int64_t rows, int64_t v, const at::Tensor& input);

// The CPU sampler's view of a plan: float32 [rows, V] values of the plan's rule.
at::Tensor apply_plan_cpu(const at::Tensor& x2d, const at::Tensor& plan, int64_t cap);

}  // namespace wrs::llm
