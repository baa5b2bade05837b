#pragma once
// Host-side pieces of the alias ops shared by the CPU and CUDA kernels: argument
// checks and shapes. Schemas live in csrc/ops.cpp.
#include "alias/alias.h"
#include "alias/sections.h"
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

// Which sampler serves a call. ordered=True (i.i.d. draws in order) is the baseline;
// ordered=False may group draws by table section, which pays once a table outgrows L1
// and is drawn from about once per 8 buckets or more.
inline SampleMethod sample_method(bool ordered, c10::string_view method, int64_t buckets,
                                  int64_t num_samples, int64_t rows) {
  TORCH_CHECK(method == "auto" || method == "baseline" || method == "cached" || method == "shared",
              "alias_sample: method must be 'auto', 'baseline', 'cached' or 'shared', got '", method, "'");
  if (method == "baseline" || (method == "auto" && ordered)) return SampleMethod::kBaseline;
  TORCH_CHECK(!ordered, "alias_sample: method='", method,
              "' draws samples grouped by table section, not in order; pass ordered=False");
  if (method == "auto") {
    const bool sectioned = buckets > kSharedSectionBuckets && num_samples >= buckets / 8;
    if (!sectioned) return SampleMethod::kBaseline;
  }
  TORCH_CHECK(rows < (int64_t{1} << 31), "alias_sample: sectioned sampling takes at most 2^31 rows, got ", rows);
  return method == "cached" ? SampleMethod::kCached : SampleMethod::kShared;
}

inline std::vector<int64_t> sample_shape(const at::Tensor& table, int64_t num_samples) {
  auto shape = table.sizes().vec();
  shape.back() = num_samples;
  return shape;
}

}  // namespace wrs::alias
