#pragma once
// Host-side pieces of the alias ops shared by the CPU and CUDA kernels: argument
// checks and shapes. Schemas live in csrc/ops.cpp.
#include "alias/alias.h"
#include "common/checks.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace wrs::alias {

inline void check_weights(const at::Tensor& weights) {
  check_floating(weights, "alias_table", "weights");
  check_has_last_dim(weights, "alias_table", "weights");
  TORCH_CHECK(weights.size(-1) <= kMaxCategories, "alias_table: weights has ", weights.size(-1),
              " categories; the 8-byte table row holds at most 2^31 per row");
}

inline void check_table(const at::Tensor& table) {
  TORCH_CHECK(table.scalar_type() == at::kLong,
              "alias_sample: table must be an int64 tensor made by alias_table, got ",
              table.scalar_type());
  check_has_last_dim(table, "alias_sample", "table");
  TORCH_CHECK(table.size(-1) <= kMaxCategories, "alias_sample: table has ", table.size(-1),
              " buckets per row; alias_table makes at most 2^31");
}

inline void check_num_samples(int64_t num_samples) {
  TORCH_CHECK(num_samples >= 0, "alias_sample: num_samples must be non-negative, got ",
              num_samples);
}

inline at::ScalarType sample_dtype(std::optional<at::ScalarType> dtype) {
  const at::ScalarType t = dtype.value_or(at::kLong);
  TORCH_CHECK(t == at::kLong || t == at::kInt, "alias_sample: dtype must be torch.int64 or torch.int32, got ", t);
  return t;
}

inline std::vector<int64_t> sample_shape(const at::Tensor& table, int64_t num_samples) {
  auto shape = table.sizes().vec();
  shape.back() = num_samples;
  return shape;
}

}  // namespace wrs::alias
