#pragma once
// torch.multinomial's contract: checks shared by the composite (any device) and the
// CUDA single-pass kernel.
#include "common/checks.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/Generator.h>

#include <optional>

namespace wrs::multinomial {

constexpr const char* kOp = "multinomial";

// Shape, dtype and count checks (no data read).
void check_shape(const at::Tensor& input, int64_t num_samples, bool replacement);

// Beyond common/checks.h's WeightFlags: a row with fewer nonzero weights than the
// samples asked for without replacement.
constexpr uint32_t kTooFewNonzero = 1u << 8;

// Raises torch.multinomial's errors for value flags (WeightFlags | kTooFewNonzero).
void raise_value_flags(uint32_t flags, int64_t num_samples);

// Alias tables with replacement, exponential keys + top-k without: every shape, every device.
at::Tensor multinomial_composite(const at::Tensor& input, int64_t num_samples, bool replacement,
                                 std::optional<at::Generator> generator);

}  // namespace wrs::multinomial
